// Benchmark driver for Scripts/bench pg. Prints `name=value` lines for the script to compare with
// pgbench and psql, measured on the same cluster in the same run.
//   PostgresBench inserts URL SECONDS     single-row INSERTs over one connection
//   PostgresBench copy URL ROWS           COPY ROWS generated rows (same as the script's psql file)
// PG_BENCH_ONLY_PINNED=1 skips the insert loop from the cooperative pool (for profiling).
import Foundation
import Postgres

let arguments = CommandLine.arguments
guard arguments.count == 4, let amount = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: PostgresBench inserts|copy URL SECONDS|ROWS\n".utf8))
    exit(64)
}
let connection = try await PostgresConnection.connect(url: arguments[2])
let clock = ContinuousClock()

@Sendable func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

switch arguments[1] {
case "inserts":
    // The same statement as the pgbench script: INSERT INTO bench_insert (id, payload) VALUES (:id, 'payload')
    // First from the cooperative pool (two thread hops per statement), then on the connection's own
    // thread through its task executor (no hop), each for the given number of seconds.
    @Sendable func insertLoop() async throws -> Double {
        let payload = "payload"
        let start = clock.now
        let deadline = start + .seconds(amount)
        var count = 0
        var random = UInt64.random(in: 1...UInt64.max)  // xorshift, like pgbench's user-space generator
        while clock.now < deadline {
            for _ in 0..<100 {
                random ^= random << 13
                random ^= random >> 7
                random ^= random << 17
                let id = Int(random % 1_000_000_000) + 1
                try await connection.execute("INSERT INTO bench_insert (id, payload) VALUES (\(id), \(payload))")
            }
            count += 100
        }
        return Double(count) / seconds(clock.now - start)
    }
    let pooled =
        ProcessInfo.processInfo.environment["PG_BENCH_ONLY_PINNED"] == nil
        ? try await Task.detached { try await insertLoop() }.value : 0
    let pinned = try await withTaskExecutorPreference(connection.taskExecutor) { try await insertLoop() }
    print("inserts_per_second_cooperative=\(Int(pooled))")
    print("inserts_per_second=\(Int(pinned))")
case "copy":
    // Rows as the script's psql export writes them: n, 'label-' || n, 2024-01-01 + n seconds, n % 2 = 0
    let base = Date(timeIntervalSince1970: 1_704_067_200)
    let start = clock.now
    let copied = try await connection.copyFrom("COPY bench_copy (n, label, at, flag) FROM STDIN") { writer in
        for n in 1...amount {
            try await writer.write(n, "label-\(n)", base.addingTimeInterval(Double(n)), n % 2 == 0)
        }
    }
    let elapsed = seconds(clock.now - start)
    print("copied=\(copied)")
    print("copy_seconds=\(elapsed)")
default:
    FileHandle.standardError.write(Data("unknown mode \(arguments[1])\n".utf8))
    exit(64)
}
