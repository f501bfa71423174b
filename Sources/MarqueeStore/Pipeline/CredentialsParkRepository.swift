// Apps parked for a credentials fault (Sql/0022): one row per app, written when APNs refuses the app's
// credentials and deleted at its first success. Every instance reads the same rows, so a fault one sees
// parks the app's work on all of them.
import Foundation
import MarqueeCore
import Postgres

/// The `app_credential_faults` rows.
public struct CredentialsParkRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Records a refusal of the app's credentials at `now` and returns the app's park, as
    /// `CredentialsPark.after` decides from the stored one (read under a row lock, so concurrent refusals
    /// from several instances add one strike per window).
    public func recordRefusal(appID: Int, reason: String, now: Date, policy: CredentialsParkPolicy) async throws -> CredentialsPark {
        try await pool.withTransaction { tx in
            let current = try await tx.query(
                """
                SELECT \(unsafeRaw: Self.columns) FROM app_credential_faults WHERE app_id = \(appID) FOR UPDATE
                """
            ).first.map(Self.park(row:))
            let park = CredentialsPark.after(current, refusal: reason, at: now, policy: policy)
            try await tx.execute(
                """
                INSERT INTO app_credential_faults (app_id, reason, since, strikes, retry_at, last_at, probe_until)
                VALUES (\(appID), \(park.reason), \(park.since), \(park.strikes), \(park.retryAt), \(park.lastAt), \(park.probeUntil))
                ON CONFLICT (app_id) DO UPDATE SET reason = EXCLUDED.reason, since = EXCLUDED.since, strikes = EXCLUDED.strikes,
                    retry_at = EXCLUDED.retry_at, last_at = EXCLUDED.last_at, probe_until = EXCLUDED.probe_until
                """)
            return park
        }
    }

    /// Takes the probe of a park whose window ended at `now`, if no other request holds it: the caller's
    /// request goes, others wait until `now + timeout`. Returns the park when taken, nil when another holds it.
    public func takeProbe(appID: Int, now: Date, timeout: TimeInterval) async throws -> CredentialsPark? {
        try await pool.query(
            """
            UPDATE app_credential_faults SET probe_until = \(now.addingTimeInterval(timeout))
            WHERE app_id = \(appID) AND retry_at <= \(now) AND (probe_until IS NULL OR probe_until <= \(now))
            RETURNING \(unsafeRaw: Self.columns)
            """
        ).first.map(Self.park(row:))
    }

    /// Ends the app's park (a request of it succeeded) and makes the app's broadcasts that waited for it due
    /// now; returns whether it was parked.
    @discardableResult
    public func clear(appID: Int) async throws -> Bool {
        try await pool.withTransaction { tx in
            guard try await tx.execute("DELETE FROM app_credential_faults WHERE app_id = \(appID)") > 0 else { return false }
            try await tx.execute(
                """
                UPDATE outbox o SET next_attempt_at = now(), updated_at = now()
                FROM events e
                WHERE e.id = o.event_id AND e.app_id = \(appID) AND o.next_attempt_at > now() AND o.claimed_by IS NULL
                """)
            try await tx.query("SELECT pg_notify(\(IngestRepository.notifyChannel), '')")
            return true
        }
    }

    /// Every parked app's park, by app id.
    public func parks() async throws -> [Int: CredentialsPark] {
        var parks: [Int: CredentialsPark] = [:]
        for row in try await pool.query("SELECT app_id, \(unsafeRaw: Self.columns) FROM app_credential_faults") {
            parks[try row.decode(Int.self, column: "app_id")] = try Self.park(row: row)
        }
        return parks
    }

    static let columns = "reason, since, strikes, retry_at, last_at, probe_until"

    static func park(row: PostgresRow) throws -> CredentialsPark {
        CredentialsPark(
            reason: try row.decode(String.self, column: "reason"), since: try row.decode(Date.self, column: "since"),
            strikes: try row.decode(Int.self, column: "strikes"), retryAt: try row.decode(Date.self, column: "retry_at"),
            lastAt: try row.decode(Date.self, column: "last_at"), probeUntil: try row.decode(Date?.self, column: "probe_until"))
    }
}
