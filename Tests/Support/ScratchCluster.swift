// A PostgreSQL cluster of one test's own (Scripts/pg start --fast), for tests that stop and start the server: the
// shared test cluster serves every other test of a parallel run.
import Foundation

/// A throwaway cluster that a test may halt and resume.
public struct ScratchCluster: Sendable {
    /// The cluster's folder (Scripts/pg's `MARQUEE_PG_DIR`).
    public let directory: String
    /// The URL of its empty database `marquee`.
    public let url: String

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

    /// Stops the server (fast shutdown) and starts it again on the same port.
    public func restart() async throws { _ = try await Self.pg(["restart", directory]) }

    /// Runs Scripts/pg to completion; returns what it printed. The server that pg_ctl starts inherits no descriptor
    /// of the script's but its output file (ChildProcess closes the others), and the wait is for the script's own exit.
    static func pg(_ arguments: [String]) async throws -> String {
        let script = RepositoryCheckout.root.appendingPathComponent("Scripts/pg").path
        let run = try await ChildProcess.run("/bin/bash", [script] + arguments)
        guard run.status == 0 else {
            throw ScratchClusterError(message: "Scripts/pg \(arguments) exited with status \(run.status): \(run.stderr)")
        }
        return run.stdout
    }
}

/// Scripts/pg failed.
public struct ScratchClusterError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
