// The settings peer below is nghttp2 in server mode; nothing else in the tests touches C.
internal import CLibEvent
internal import CNGHTTP2
internal import COpenSSL
// Real HTTP/2 peers for the client tests, on loopback: nghttpd (Debian's nghttp2-server) and nginx, with
// a throwaway CA and server certificate made by the openssl command line in a temporary folder.
// Process launches and waits are blocking, so they run on a Dispatch thread, never on the Swift pool.
import Foundation
import MarqueeTestSupport

@testable import Network

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
    let run = try ChildProcess.runBlocking(executable, arguments, directory: directory?.path, stderr: .standardOutput)
    let output = run.stdout
    guard run.status == 0 else {
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
            try clientRun(
                openssl,
                ["req", "-x509"] + ec + [
                    "-keyout", "\(name).key", "-out", "\(name).pem", "-days", "2",
                    "-subj", "/CN=Marquee test \(name)",
                ], in: directory)
        }
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(to: directory.appendingPathComponent("server.ext"), atomically: true, encoding: .utf8)
        try clientRun(openssl, ["req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], in: directory)
        try clientRun(
            openssl,
            [
                "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
            ], in: directory)
    }
}

/// A TCP socket bound to a free port on 127.0.0.1, and the port; nil when it could not be made.
func clientLoopbackSocket() -> (fd: Int32, port: Int)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else {
        close(fd)
        return nil
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A listener on 127.0.0.1 that accepts one connection, reads what comes (a TLS ClientHello) and hangs up;
/// returns its port (nil when it could not listen).
func clientHangUpPeer() -> Int? {
    guard let (listener, port) = clientLoopbackSocket() else { return nil }
    guard listen(listener, 4) == 0 else {
        close(listener)
        return nil
    }
    Thread.detachNewThread {
        defer { close(listener) }
        let peer = accept(listener, nil, nil)
        guard peer >= 0 else { return }
        var hello = [UInt8](repeating: 0, count: 4096)
        _ = read(peer, &hello, hello.count)
        close(peer)
    }
    return port
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
func clientFreePort() -> Int {
    guard let (fd, port) = clientLoopbackSocket() else { return 0 }
    close(fd)
    return port
}

/// A port of 127.0.0.1 bound but not listening, held until the caller closes `fd`: connections to it are refused,
/// and no other test's listener can take it meanwhile. (A port only found free could be taken by a concurrent
/// test's listener, whose accept loop then served the connection meant to be refused.)
func clientRefusingPort() -> (fd: Int32, port: Int)? { clientLoopbackSocket() }

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
    let process: ChildProcess
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
        process = try ChildProcess(
            executable, arguments, directory: directory.path, stdout: .file(logFile.path), stderr: .standardOutput)
        let deadline = Date().addingTimeInterval(10)
        while !clientPortAccepts(port, host: host) {
            guard process.isRunning, Date() < deadline else {
                throw ClientPeerError(description: "\(executable) did not start: \(self.log)")
            }
            usleep(20_000)  // a poll for the port (synchronous code), not a fixed wait
        }
    }

    /// The server's output so far.
    var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    /// SIGKILL: the peer dies without a word.
    func kill() {
        process.signal(SIGKILL)
        _ = process.waitBlocking()
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// nghttpd serving a document root with a 1 MiB file, a small file and an empty file.
enum ClientNGHTTPD {
    static let bigFileSize = 1 << 20

    static func start(
        host: String = "127.0.0.1", port: Int? = nil, maxConcurrentStreams: Int? = nil,
        echoUpload: Bool = false, verbose: Bool = false
    ) async throws -> ClientPeerProcess {
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
            return try ClientPeerProcess(
                executable: "/usr/sbin/nginx", arguments: ["-p", root.path, "-c", root.appendingPathComponent("nginx.conf").path],
                port: port, directory: root)
        }
    }
}

// MARK: A peer of our own that lowers its stream limit mid-connection

/// A minimal HTTP/2 server on nghttp2 (server mode) over libevent + OpenSSL, for what no Debian peer
/// does: announce `initialLimit` concurrent streams, then, after `lowerAfter` requests, send a new
/// SETTINGS lowering the limit to 1. It answers every request with 200 after `responseDelay`, and counts,
/// from its side, streams opened after the client acknowledged the lower limit while another was open.
final class ClientSettingsPeer: @unchecked Sendable {
    let loop: EventLoop
    private(set) var port = 0
    let initialLimit: Int
    let lowerAfter: Int
    let responseDelay: Duration
    private let sslContext: OpaquePointer
    private var listener: OpaquePointer?
    private var connections: [ClientSettingsPeerConnection] = []
    // Loop-thread statistics.
    fileprivate var requests = 0
    fileprivate var violations = 0
    fileprivate var mostOpenBeforeLowering = 0
    fileprivate var mostOpenAfterAck = 0

    var origin: HTTP2Origin { HTTP2Origin(host: "127.0.0.1", port: port) }

    /// Starts the peer on its own loop, listening on a free loopback port.
    static func start(initialLimit: Int, lowerAfter: Int, responseDelay: Duration) async throws -> ClientSettingsPeer {
        let peer = try ClientSettingsPeer(initialLimit: initialLimit, lowerAfter: lowerAfter, responseDelay: responseDelay)
        try await peer.loop.submit { try peer.listen() }
        return peer
    }

    private init(initialLimit: Int, lowerAfter: Int, responseDelay: Duration) throws {
        self.initialLimit = initialLimit
        self.lowerAfter = lowerAfter
        self.responseDelay = responseDelay
        let certificates = ClientCertificates.shared
        guard let context = SSL_CTX_new(TLS_server_method()),
            SSL_CTX_use_certificate_chain_file(context, certificates.serverCertificate) == 1,
            SSL_CTX_use_PrivateKey_file(context, certificates.serverKey, SSL_FILETYPE_PEM) == 1
        else {
            throw ClientPeerError(description: "cannot set up the peer's TLS context")
        }
        // ALPN: choose h2 when offered.
        SSL_CTX_set_alpn_select_cb(
            context,
            { _, out, outLength, input, inputLength, _ in
                guard let input, let out, let outLength else { return SSL_TLSEXT_ERR_NOACK }
                var index = 0
                while index < Int(inputLength) {
                    let length = Int(input[index])
                    if length == 2 && index + 2 < Int(inputLength) && input[index + 1] == UInt8(ascii: "h") && input[index + 2] == UInt8(ascii: "2") {
                        out.pointee = input + index + 1
                        outLength.pointee = 2
                        return SSL_TLSEXT_ERR_OK
                    }
                    index += 1 + length
                }
                return SSL_TLSEXT_ERR_ALERT_FATAL
            }, nil)
        sslContext = context
        loop = EventLoop(name: "settings-peer")
    }

    /// Stops the loop and frees the listener and connections.
    func stop() {
        loop.execute { [self] in
            if let listener { evconnlistener_free(listener) }
            listener = nil
            for connection in connections { connection.close() }
            connections.removeAll()
        }
        loop.shutdown()
        SSL_CTX_free(sslContext)
    }

    /// (requests, violations, most open before lowering, most open after the client's ACK)
    func statistics() async throws -> (requests: Int, violations: Int, mostOpenBefore: Int, mostOpenAfterAck: Int) {
        try await loop.submit { [self] in (requests, violations, mostOpenBeforeLowering, mostOpenAfterAck) }
    }

    private func listen() throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let listener = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                evconnlistener_new_bind(
                    loop.base,
                    { _, fd, _, _, context in
                        Unmanaged<ClientSettingsPeer>.fromOpaque(context!).takeUnretainedValue().accept(fd)
                    }, Unmanaged.passUnretained(self).toOpaque(), UInt32(LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE), -1,
                    $0, Int32(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard let listener else { throw ClientPeerError(description: "cannot listen") }
        self.listener = listener
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(evconnlistener_get_fd(listener), $0, &length) }
        }
        port = Int(UInt16(bigEndian: bound.sin_port))
    }

    private func accept(_ fd: Int32) {
        guard let ssl = SSL_new(sslContext),
            let bev = bufferevent_openssl_socket_new(
                loop.base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                Int32(BEV_OPT_CLOSE_ON_FREE.rawValue | BEV_OPT_DEFER_CALLBACKS.rawValue))
        else {
            close(fd)
            return
        }
        connections.append(ClientSettingsPeerConnection(peer: self, bev: bev))
    }

    fileprivate func streamOpened(openStreams: Int, lowered: Bool, acknowledged: Bool) {
        if !lowered { mostOpenBeforeLowering = max(mostOpenBeforeLowering, openStreams) }
        if acknowledged {
            mostOpenAfterAck = max(mostOpenAfterAck, openStreams)
            if openStreams > 1 { violations += 1 }
        }
    }
}

