import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres

/// The built `marquee` binary (Scripts/test builds it first; `BuiltProducts` says where), run as a process.
enum MarqueeProcess {
    static let binary = BuiltProducts.path(of: "marquee")
    static let available = TestDatabase.available && FileManager.default.isExecutableFile(atPath: binary)

    /// Runs `marquee arguments...` to completion.
    static func run(_ arguments: [String], databaseURL: String?, environment extra: [String: String] = [:]) async throws
        -> ChildProcess.Outcome
    {
        try await ChildProcess.run(binary, arguments, environment: environment(databaseURL: databaseURL, extra))
    }

    /// Starts `marquee arguments...`; its output goes to files of its own (no pipe can fill up), and
    /// `serve`'s output is scanned for secrets (LogSecretScan) when the test lets go of it.
    static func start(_ arguments: [String], databaseURL: String?, environment extra: [String: String] = [:]) throws -> ChildProcess {
        try ChildProcess(
            binary, arguments, environment: environment(databaseURL: databaseURL, extra),
            checkingOutput: arguments.first == "serve" ? LogSecretScan.recordFindings(in:) : nil)
    }

    /// The test process's environment without serve's database and listen settings, then `databaseURL` and `extra`.
    static func environment(databaseURL: String?, _ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "MARQUEE_DATABASE_URL")
        environment.removeValue(forKey: "MARQUEE_LISTEN")
        if let databaseURL { environment["MARQUEE_DATABASE_URL"] = databaseURL }
        environment.merge(extra) { $1 }
        return environment
    }

    /// Starts `marquee serve --listen 127.0.0.1:0 --log-format json arguments...` (or the `--listen` of
    /// `arguments`) and waits for its `listening`
    /// line; returns the process and the port it bound. Unless told otherwise it keeps 6 database connections
    /// for the API and 2 for the broadcast pipeline, so that the many serve processes of a parallel run stay within the
    /// test cluster's connection limit, and refuses requests only after 30 s in its pool's queue.
    static func serve(databaseURL: String, arguments: [String] = [], environment extra: [String: String] = [:]) async throws
        -> (process: ChildProcess, port: Int)
    {
        let pool =
            (arguments.contains("--max-connections") ? [] : ["--max-connections", "6"])
            + (arguments.contains("--pipeline-connections") ? [] : ["--pipeline-connections", "2"])
            // A parallel run starves every serve of CPU for seconds at times: that is not the overload that
            // --max-queue-wait sheds, which its own tests set.
            + (arguments.contains("--max-queue-wait") ? [] : ["--max-queue-wait", "30"])
        let listen = arguments.contains("--listen") ? [] : ["--listen", "127.0.0.1:0"]
        let serve = try start(
            ["serve", "--log-format", "json"] + listen + pool + arguments,
            databaseURL: databaseURL, environment: extra)
        // Generous: a parallel run starts every test at once, so on two cores a start (migrating a fresh
        // database and warming its pools up) shares the machine with the whole suite; one took over 180 s.
        let started = Date()
        var port: Int?
        _ = try await eventually(within: .seconds(600), every: .milliseconds(50)) {
            port =
                serve.stderr.split(separator: "\n").lazy.compactMap { line -> Int? in
                    guard let record = try? JSONValue(parsing: String(line)), record["msg"] == "listening" else { return nil }
                    return record["port"]?.intValue.map(Int.init)
                }.first
            return port != nil || !serve.isRunning
        }
        if let port { return (serve, port) }
        let ended = serve.terminationStatus.map { "exited with \($0)" } ?? "still running"
        throw LoopbackHTTP.Failure(
            description: "serve did not start (\(ended) after \(Int(Date().timeIntervalSince(started))) s): \(serve.stderr)")
    }
}
