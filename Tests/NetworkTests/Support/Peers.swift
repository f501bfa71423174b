// Real HTTP/2 peers for the client tests, on loopback: nghttpd (Debian's nghttp2-server) and nginx, with
// a throwaway CA and server certificate made by the openssl command line in a temporary folder.
// Process launches and waits are blocking, so they run on a Dispatch thread, never on the Swift pool.
import Foundation
import Network

/// Runs blocking work on a Dispatch thread and awaits its result.
func clientOffPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}

struct ClientPeerError: Error, CustomStringConvertible {
    var description: String
}

/// Runs a command to completion; throws with its output when it fails.
@discardableResult
func clientRun(_ executable: String, _ arguments: [String], in directory: URL? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = directory }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw ClientPeerError(description: "\(executable) \(arguments.joined(separator: " ")) failed: \(output)")
    }
    return output
}

/// A temporary folder holding a test CA, a server certificate for localhost and 127.0.0.1, and a second,
/// unrelated CA.
final class ClientCertificates: Sendable {
    let directory: URL
    var caFile: String { directory.appendingPathComponent("ca.pem").path }
    var otherCAFile: String { directory.appendingPathComponent("other-ca.pem").path }
    var serverKey: String { directory.appendingPathComponent("server.key").path }
    var serverCertificate: String { directory.appendingPathComponent("server.pem").path }

    /// Made once per test process, removed when it exits.
    static let shared: ClientCertificates = {
        do {
            let certificates = try ClientCertificates()
            atexit { try? FileManager.default.removeItem(at: ClientCertificates.shared.directory) }
            return certificates
        } catch {
            fatalError("cannot make test certificates: \(error)")
        }
    }()

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("marquee-h2client-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let openssl = "/usr/bin/openssl"
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        for name in ["ca", "other-ca"] {
            try clientRun(openssl, ["req", "-x509"] + ec + ["-keyout", "\(name).key", "-out", "\(name).pem", "-days", "2",
                                    "-subj", "/CN=Marquee test \(name)"], in: directory)
        }
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(to: directory.appendingPathComponent("server.ext"), atomically: true, encoding: .utf8)
        try clientRun(openssl, ["req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], in: directory)
        try clientRun(openssl, ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                                "-out", "server.pem", "-days", "2", "-extfile", "server.ext"], in: directory)
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
func clientFreePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            _ = bind(fd, $0, length)
            _ = getsockname(fd, $0, &length)
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// True once something accepts TCP connections on host:port.
func clientPortAccepts(_ port: Int, host: String = "127.0.0.1") -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// A server process on a loopback port, stopped (SIGKILL) when the test lets go of it.
final class ClientPeerProcess: @unchecked Sendable {
    let process: Process
    let host: String
    let port: Int
    let directory: URL
    let logFile: URL

    var origin: HTTP2Origin { HTTP2Origin(host: host, port: port) }

    init(executable: String, arguments: [String], host: String = "127.0.0.1", port: Int, directory: URL) throws {
        self.host = host
        self.port = port
        self.directory = directory
        logFile = directory.appendingPathComponent("server.log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let log = try FileHandle(forWritingTo: logFile)
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = directory
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let deadline = Date().addingTimeInterval(10)
        while !clientPortAccepts(port, host: host) {
            guard process.isRunning, Date() < deadline else {
                throw ClientPeerError(description: "\(executable) did not start: \(self.log)")
            }
            usleep(20_000)
        }
    }

    /// The server's output so far.
    var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    /// SIGKILL: the peer dies without a word.
    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// nghttpd serving a document root with a 1 MiB file, a small file and an empty file.
enum ClientNGHTTPD {
    static let bigFileSize = 1 << 20

    static func start(host: String = "127.0.0.1", port: Int? = nil, maxConcurrentStreams: Int? = nil,
                      echoUpload: Bool = false, verbose: Bool = false) async throws -> ClientPeerProcess {
        let certificates = ClientCertificates.shared
        return try await clientOffPool {
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("marquee-nghttpd-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let big = (0..<bigFileSize).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
            try Data(big).write(to: root.appendingPathComponent("big"))
            try Data("hello\n".utf8).write(to: root.appendingPathComponent("small"))
            try Data().write(to: root.appendingPathComponent("empty"))
            let port = port ?? clientFreePort()
            var arguments = ["-a", host, "-d", root.path]
            if let maxConcurrentStreams { arguments += ["-m", String(maxConcurrentStreams)] }
            if echoUpload { arguments.append("--echo-upload") }
            if verbose { arguments.append("-v") }
            arguments += [String(port), certificates.serverKey, certificates.serverCertificate]
            return try ClientPeerProcess(executable: "/usr/sbin/nghttpd", arguments: arguments, host: host, port: port, directory: root)
        }
    }

    /// The bytes of the served `big` file.
    static var bigFile: [UInt8] { (0..<bigFileSize).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) } }
}

/// nginx that answers 200 "ok" to everything and, over HTTP/2, sends GOAWAY after `requestsPerConnection`
/// requests on a connection (keepalive_requests), which is how a real peer says GOAWAY mid-burst.
/// Without `http2` it offers only HTTP/1.1 through ALPN.
enum ClientNginx {
    static func start(requestsPerConnection: Int = 1000, http2: Bool = true) async throws -> ClientPeerProcess {
        let certificates = ClientCertificates.shared
        return try await clientOffPool {
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("marquee-nginx-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let port = clientFreePort()
            let config = """
                worker_processes 1;
                master_process off;
                daemon off;
                user root;
                error_log \(root.path)/error.log;
                pid \(root.path)/nginx.pid;
                events { worker_connections 256; }
                http {
                    access_log off;
                    client_body_temp_path \(root.path)/body;
                    proxy_temp_path \(root.path)/proxy;
                    fastcgi_temp_path \(root.path)/fastcgi;
                    uwsgi_temp_path \(root.path)/uwsgi;
                    scgi_temp_path \(root.path)/scgi;
                    server {
                        listen 127.0.0.1:\(port) ssl\(http2 ? " http2" : "");
                        ssl_certificate \(certificates.serverCertificate);
                        ssl_certificate_key \(certificates.serverKey);
                        keepalive_requests \(requestsPerConnection);
                        location / { return 200 "ok"; }
                    }
                }
                """
            try config.write(to: root.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
            return try ClientPeerProcess(executable: "/usr/sbin/nginx", arguments: ["-p", root.path, "-c", root.appendingPathComponent("nginx.conf").path],
                                         port: port, directory: root)
        }
    }
}
