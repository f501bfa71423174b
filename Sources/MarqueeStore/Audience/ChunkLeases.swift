// The lease of the audience's chunks, written once for the start fan-out's `start_chunks` and mirroring's
// `mirror_chunks` (Sql/0025, 0026): a chunk is a keyset range of a pass (a start run's audience, a mirroring pass's
// token activities), cut ahead of the claims under the pass's row lock, claimed `FOR UPDATE SKIP LOCKED` with a lease
// that ends with its holder's heartbeat (InstanceHeartbeatRepository), renewed while it is worked, given back due again
// after a delay, or finished. `now` overrides the database's clock (tests); production passes nil, the clock every
// instance shares.
import Foundation
import Postgres

/// A chunk just claimed: its row, its pass and its range.
public struct ChunkLease: Sendable, Equatable {
    public let id: Int
    /// The run or pass it belongs to.
    public let passID: Int
    /// The range (after, through] of installations or activities.
    public let after: Int
    public let through: Int
    /// Claims so far, this one included.
    public let attempts: Int
}

/// The lease statements of one chunk table.
public struct ChunkLeases: Sendable {
    /// The table, the column naming its pass and the columns of its range.
    let table: String
    let passColumn: String
    let afterColumn: String
    let throughColumn: String

    /// The start fan-out's chunks of a run's audience.
    public static let starts = ChunkLeases(
        table: "start_chunks", passColumn: "run_id", afterColumn: "after_installation", throughColumn: "through_installation")
    /// Mirroring's chunks of a pass's token activities.
    public static let mirroring = ChunkLeases(
        table: "mirror_chunks", passColumn: "pass_id", afterColumn: "after_activity", throughColumn: "through_activity")

    /// Claims the due chunk first in line whose lease ran out or whose holder stopped beating, for `lease` seconds.
    func claim(instance: String, lease: TimeInterval, now: Date?, on pool: PostgresPool) async throws -> ChunkLease? {
        guard
            let row = try await pool.query(
                """
                WITH due AS (
                    SELECT c.id FROM \(identifier: table) c
                    WHERE NOT c.done AND c.next_attempt_at <= coalesce(\(now), now())
                      AND (c.claimed_until IS NULL OR c.claimed_until <= coalesce(\(now), now())
                           OR c.claimed_by = ANY (\(fragment: InstanceHeartbeatRepository.lapsedInstances(now: now))))
                    ORDER BY c.next_attempt_at, c.id LIMIT 1
                    FOR UPDATE OF c SKIP LOCKED
                )
                UPDATE \(identifier: table) c SET claimed_by = \(instance),
                    claimed_until = coalesce(\(now), now()) + make_interval(secs => \(lease)::float8), attempts = c.attempts + 1
                FROM due WHERE c.id = due.id
                RETURNING c.id, c.\(identifier: passColumn) AS pass_id, c.\(identifier: afterColumn) AS after,
                          c.\(identifier: throughColumn) AS through, c.attempts
                """
            ).first
        else { return nil }
        return ChunkLease(
            id: try row.decode(column: "id"), passID: try row.decode(column: "pass_id"), after: try row.decode(column: "after"),
            through: try row.decode(column: "through"), attempts: try row.decode(column: "attempts"))
    }

    /// Keeps the claim for `lease` more seconds; false when it is no longer `instance`'s.
    func renew(chunkID: Int, instance: String, lease: TimeInterval, now: Date?, on pool: PostgresPool) async throws -> Bool {
        try await pool.execute(
            """
            UPDATE \(identifier: table) SET claimed_until = coalesce(\(now), now()) + make_interval(secs => \(lease)::float8)
            WHERE id = \(chunkID) AND claimed_by = \(instance) AND NOT done
            """) == 1
    }

    /// Gives the chunk back, due again after `delay` seconds.
    func release(chunkID: Int, instance: String, after delay: TimeInterval, now: Date?, on pool: PostgresPool) async throws {
        try await pool.execute(
            """
            UPDATE \(identifier: table) SET claimed_by = NULL, claimed_until = NULL,
                next_attempt_at = coalesce(\(now), now()) + make_interval(secs => \(delay)::float8)
            WHERE id = \(chunkID) AND claimed_by = \(instance)
            """)
    }

    /// The statement that finishes the chunk (every member settled) if `instance` holds it: done, its claim cleared,
    /// and `counts` (the job's own assignments, SQL on the chunk row `c`) kept on it; it returns the pass's id and
    /// `returning` (columns of `c`), for a statement around it.
    func finishStatement(chunkID: Int, instance: String, counts: PostgresQuery, returning: String = "", now: Date?) -> PostgresQuery {
        """
        UPDATE \(identifier: table) c SET done = true, finished_at = coalesce(\(now), now()), claimed_by = NULL, claimed_until = NULL,
            \(fragment: counts)
        WHERE c.id = \(chunkID) AND c.claimed_by = \(instance)
        RETURNING c.\(identifier: passColumn) AS pass_id\(unsafeRaw: returning.isEmpty ? "" : ", " + returning)
        """
    }

    /// Cuts chunks of the pass `passID` from `through` on, under its row lock held by `tx`, while fewer than
    /// `cutAhead` wait unclaimed: `page(after)` reads the next range (its last key and how many it holds, up to
    /// `chunkSize`), `insert(after, through)` writes its chunk. Returns where the cut stands and whether the pass is
    /// all cut.
    static func cut(
        from through: Int, waiting: Int, cutAhead: Int, chunkSize: Int,
        page: (_ after: Int) async throws -> (last: Int?, count: Int), insert: (_ after: Int, _ through: Int) async throws -> Void
    ) async throws -> (through: Int, done: Bool) {
        var through = through
        var waiting = waiting
        var done = false
        while waiting < cutAhead && !done {
            let (last, count) = try await page(through)
            done = count < chunkSize
            if let last {
                try await insert(through, last)
                through = last
                waiting += 1
            }
        }
        return (through, done)
    }
}
