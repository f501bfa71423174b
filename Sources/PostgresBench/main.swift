// Benchmark driver for Scripts/bench pg. Prints `name=value` lines for the script to compare with
// pgbench and psql, measured on the same cluster in the same run.
//   PostgresBench inserts URL SECONDS     single-row INSERTs over one connection
//   PostgresBench copy URL ROWS           COPY ROWS generated rows (same as the script's psql file)
import Foundation
import Postgres

let arguments = CommandLine.arguments
guard arguments.count == 4, let amount = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: PostgresBench inserts|copy URL SECONDS|ROWS\n".utf8))
    exit(64)
}
let connection = try await PostgresConnection.connect(url: arguments[2])
let clock = ContinuousClock()

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

switch arguments[1] {
case "inserts":
    // The same statement as the pgbench script: INSERT INTO bench_insert (id, payload) VALUES (:id, 'payload')
    let payload = "payload"
    let start = clock.now
    let deadline = start + .seconds(amount)
    var count = 0
    while clock.now < deadline {
        for _ in 0..<100 {
            try await connection.execute("INSERT INTO bench_insert (id, payload) VALUES (\(Int.random(in: 1...1_000_000_000)), \(payload))")
        }
        count += 100
    }
    let elapsed = seconds(clock.now - start)
    print("inserts=\(count)")
    print("inserts_per_second=\(Int(Double(count) / elapsed))")
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