/// One server-side connection of `ClientSettingsPeer`.
private final class ClientSettingsPeerConnection {
    unowned let peer: ClientSettingsPeer
    let bev: OpaquePointer
    var session: OpaquePointer?
    var openStreams = 0
    var lowered = false
    var acknowledged = false

    init(peer: ClientSettingsPeer, bev: OpaquePointer) {
        self.peer = peer
        self.bev = bev
        bufferevent_setcb(
            bev,
            { _, context in
                Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue().read()
            }, nil,
            { _, events, context in
                let connection = Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue()
                if events & Int16(BEV_EVENT_CONNECTED) != 0 { connection.start() }
            }, Unmanaged.passUnretained(self).toOpaque())
        bufferevent_enable(bev, Int16(EV_READ | EV_WRITE))
    }

    func close() {
        bufferevent_setcb(bev, nil, nil, nil, nil)
        bufferevent_free(bev)
        if let session { nghttp2_session_del(session) }
        session = nil
    }

    private func start() {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_send_callback(callbacks) { _, data, length, _, context in
            let connection = Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue()
            bufferevent_write(connection.bev, data, length)
            return length
        }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, context in
            let connection = Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue()
            if frame!.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
                connection.openStreams += 1
                connection.peer.streamOpened(
                    openStreams: connection.openStreams, lowered: connection.lowered,
                    acknowledged: connection.acknowledged)
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, context in
            Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue().received(frame!)
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, _, _, context in
            Unmanaged<ClientSettingsPeerConnection>.fromOpaque(context!).takeUnretainedValue().openStreams -= 1
            return 0
        }
        nghttp2_session_server_new(&session, callbacks, Unmanaged.passUnretained(self).toOpaque())
        var settings = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue),
                value: UInt32(peer.initialLimit))
        ]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1)
        flush()
    }

    private func read() {
        guard let session else { return }
        let input = bufferevent_get_input(bev)
        let length = evbuffer_get_length(input)
        let consumed = nghttp2_session_mem_recv(session, evbuffer_pullup(input, -1), length)
        if consumed > 0 { evbuffer_drain(input, consumed) }
        flush()
    }

    private func flush() {
        if let session { nghttp2_session_send(session) }
    }

    private func received(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch UInt32(header.type) {
        case NGHTTP2_SETTINGS.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
            if lowered { acknowledged = true }
        case NGHTTP2_HEADERS.rawValue where endStream, NGHTTP2_DATA.rawValue where endStream:
            let id = header.stream_id
            peer.requests += 1
            if peer.requests == peer.lowerAfter {
                lowered = true
                var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 1)]
                nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1)
            }
            peer.loop.schedule(after: peer.responseDelay) { [self] in respond(to: id) }
        default:
            break
        }
    }

    private func respond(to id: Int32) {
        guard let session else { return }
        var name = Array(":status".utf8)
        var value = Array("200".utf8)
        name.withUnsafeMutableBufferPointer { name in
            value.withUnsafeMutableBufferPointer { value in
                var field = nghttp2_nv(
                    name: name.baseAddress, value: value.baseAddress, namelen: name.count,
                    valuelen: value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
                _ = nghttp2_submit_response(session, id, &field, 1, nil)
            }
        }
        flush()
    }
}
