import Foundation
import MarqueeTestSupport
import Testing

/// A throwaway cluster of the test's own (Scripts/pg), for tests that restart the server.
struct PrivateCluster: Sendable {
    let directory: String
    let url: String

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Starts a cluster, runs `body` with it and always stops it.
    static func with<T>(_ body: (PrivateCluster) async throws -> T) async throws -> T {
        let output = try await pg(["start", "--fast"])
        var values: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("export ") {
            let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { values[String(pair[0])] = String(pair[1]) }
        }
        guard let directory = values["MARQUEE_PG_DIR"], let url = values["MARQUEE_DATABASE_URL"] else {
            throw TestSetupError(message: "Scripts/pg start printed no cluster: \(output)")
        }
        let cluster = PrivateCluster(directory: directory, url: url)
        do {
            let value = try await body(cluster)
            _ = try? await pg(["stop", directory])
            return value
        } catch {
            _ = try? await pg(["stop", directory])
            throw error
        }
    }

    func restart() async throws { _ = try await Self.pg(["restart", directory]) }

    /// Runs Scripts/pg to completion; returns what it printed. The server that pg_ctl starts inherits no descriptor
    /// of the script's but its output file, and the wait is for the script's own exit.
    static func pg(_ arguments: [String]) async throws -> String {
        let script = repositoryRoot.appendingPathComponent("Scripts/pg").path
        let run = try await ChildProcess.run("/bin/bash", [script] + arguments)
        guard run.status == 0 else { throw TestSetupError(message: "Scripts/pg \(arguments) exited with status \(run.status): \(run.stderr)") }
        return run.stdout
    }
}

struct TestSetupError: Error {
    let message: String
}
