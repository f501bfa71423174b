// A PostgreSQL cluster of one test's own (Scripts/pg start --fast), for tests that stop and start the server: the
// shared test cluster serves every other test of a parallel run.
import Foundation

/// A throwaway cluster that a test may halt and resume.
public struct ScratchCluster: Sendable {
    /// The cluster's folder (Scripts/pg's `MARQUEE_PG_DIR`).
    public let directory: String
    /// The URL of its empty database `marquee`.
    public let url: String

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Starts a cluster, runs `body` with it and always stops and deletes it.
    public static func with<T>(_ body: (ScratchCluster) async throws -> T) async throws -> T {
        let output = try await pg(["start", "--fast"])
        var values: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("export ") {
            let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { values[String(pair[0])] = String(pair[1]) }
        }
        guard let directory = values["MARQUEE_PG_DIR"], let url = values["MARQUEE_DATABASE_URL"] else {
            throw ScratchClusterError(message: "Scripts/pg start printed no cluster: \(output)")
        }
        let cluster = ScratchCluster(directory: directory, url: url)
        do {
            let value = try await body(cluster)
            _ = try? await pg(["stop", directory])
            return value
        } catch {
            _ = try? await pg(["stop", directory])
            throw error
        }
    }

    /// Stops the server (fast shutdown); the cluster stays.
    public func halt() async throws { _ = try await Self.pg(["halt", directory]) }

    /// Starts the halted server again, on the same port.
    public func resume() async throws { _ = try await Self.pg(["resume", directory]) }

    /// Runs Scripts/pg on a thread of its own (waitpid blocks). Not Foundation's Process: it waits for a descriptor
    /// that the server started by pg_ctl inherits, so it never sees the script exit.
    static func pg(_ arguments: [String]) async throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("pg-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let script = repositoryRoot.appendingPathComponent("Scripts/pg").path
        let argv = ["/bin/bash", "-c", "exec bash \"$0\" \"$@\" >\"$MARQUEE_PG_OUTPUT\" </dev/null", script] + arguments
        let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" } + ["MARQUEE_PG_OUTPUT=\(outputPath)"]
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                var pid: pid_t = 0
                let cArguments = argv.map { strdup($0) } + [nil]
                let cEnvironment = environment.map { strdup($0) } + [nil]
                defer { for pointer in cArguments + cEnvironment { free(pointer) } }
                // One launch at a time with Foundation's Process.run (ProcessLaunch), which crashed beside others.
                let spawned = ProcessLaunch.launches.withLock { _ in posix_spawn(&pid, "/bin/bash", nil, nil, cArguments, cEnvironment) }
                guard spawned == 0 else {
                    continuation.resume(throwing: ScratchClusterError(message: "posix_spawn failed: \(spawned)"))
                    return
                }
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                continuation.resume(returning: status)
            }
        }
        guard status == 0 else { throw ScratchClusterError(message: "Scripts/pg \(arguments) exited with status \(status)") }
        return try String(contentsOfFile: outputPath, encoding: .utf8)
    }
}

/// Scripts/pg failed.
public struct ScratchClusterError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
