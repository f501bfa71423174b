import APNs
import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Synchronization
import Testing

/// Claims end with their holder (issue 16): a lapsed heartbeat frees them at once, a record that failed on
/// a lost database is written as soon as it answers again, and claims nobody sends are given back.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct ClaimRecoveryTests {
    /// The lease is two minutes; the heartbeat decides long before.
    static let lease: TimeInterval = 120

    @Test func aClaimWhoseHolderStoppedBeatingIsFreeAtOnceAndOneWithoutAHeartbeatKeepsItsLease() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let outbox = OutboxRepository(pool: f.pool)
        let heartbeats = InstanceHeartbeatRepository()
        let first = try await f.makeEvent()
        let second = try await f.makeEvent()
        _ = try await f.openChannel(eventID: first.id)
        _ = try await f.openChannel(eventID: second.id)
        try await f.post(first.id, ["home": 1, "away": 0])
        try await f.post(second.id, ["home": 0, "away": 1])
        let now = f.clock.now
        try await f.pool.withConnection { try await heartbeats.beat(instance: "crashed", ttl: 5, now: now, on: $0) }

        let held = try await outbox.claim(instance: "crashed", limit: 1, lease: Self.lease, now: now)
        let tool = try await outbox.claim(instance: "one-shot", limit: 1, lease: Self.lease, now: now)
        #expect(held.count == 1 && tool.count == 1)
        // While the holder beats, nothing is free.
        #expect(try await outbox.claim(instance: "successor", limit: 10, lease: Self.lease, now: now.addingTimeInterval(4)).isEmpty)

        // Its heartbeat lapses (a kill -9: no more renewals) well inside the lease: its claim is free, and the
        // successor sends the same aps.timestamp; the claim of a holder with no heartbeat waits for its lease.
        let later = now.addingTimeInterval(6)
        let batch = try await outbox.claimBatch(instance: "successor", limit: 10, lease: Self.lease, now: later)
        let taken = batch.claims
        #expect(taken.map(\.outboxID) == held.map(\.outboxID), "taken \(taken.map(\.eventID)), held \(held.map(\.eventID))")
        #expect(batch.takenOver == ["crashed"])
        #expect(taken.first?.apsTimestamp == held.first?.apsTimestamp)
        #expect(try await outbox.claim(instance: "other", limit: 10, lease: Self.lease, now: now.addingTimeInterval(Self.lease - 1)).isEmpty)
        #expect(
            try await outbox.claim(instance: "other", limit: 10, lease: Self.lease, now: now.addingTimeInterval(Self.lease + 1))
                .map(\.outboxID) == tool.map(\.outboxID))
    }

    @Test func aBroadcastWhoseRecordFailedIsRecordedOnceTheDatabaseAnswersAgain() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let update = try await f.post(event.id, ["home": 2, "away": 1])
        let database = try await f.scalar(String.self, "SELECT current_database() AS name")
        let admin = try await PostgresConnection.connect(TestDatabase.shared)
        let reopened = Task<Void, any Error> {}
        let reopening = Mutex<Task<Void, any Error>>(reopened)
        // APNs accepts, and before its answer arrives the database goes away: every connection is cut and no
        // new one is let in until the failed record is logged (as a restart does), so the record fails.
        f.apns.state.withLock { state in
            state.beforeNextAnswer = {
                try await admin.execute("ALTER DATABASE \(identifier: database) WITH ALLOW_CONNECTIONS false")
                try await admin.execute(
                    """
                    SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = \(database) AND pid <> pg_backend_pid()
                    """)
                reopening.withLock { task in
                    task = Task {
                        // Connections come back once the failed record is logged (at most 10 s), not after a fixed
                        // time that a loaded machine could spend before the dispatcher tries its record.
                        _ = try await eventually(within: .seconds(10)) { f.log.all.contains { $0.contains("outcome not written") } }
                        // The outage outlasting the failed record is the fault under test: the record is retried
                        // while the database is away.
                        try await Task.sleep(for: .milliseconds(300))
                        try await admin.execute("ALTER DATABASE \(identifier: database) WITH ALLOW_CONNECTIONS true")
                    }
                }
            }
        }
        let dispatcher = f.dispatcher { $0.claimLease = Self.lease }
        let results = try await dispatcher.dispatchOnce()
        try await reopening.withLock { $0 }.value
        #expect(results.count == 1)
        guard case .sent(let sentID, _, _)? = results.first else {
            Issue.record("expected a send, got \(results)")
            return
        }
        #expect(sentID == update.id)
        #expect(f.log.all.contains { $0.contains("outcome not written; retrying until the database answers") })
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM deliveries WHERE update_id = \(update.id) AND status = 200") == 1)
        #expect(try await f.dispositions(eventID: event.id) == ["broadcast": 1])
    }

    @Test func claimsNobodySendsAreGivenBackAndTheOnesInFlightKept() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let outbox = OutboxRepository(pool: f.pool)
        for home in 0..<3 {
            let event = try await f.makeEvent()
            _ = try await f.openChannel(eventID: event.id)
            try await f.post(event.id, ["home": .int(Int64(home)), "away": 0])
        }
        let claims = try await outbox.claim(instance: "me", limit: 10, lease: Self.lease)
        #expect(claims.count == 3)
        #expect(try await outbox.releaseClaims(of: "someone else", keeping: []) == 0)
        #expect(try await outbox.releaseClaims(of: "me", keeping: [claims[0].claimToken]) == 2)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE claimed_by IS NOT NULL") == 1)
        #expect(try await outbox.claim(instance: "other", limit: 10, lease: Self.lease).count == 2)
    }

    @Test func theHeartbeatRenewsOnItsOwnAndLapsesWhenStopped() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        var configuration = InstanceHeartbeatConfiguration()
        configuration.interval = .milliseconds(100)
        let heartbeat = InstanceHeartbeat(instance: "beating", database: f.configuration, configuration: configuration, logger: f.logger)
        let repository = InstanceHeartbeatRepository()
        try await heartbeat.start()
        let first = try #require(try await repository.aliveUntil(instance: "beating", pool: f.pool))
        // Renewed on its own, ahead of the database's clock (read together, so a loaded machine does not matter).
        // On a loaded machine the read of `first` can itself outlast several renewals, so the loop waits for a
        // row newer than that read, not only for a count.
        var ahead = false
        var renewed = first
        _ = try await eventually {
            ahead = try await f.scalar(Bool.self, "SELECT alive_until > now() AS now FROM instance_heartbeats WHERE instance = 'beating'")
            renewed = try #require(try await repository.aliveUntil(instance: "beating", pool: f.pool))
            return heartbeat.renewalCount >= 4 && ahead && renewed > first
        }
        #expect(heartbeat.renewalCount >= 4 && ahead)
        #expect(renewed > first)
        await heartbeat.stop()
        let lapsed = try #require(try await repository.aliveUntil(instance: "beating", pool: f.pool))
        #expect(lapsed <= (try await f.scalar(Date.self, "SELECT now() AS now")))
        #expect(try await repository.purge(lapsedFor: 86400, pool: f.pool) == 0)
        #expect(try await repository.purge(lapsedFor: 0, pool: f.pool) == 1)
    }
}
