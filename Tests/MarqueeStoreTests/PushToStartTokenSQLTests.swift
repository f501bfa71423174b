import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Testing

@testable import MarqueeStore

/// The store's SQL for push-to-start tokens against `PushToStartTokenSlot`'s table: every row of
/// `PushToStartTokenTable` is written to an installation, performed by the statement that performs it (the
/// rotation's SET list the API and the import share, a registration by another installation, a clear, a
/// refusal), and read back.
@Suite(.enabled(if: TestDatabase.available))
struct PushToStartTokenSQLTests {
    static let columns = """
        push_to_start_token, token_registered_at, token_seen_at, token_refused_reason, token_refused_at, previous_token, previous_token_until
        """

    @Test func everyRowOfTheTableHoldsInTheDatabase() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let pool = fixture.pool
        let installations = InstallationRepository(pool: pool)
        let rows = PushToStartTokenTable.rows(now: Date())
        for (index, rule) in rows.enumerated() {
            let before = rule.before
            let id = try await pool.query(
                """
                INSERT INTO installations (app_id, installation_id, push_to_start_token, token_registered_at, token_seen_at,
                                           token_refused_reason, token_refused_at, previous_token, previous_token_until)
                VALUES (\(fixture.appID), \("rule-\(index)"), \(before.token), \(before.registeredAt), \(before.seenAt),
                        \(before.refusedReason), \(before.refusedAt), \(before.previous), \(before.previousUntil))
                RETURNING id
                """)[0].decode(Int.self, column: "id")
            let now = try await pool.query("SELECT now() AS now")[0].decode(Date.self, column: "now")
            switch rule.event {
            case .registered(let token, let at):
                let new: PostgresQuery = "\(token)"
                let time: PostgresQuery = "\(at)::timestamptz"
                try await pool.execute(
                    """
                    UPDATE installations SET \(fragment: InstallationRepository.tokenRotation(
                        to: new, at: time, retention: PushToStartTokenTable.retention))
                    WHERE id = \(id)
                    """)
            case .movedAway:
                _ = try await installations.register(
                    InstallationRegistration(
                        appID: fixture.appID, installationID: "rule-\(index)-reinstalled",
                        pushToStartToken: before.token ?? PushToStartTokenTable.tokenA),
                    previousTokenRetention: PushToStartTokenTable.retention)
            case .cleared:
                try await installations.clearPushToStartToken(installation: id)
            case .refused(let refusal):
                let outcome = try await TokenHygieneRepository(pool: pool).refuse(
                    appID: fixture.appID, token: before.token ?? PushToStartTokenTable.tokenA, kind: .pushToStart, refusal: refusal)
                #expect(outcome == before.outcome(of: refusal), "\(rule.name)")
            }
            let row = try await pool.query("SELECT \(unsafeRaw: Self.columns) FROM installations WHERE id = \(id)")[0]
            let after = PushToStartTokenSlot(
                token: try row.decode(column: "push_to_start_token"), registeredAt: try row.decode(column: "token_registered_at"),
                seenAt: try row.decode(column: "token_seen_at"), refusedReason: try row.decode(column: "token_refused_reason"),
                refusedAt: try row.decode(column: "token_refused_at"), previous: try row.decode(column: "previous_token"),
                previousUntil: try row.decode(column: "previous_token_until"))
            // A time the database set from its clock is compared with the table's within a minute of the read.
            let expected = PushToStartTokenTable.rows(now: now)[index].after
            #expect(Self.matches(after, expected), "\(rule.name): \(after) is not \(expected)")
            try await pool.execute("DELETE FROM installations WHERE app_id = \(fixture.appID)")
        }
    }

    static func matches(_ stored: PushToStartTokenSlot, _ expected: PushToStartTokenSlot) -> Bool {
        func close(_ a: Date?, _ b: Date?) -> Bool {
            switch (a, b) {
            case (nil, nil): true
            case (let a?, let b?): abs(a.timeIntervalSince(b)) < 60
            default: false
            }
        }
        return stored.token == expected.token && stored.refusedReason == expected.refusedReason && stored.previous == expected.previous
            && close(stored.registeredAt, expected.registeredAt) && close(stored.seenAt, expected.seenAt)
            && close(stored.refusedAt, expected.refusedAt) && close(stored.previousUntil, expected.previousUntil)
    }
}
