import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Synchronization
import Testing

/// The built `marquee` binary (Scripts/test builds it first; `BuiltProducts` says where), run as a process.
enum MarqueeProcess {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let binary = BuiltProducts.path(of: "marquee")
    static let testDatabaseURL = ProcessInfo.processInfo.environment["MARQUEE_TEST_DATABASE_URL"]
    static let available = testDatabaseURL != nil && FileManager.default.isExecutableFile(atPath: binary)

    /// A new empty database on the test cluster; returns its URL.
    static func freshDatabase() async throws -> String {
        let shared = PostgresConfiguration(url: testDatabaseURL!)
        let name = "e2e_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let admin = try await PostgresConnection.connect(shared)
        try await admin.executeScript("CREATE DATABASE \(identifier: name)")
        var components = URLComponents(string: testDatabaseURL!)!
        components.path = "/" + name
        return components.string!
    }

    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    /// Runs `marquee arguments...` to completion.
    static func run(_ arguments: [String], databaseURL: String?, environment extra: [String: String] = [:]) async throws -> Result {
        let running = try start(arguments, databaseURL: databaseURL, environment: extra)
        let status = await running.wait()
        return Result(status: status, stdout: running.stdout, stderr: running.stderr)
    }

    static func start(_ arguments: [String], databaseURL: String?, environment extra: [String: String] = [:]) throws -> Running {
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "MARQUEE_DATABASE_URL")
        environment.removeValue(forKey: "MARQUEE_LISTEN")
        if let databaseURL { environment["MARQUEE_DATABASE_URL"] = databaseURL }
        environment.merge(extra) { $1 }
        return try Running(arguments: arguments, environment: environment)
    }

    /// Starts `marquee serve --listen 127.0.0.1:0 --log-format json arguments...` (or the `--listen` of
    /// `arguments`) and waits for its `listening`
    /// line; returns the process and the port it bound. Unless told otherwise it keeps 6 database connections
    /// for the API and 2 for the broadcast pipeline, so that the many serve processes of a parallel run stay within the
    /// test cluster's connection limit.
    static func serve(databaseURL: String, arguments: [String] = [], environment extra: [String: String] = [:]) async throws
        -> (process: Running, port: Int)
    {
        let pool =
            (arguments.contains("--max-connections") ? [] : ["--max-connections", "6"])
            + (arguments.contains("--pipeline-connections") ? [] : ["--pipeline-connections", "2"])
        let listen = arguments.contains("--listen") ? [] : ["--listen", "127.0.0.1:0"]
        let serve = try start(
            ["serve", "--log-format", "json"] + listen + pool + arguments,
            databaseURL: databaseURL, environment: extra)
        // Generous: a parallel run starts every test at once, so on two cores a start (migrating a fresh
        // database and warming its pools up) shares the machine with the whole suite; one took over 180 s.
        let started = Date()
        let deadline = started.addingTimeInterval(600)
        while Date() < deadline {
            for line in serve.stderr.split(separator: "\n") {
                if let record = try? JSONValue(parsing: String(line)), record["msg"] == "listening", let port = record["port"]?.intValue {
                    return (serve, Int(port))
                }
            }
            if !serve.process.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let ended = serve.process.isRunning ? "still running" : "exited with \(serve.process.terminationStatus)"
        throw LoopbackHTTP.Failure(
            description: "serve did not start (\(ended) after \(Int(Date().timeIntervalSince(started))) s): \(serve.stderr)")
    }

    /// A running process whose output goes to temporary files (no pipe can fill up).
    final class Running: Sendable {
        let process: Process
        let stdoutURL: URL
        let stderrURL: URL
        /// Whether this is `serve`, whose output is scanned for secrets (LogSecretScan) when the test lets go of it.
        let isServe: Bool
        private final class ExitState: Sendable {
            let state = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))
        }
        private let exit = ExitState()

        init(arguments: [String], environment: [String: String]) throws {
            let folder = FileManager.default.temporaryDirectory.appending(path: "marquee-e2e-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            stdoutURL = folder.appending(path: "stdout")
            stderrURL = folder.appending(path: "stderr")
            isServe = arguments.first == "serve"
            _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
            _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: MarqueeProcess.binary)
            process.arguments = arguments
            process.environment = environment
            process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
            process.standardError = try FileHandle(forWritingTo: stderrURL)
            self.process = process
            process.terminationHandler = { [exit] process in
                let waiters = exit.state.withLock { state in
                    state.status = process.terminationStatus
                    defer { state.waiters = [] }
                    return state.waiters
                }
                for waiter in waiters { waiter.resume(returning: process.terminationStatus) }
            }
            // One launch at a time across the test binary (ProcessLaunch).
            try ProcessLaunch.run(process)
        }

        var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
        var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

        func wait() async -> Int32 {
            await withCheckedContinuation { continuation in
                let status = exit.state.withLock { state -> Int32? in
                    if state.status == nil { state.waiters.append(continuation) }
                    return state.status
                }
                if let status { continuation.resume(returning: status) }
            }
        }

        func signal(_ number: Int32) { kill(process.processIdentifier, number) }

        deinit {
            if process.isRunning { process.terminate() }
            if isServe {
                for finding in LogSecretScan.findings(in: stdout + stderr) { Issue.record("serve's output holds a secret: \(finding)") }
            }
            try? FileManager.default.removeItem(at: stdoutURL.deletingLastPathComponent())
        }
    }
}
