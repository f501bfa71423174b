import Foundation
// Shared by the server tests: a CA and a server certificate made with the openssl CLI, and real clients
// (curl, nghttp, h2load, python3) run as child processes without blocking Swift's cooperative threads.
import MarqueeTestSupport
import Network
import Synchronization

/// The result of a finished child process.
struct ServerTestProcessResult {
    var status: Int32
    var output: String
    var errors: String
    var all: String { output + errors }
}

enum ServerTestTools {
    /// A scratch folder of its own for one test.
    static func temporaryFolder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("marquee-server-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Runs `executable` (found on PATH) and returns when it exits; output goes through files, so a large
    /// output cannot stall the child.
    /// Without `folder`, it works in a scratch folder of its own and removes it afterwards.
    static func run(_ executable: String, _ arguments: [String], in folder: URL? = nil) async throws -> ServerTestProcessResult {
        guard let folder else {
            let scratch = try temporaryFolder()
            defer { try? FileManager.default.removeItem(at: scratch) }
            return try await run(executable, arguments, in: scratch)
        }
        let run = try await ChildProcess.run(executable, arguments, directory: folder.path)
        return ServerTestProcessResult(status: run.status, output: run.stdout, errors: run.stderr)
    }
}

/// A test CA and a server certificate for localhost and 127.0.0.1, made once per test process.
struct ServerTestCertificates: Sendable {
    let folder: URL
    var caFile: String { folder.appendingPathComponent("ca.pem").path }
    var certificateFile: String { folder.appendingPathComponent("server.pem").path }
    var keyFile: String { folder.appendingPathComponent("server.key").path }

    /// Made at the first use; its folder is removed when the test process exits.
    static let shared = Task {
        let certificates = try await make()
        madeFolder.withLock { $0 = certificates.folder }
        atexit { if let folder = ServerTestCertificates.madeFolder.withLock({ $0 }) { try? FileManager.default.removeItem(at: folder) } }
        return certificates
    }
    private static let madeFolder = Mutex<URL?>(nil)

    static func make() async throws -> ServerTestCertificates {
        let folder = try ServerTestTools.temporaryFolder()
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(to: folder.appendingPathComponent("ext.cnf"), atomically: true, encoding: .utf8)
        let steps: [[String]] = [
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
                "-out", "ca.pem", "-days", "2", "-subj", "/CN=Marquee Test CA",
            ],
            [
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key",
                "-out", "server.csr", "-subj", "/CN=localhost",
            ],
            [
                "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
            ],
        ]
        for step in steps {
            let result = try await ServerTestTools.run("openssl", step, in: folder)
            guard result.status == 0 else { throw CertificateError(detail: result.all) }
        }
        return ServerTestCertificates(folder: folder)
    }

    func context() throws -> TLSServerContext {
        try TLSServerContext(certificateChainFile: certificateFile, privateKeyFile: keyFile)
    }

    struct CertificateError: Error { var detail: String }
}

/// Which slow requests (`/slow/ID`, `/stuck/ID`) have reached their handler, and which handlers have returned,
/// so a test can act while one is in flight, or once it is over, without guessing how long that takes.
enum ServerTestSignals {
    private static let started = Mutex<Set<String>>([])
    private static let finished = Mutex<Set<String>>([])

    static func markStarted(path: String) {
        _ = started.withLock { $0.insert(path) }
    }

    static func waitUntilStarted(path: String) async throws {
        guard try await eventually({ started.withLock { $0.contains(path) } }) else { throw TimedOut(path: path) }
    }

    /// The handler for `path` is about to return its response.
    static func markFinished(path: String) {
        _ = finished.withLock { $0.insert(path) }
    }

    static func waitUntilFinished(path: String) async throws {
        guard try await eventually({ finished.withLock { $0.contains(path) } }) else { throw TimedOut(path: path) }
    }

    private static let released = Mutex<Set<String>>([])

    /// Holds a `/stuck/ID` handler until the test releases it (or 60 s pass), so a test about shutdown
    /// grace periods does not depend on how fast a loaded machine runs timers.
    static func waitForRelease(path: String) async {
        _ = try? await eventually { released.withLock { $0.contains(path) } }
    }

    static func release(path: String) {
        _ = released.withLock { $0.insert(path) }
    }

    struct TimedOut: Error { var path: String }
}
