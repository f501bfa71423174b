import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The dispatcher's outbox: claims that never overlap, expire after a crash, and atomic records of every outcome.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineDispatchTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func onlyEventsWithAnOpenChannelAreClaimed() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let withChannel = try await f.makeEvent()
        let without = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: withChannel.id)
        try await f.post(withChannel.id, ["home": 1], at: t0)
        try await f.post(without.id, ["home": 1], at: t0)
        let claims = try await f.outbox.claim(instance: "a", limit: 10, lease: 30)
        #expect(claims.map(\.eventID) == [withChannel.id])
        let claim = try #require(claims.first)
        #expect(claim.channelID == channel.id)
        #expect(claim.attributeTypeID == f.typeID)
        #expect(claim.apnsChannelID == channel.apnsChannelID)
        #expect(claim.update.contentState == ["home": 1])
        #expect(claim.pending.map(\.id) == [claim.update.id])
        #expect(claim.lastApsTimestamp == nil)
        // Claimed: nobody else gets it while the lease runs.
        #expect(try await f.outbox.claim(instance: "b", limit: 10, lease: 30).isEmpty)
        try await f.outbox.release(claims)
        #expect(try await f.outbox.claim(instance: "b", limit: 10, lease: 30).map(\.eventID) == [withChannel.id])
    }

    @Test func removingAnAppRemovesEverythingOfItIncludingTablesWithoutAForeignKeyToIt() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0, key: "goal-1", body: "a")
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 10, lease: 30).first)
        try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 1)
        try await f.post(event.id, ["home": 2], at: t0 + 1, key: "goal-2", body: "b")  // queued in the outbox
        _ = try await f.deliveries.insert(DeliveryDraft(appID: f.appID, kind: .channelList, status: 200))
        // Another app's rows stay.
        let other = try await AppRepository(pool: f.pool).add(
            NewApp(
                bundleID: "com.example.other", environment: "development",
                teamID: "ABCDE12345", keyID: "KEY1234567", keyPath: "keys/k.p8"))
        _ = try await f.deliveries.insert(DeliveryDraft(appID: other.id, kind: .channelList, status: 200))
        let rows: PostgresQuery = """
            SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM updates) + (SELECT count(*) FROM channels)
                 + (SELECT count(*) FROM idempotency_keys) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM api_keys)
                 + (SELECT count(*) FROM outbox)
            """
        #expect(try await f.scalar(Int.self, rows) == 1 + 2 + 1 + 2 + 3 + 1 + 1)
        #expect(channel.appID == f.appID)

        #expect(try await AppRepository(pool: f.pool).remove(id: f.appID)?.id == f.appID)
        #expect(try await f.scalar(Int.self, rows) == 1)
        #expect(try await f.scalar(Int.self, "SELECT app_id FROM deliveries") == other.id)
    }

    @Test func anUrgentUpdateIsClaimedBeforeABacklog() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let events = try await f.eventsWithQueuedUpdates(5, at: t0)
        // The backlog has waited; then a goal arrives for the newest event.
        try await f.pool.execute("UPDATE outbox SET next_attempt_at = now() - interval '1 minute'")
        _ = try await f.ingest.ingest(
            eventID: events[4], UpdateDraft(alert: ["title": "GOAL"], occurredAt: t0 + 1, urgent: true),
            contentState: { _ in ["home": 2] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        let first = try await f.outbox.claim(instance: "a", limit: 1, lease: 30)
        #expect(first.map(\.eventID) == [events[4]])
        #expect(first.first?.update.alert == ["title": "GOAL"])
        #expect(try await f.outbox.claim(instance: "a", limit: 10, lease: 30).map(\.eventID) == Array(events[0..<4]))
    }

    @Test func twoClaimersNeverClaimTheSameEvent() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        _ = try await f.eventsWithQueuedUpdates(30, at: t0)
        let other = f.secondPool()
        defer { other.close() }
        let ids = try await withThrowingTaskGroup(of: [Int].self) { group in
            for (name, pool) in [("a", f.pool), ("b", other), ("c", f.pool), ("d", other)] {
                group.addTask {
                    let outbox = OutboxRepository(pool: pool)
                    var mine: [Int] = []
                    while true {
                        let claims = try await outbox.claim(instance: name, limit: 3, lease: 60)
                        if claims.isEmpty { return mine }
                        mine += claims.map(\.eventID)
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(ids.count == 30)
        #expect(Set(ids).count == 30)
    }

    @Test func aCrashedClaimersWorkIsReclaimedAfterItsLease() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        // One clock for the three claims, so a slow machine between them does not move the lease's end.
        let claimedAt = Date()
        let crashed = try #require(try await f.outbox.claim(instance: "crashed", limit: 1, lease: 30, now: claimedAt).first)
        #expect(try await f.outbox.claim(instance: "b", limit: 1, lease: 30, now: claimedAt + 29).isEmpty)
        let taken = try #require(try await f.outbox.claim(instance: "b", limit: 1, lease: 30, now: claimedAt + 31).first)
        #expect(taken.outboxID == crashed.outboxID)
        #expect(taken.claimToken != crashed.claimToken)
        // The crashed instance comes back late: its send is recorded, but the row is the new owner's.
        let outcome = try await f.outbox.recordBroadcast(crashed, delivery: f.delivery(for: crashed), apsTimestamp: 100)
        #expect(outcome == .claimLost)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 1)
        // The new owner must use a newer timestamp; then the row is done.
        await #expect(throws: PipelineError.apsTimestampNotIncreasing(channelID: taken.channelID, attempted: 100)) {
            try await f.outbox.recordBroadcast(taken, delivery: f.delivery(for: taken), apsTimestamp: 100)
        }
        #expect(try await f.outbox.recordBroadcast(taken, delivery: f.delivery(for: taken), apsTimestamp: 101) == .completed)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
    }

    @Test func recordingABroadcastConflatesOlderPendingAndRefusesAnOldTimestamp() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        for index in 1...3 { try await f.post(event.id, ["home": .int(Int64(index))], at: t0 + Double(index)) }
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(claim.pending.count == 3)
        #expect(claim.update.contentState == ["home": 3])
        #expect(try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 1_800_000_000) == .completed)
        let dispositions = try await f.pool.query("SELECT disposition FROM updates ORDER BY id").map {
            try $0.decode(String.self, column: "disposition")
        }
        #expect(dispositions == ["conflated", "conflated", "broadcast"])
        #expect(try await f.channels.get(id: channel.id)?.lastApsTimestamp == 1_800_000_000)
        let recent = try await f.deliveries.recent(channelID: channel.id)
        #expect(recent.count == 1)
        #expect(recent.first?.draft.apsTimestamp == 1_800_000_000)
        #expect(recent.first?.draft.updateID == claim.update.id)

        // The next update: an equal timestamp is refused and nothing of the record remains.
        try await f.post(event.id, ["home": 4], at: t0 + 4)
        let next = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(next.lastApsTimestamp == 1_800_000_000)
        #expect(next.lastBroadcastAt != nil)
        await #expect(throws: PipelineError.apsTimestampNotIncreasing(channelID: channel.id, attempted: 1_800_000_000)) {
            try await f.outbox.recordBroadcast(next, delivery: f.delivery(for: next), apsTimestamp: 1_800_000_000)
        }
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(next.update.id)") == "pending")
        #expect(try await f.deliveries.recent(channelID: channel.id).count == 1)
        #expect(try await f.outbox.recordBroadcast(next, delivery: f.delivery(for: next), apsTimestamp: 1_800_000_001) == .completed)
    }

    /// A batch records each broadcast on its own terms: one refused timestamp, one newer update, one plain.
    @Test func aBatchRecordsEachBroadcastAsAlone() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let events = try await f.eventsWithQueuedUpdates(3, at: t0)
        let claims = try await f.outbox.claim(instance: "a", limit: 3, lease: 30).sorted { $0.eventID < $1.eventID }
        try #require(claims.count == 3)
        try await f.pool.execute("UPDATE channels SET last_aps_timestamp = 50 WHERE id = \(claims[0].channelID)")
        let newer = try await f.postAccepted(events[1], ["home": 2], at: t0 + 1)
        let outcomes = try await f.outbox.recordBroadcasts(
            claims.map {
                BroadcastRecord(claim: $0, delivery: f.delivery(for: $0), apsTimestamp: 50, sentAt: t0)
            })
        #expect(outcomes.map { try? $0.get() } == [nil, .newerPending, .completed])
        #expect(throws: PipelineError.apsTimestampNotIncreasing(channelID: claims[0].channelID, attempted: 50)) { try outcomes[0].get() }
        // Nothing of the refused one; the others' deliveries, dispositions and pacing time.
        #expect(try await f.deliveries.recent(channelID: claims[0].channelID).isEmpty)
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(claims[0].update.id)") == "pending")
        for claim in claims.dropFirst() {
            #expect(try await f.deliveries.recent(channelID: claim.channelID).map(\.draft.updateID) == [claim.update.id])
            #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(claim.update.id)") == "broadcast")
            #expect(try await f.scalar(Date.self, "SELECT last_broadcast_at FROM channels WHERE id = \(claim.channelID)") == t0)
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE event_id = \(events[2])") == 0)
        let again = try #require(try await f.outbox.claim(instance: "a", limit: 3, lease: 30).first { $0.eventID == events[1] })
        #expect(again.update.id == newer.id)
    }

    /// A broadcast that carried the alert of an update it conflated names that update in its delivery, and what
    /// mirroring sends the event's token activities carries that alert, as the channel's subscribers were shown.
    @Test func theAlertABroadcastCarriedFromAConflatedUpdateIsTheOneMirrored() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        let goal: JSONValue = ["title": "Goal", "body": "Arsenal 1-0"]
        let scored = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(alert: goal, occurredAt: t0, apiKeyID: f.apiKeyID, urgent: true),
            state: ["home": 1], idempotency: nil, response: PipelineFixture.answer)
        guard case .accepted(let alertUpdate, _) = scored else { throw FixtureError.notAccepted }
        try await f.post(event.id, ["home": 1, "away": 0], at: t0 + 1)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(claim.pending.map(\.id) == [alertUpdate.id, claim.update.id] && claim.update.alert == nil)
        let outcomes = try await f.outbox.recordBroadcasts([
            BroadcastRecord(claim: claim, delivery: f.delivery(for: claim), apsTimestamp: 10, sentAt: t0 + 1, alertUpdateID: alertUpdate.id)
        ])
        #expect(try outcomes[0].get() == .completed)
        #expect(try await f.scalar(Int?.self, "SELECT alert_update_id FROM deliveries WHERE channel_id = \(channel.id)") == alertUpdate.id)
        #expect(try await f.scalar(Date?.self, "SELECT last_alert_at FROM channels WHERE id = \(channel.id)") == t0 + 1)
        let mirrored = try #require(try await MirrorRepository(pool: f.pool).content(eventID: event.id))
        #expect(mirrored.updateID == claim.update.id && mirrored.contentState == ["home": 1, "away": 0])
        #expect(mirrored.alert == goal)
    }

    @Test func aNewerUpdateDuringTheSendKeepsTheRowDue() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        let newer = try await f.postAccepted(event.id, ["home": 2], at: t0 + 1)
        #expect(try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 10) == .newerPending)
        let again = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(again.update.id == newer.id)
        #expect(again.pending.map(\.id) == [newer.id])
        #expect(again.lastApsTimestamp == 10)
    }

    @Test func retryableFailuresBackOff() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(
            try await f.outbox.recordRetryableFailure(
                claim, delivery: f.delivery(for: claim, status: 503, reason: "ServiceUnavailable"), retryAfter: 60))
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).isEmpty)
        // One reading of the clock, so a slow machine between the statements changes nothing.
        let later = Date() + 61
        let retry = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: later).first)
        #expect(retry.attempts == 1)
        // Paced: given back unsent, due a little later, attempts unchanged.
        #expect(try await f.outbox.postpone(retry, by: 1, now: later))
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: later + 0.5).isEmpty)
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: later + 2).first?.attempts == 1)
        #expect(try await f.deliveries.lastErrors(appID: f.appID).map(\.draft.reason) == ["ServiceUnavailable"])
        #expect(try await f.deliveries.recent(channelID: channel.id).first?.draft.status == 503)
    }

    @Test func channelNotRegisteredFlagsTheEventAndStopsItsOutbox() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        try await f.outbox.recordPermanentFailure(
            claim, delivery: f.delivery(for: claim, status: 400, reason: "ChannelNotRegistered"),
            channelNotRegistered: true)
        #expect(try await f.events.get(id: event.id)?.channelLost == true)
        let lost = try await f.channels.get(id: channel.id)
        #expect(lost?.state == .lifecycle(.lost))
        #expect(lost?.lastError == "ChannelNotRegistered")
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        // Later updates are stored (the app still fetches the state) but never claimed.
        try await f.post(event.id, ["home": 2], at: t0 + 1)
        #expect(try await f.outbox.claim(instance: "a", limit: 10, lease: 30, now: Date() + 3600).isEmpty)
        let status = try await StatusRepository(pool: f.pool).status()
        #expect(status.lostChannels.map(\.eventID) == [event.id])
        #expect(status.lastErrors.map(\.draft.reason) == ["ChannelNotRegistered"])

        // The operator recreates it: a new APNs channel, the flag cleared, the newest state due again.
        var lifecycle = ChannelLifecycle(state: .lost)
        let wasLost = lifecycle
        #expect(try lifecycle.retryCreateRequested() == .createChannel(attempt: 1))
        #expect(try await f.channels.transition(channelID: channel.id, from: wasLost, to: lifecycle))
        let creating = lifecycle
        _ = try lifecycle.createSucceeded()
        #expect(
            try await f.channels.transition(
                channelID: channel.id, from: creating, to: lifecycle, apnsChannelID: "bmV3", broadcasts: .resume))
        #expect(try await f.events.get(id: event.id)?.channelLost == false)
        let recreated = try #require(try await f.channels.get(id: channel.id))
        #expect(recreated.firstSeenAt! > channel.firstSeenAt!)
        #expect(recreated.openedAt! > channel.openedAt!)
        let resumed = try #require(try await f.outbox.claim(instance: "a", limit: 10, lease: 30).first)
        #expect(resumed.apnsChannelID == "bmV3")
        #expect(resumed.update.contentState == ["home": 2])
        #expect(resumed.pending.count == 2)
    }

    @Test func recreatingALostChannelQueuesTheNewestPendingState() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        let first = try await f.postAccepted(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        let second = try await f.postAccepted(event.id, ["home": 2], at: t0 + 1)
        try await f.outbox.recordPermanentFailure(
            claim, delivery: f.delivery(for: claim, status: 400, reason: "ChannelNotRegistered"),
            channelNotRegistered: true)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        var lifecycle = try #require(try await f.channels.get(id: channel.id)?.lifecycle)
        let lost = lifecycle
        _ = try lifecycle.retryCreateRequested()
        try await f.channels.transition(channelID: channel.id, from: lost, to: lifecycle)
        let creating = lifecycle
        _ = try lifecycle.createSucceeded()
        try await f.channels.transition(channelID: channel.id, from: creating, to: lifecycle, apnsChannelID: "bmV3", broadcasts: .resume)
        let resumed = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(resumed.update.id == second.id)
        #expect(resumed.pending.map(\.id) == [first.id, second.id])
        try await f.outbox.recordBroadcast(resumed, delivery: f.delivery(for: resumed), apsTimestamp: 7)
        #expect(
            try await f.events.counts(eventID: event.id)
                == EventCounts(pending: 0, broadcast: 1, conflated: 1, superseded: 0, deliveries: 2, failedDeliveries: 1))
    }

    @Test func anEndUpdateEndsChannelAndEvent() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 3], at: t0 + 60)
        // The end is never superseded, even when its time is older than the latest state.
        let end = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(action: .end, dismissalDate: t0 + 900, occurredAt: t0),
            contentState: { $0.latestState ?? [:] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        guard case .accepted(let ended, _) = end else {
            Issue.record("end not accepted")
            return
        }
        #expect(ended.disposition == .pending)
        #expect(try await f.events.get(id: event.id)?.status == .ending)
        #expect(try await f.events.latestState(eventID: event.id).at == t0 + 60)
        await #expect(throws: PipelineError.eventClosed(event.id, .ending)) {
            try await f.post(event.id, ["home": 4], at: t0 + 61)
        }
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(claim.update.action == .end)
        #expect(claim.update.dismissalDate == t0 + 900)
        #expect(try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 5) == .completed)
        #expect(try await f.channels.get(id: channel.id)?.state == .lifecycle(.ended))
        #expect(try await f.events.get(id: event.id)?.status == .ended)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates WHERE disposition = 'pending'") == 0)
        await #expect(throws: PipelineError.eventClosed(event.id, .ended)) {
            try await f.post(event.id, ["home": 4], at: t0 + 62)
        }
    }

    /// An end with `at` (`notBefore`) is not claimed before it, however a dispatcher releases the row meanwhile.
    @Test func anEndWithNotBeforeIsNotClaimedEarlier() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        // A dispatcher holds the update's claim while the end arrives, then records the send.
        let sending = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: t0).first)
        let end = UpdateDraft(action: .end, occurredAt: t0 + 1, urgent: true, notBefore: t0 + 600)
        _ = try await f.ingest.ingest(
            eventID: event.id, end, contentState: { $0.latestState ?? [:] },
            response: { _ in StoredResponse(status: 202, body: Data()) })
        #expect(try await f.outbox.recordBroadcast(sending, delivery: f.delivery(for: sending), apsTimestamp: 5, now: t0 + 2) == .newerPending)
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: t0 + 3).isEmpty)
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: t0 + 599).isEmpty)
        #expect(try await f.scalar(Date.self, "SELECT not_before FROM updates WHERE action = 'end'") == t0 + 600)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: t0 + 600).first)
        #expect(claim.update.action == .end)
        // A second end without `at` replaces it (when it says so) and may go at once.
        try await f.outbox.release([claim])
        await #expect(throws: PipelineError.endAlreadyAccepted(event.id)) {
            _ = try await f.ingest.ingest(
                eventID: event.id, UpdateDraft(action: .end, occurredAt: t0 + 4, urgent: true),
                contentState: { $0.latestState ?? [:] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        }
        _ = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(action: .end, occurredAt: t0 + 4, urgent: true, replacesEnd: true),
            contentState: { $0.latestState ?? [:] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: t0 + 5).first?.update.action == .end)
    }

    /// Out-of-order bursts on several events, dispatched by two instances: afterwards no update is
    /// pending, each is broadcast, conflated or superseded, and every event's newest state went out.
    @Test func everyAcceptedUpdateEndsBroadcastConflatedOrSuperseded() async throws {
        let f = try await PipelineFixture.make(maxConnections: 6)
        defer { f.pool.close() }
        var eventIDs: [Int] = []
        for index in 0..<5 {
            let event = try await f.makeEvent("e\(index)")
            _ = try await f.openChannel(eventID: event.id)
            eventIDs.append(event.id)
        }
        let other = f.secondPool()
        defer { other.close() }
        // A copy of the ids: a build with -sanitize=thread captures the var itself and refuses to send it to the task.
        let ingesting = Task { [eventIDs] in
            var generator = SystemRandomNumberGenerator()
            for step in 0..<60 {
                let eventID = eventIDs[step % eventIDs.count]
                let jitter = Double(Int.random(in: -3...3, using: &generator))
                try await f.post(eventID, ["home": .int(Int64(step))], at: t0 + Double(step) + jitter)
            }
        }
        func dispatch(_ pool: PostgresPool, _ name: String) async throws {
            let outbox = OutboxRepository(pool: pool)
            var idle = 0
            while idle < 3 {
                let claims = try await outbox.claim(instance: name, limit: 2, lease: 30)
                if claims.isEmpty {
                    idle += 1
                    // A dispatcher's poll interval: how often this stand-in looks, not a wait for something.
                    try await Task.sleep(for: .milliseconds(20))
                    continue
                }
                idle = 0
                for claim in claims {
                    let timestamp = TimestampSequencer.next(after: claim.lastApsTimestamp, now: Date())
                    try await outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: timestamp)
                }
            }
        }
        // Dispatch while ingesting, then drain what arrived after the dispatchers went idle.
        async let first: Void = dispatch(f.pool, "a")
        async let second: Void = dispatch(other, "b")
        _ = try await (first, second, ingesting.value)
        try await dispatch(f.pool, "a")
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 60)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates WHERE disposition = 'pending'") == 0)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(
            try await f.scalar(
                Int.self,
                """
                SELECT count(*) FROM events e JOIN updates u ON u.id = e.latest_update_id
                WHERE e.id = ANY (\(eventIDs.map(String.init))::bigint[]) AND u.disposition = 'broadcast'
                """) == eventIDs.count)
        // One broadcast delivery per 'broadcast' update: each pending state was sent once.
        #expect(
            try await f.scalar(Int.self, "SELECT count(*) FROM deliveries")
                == f.scalar(Int.self, "SELECT count(*) FROM updates WHERE disposition = 'broadcast'"))
    }

    // MARK: last_broadcast_at, recordBroadcast's outcomes, claim-time pacing

    /// 0007 fills `channels.last_broadcast_at` from the newest accepted broadcast delivery of each channel.
    @Test func lastBroadcastAtIsBackfilledFromAcceptedBroadcasts() async throws {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 2)
        defer { pool.close() }
        try await MigrationRunner(pool: pool, migrations: Migration.embedded.filter { $0.name < "0007" }).migrate()
        let seeded = try await InitialSchemaTests.seed(pool)
        let channel = try await pool.query(
            """
            INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, opened_at, first_seen_at)
            VALUES (\(seeded.app), \(seeded.event), 'Y2gx', 'mostRecent', 'open', now(), now()) RETURNING id
            """)[0].decode(Int.self, column: "id")
        let quiet = try await pool.query(
            """
            INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, opened_at, first_seen_at, ended_at)
            VALUES (\(seeded.app), \(seeded.event), 'Y2gy', 'mostRecent', 'ended', now(), now(), now()) RETURNING id
            """)[0].decode(Int.self, column: "id")
        for (kind, status, at) in [
            ("broadcast", 200, t0), ("broadcast", 200, t0 + 5), ("broadcast", 429, t0 + 9),
            ("channel_read", 200, t0 + 20),
        ] {
            try await pool.execute(
                """
                INSERT INTO deliveries (app_id, kind, channel_id, status, sent_at)
                VALUES (\(seeded.app), \(kind), \(channel), \(status), \(at))
                """)
        }
        #expect(try await MigrationRunner(pool: pool).migrate().contains("0007_channel_last_broadcast.sql"))
        let backfilled = try await pool.query("SELECT id, last_broadcast_at FROM channels ORDER BY id")
            .map { (try $0.decode(Int.self, column: "id"), try $0.decode(Date?.self, column: "last_broadcast_at")) }
        #expect(backfilled.map(\.0) == [channel, quiet])
        #expect(backfilled.map(\.1) == [t0 + 5, nil])
    }

    @Test func recordBroadcastSetsLastBroadcastAtAndTheClaimReadsIt() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(claim.lastBroadcastAt == nil)
        let sentAt = Date(timeIntervalSince1970: 1_900_000_000)
        #expect(try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 9, now: sentAt) == .completed)
        #expect(try await f.scalar(Date.self, "SELECT last_broadcast_at FROM channels WHERE id = \(channel.id)") == sentAt)
        try await f.post(event.id, ["home": 2], at: t0 + 1)
        let next = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(next.lastBroadcastAt == sentAt)
        // A failed attempt does not move it.
        try await f.outbox.recordRetryableFailure(
            next, delivery: f.delivery(for: next, status: 500, reason: "InternalServerError"),
            retryAfter: 0)
        #expect(try await f.scalar(Date.self, "SELECT last_broadcast_at FROM channels WHERE id = \(channel.id)") == sentAt)
    }

    /// A refused aps.timestamp leaves no trace: no stamp, dispositions, delivery, end transition or outbox change.
    @Test func aRefusedTimestampRecordsNothingEvenForAnEnd() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let first = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        try await f.outbox.recordBroadcast(first, delivery: f.delivery(for: first), apsTimestamp: 50, now: t0)
        _ = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(action: .end, occurredAt: t0 + 1),
            contentState: { $0.latestState ?? [:] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        let end = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        #expect(end.update.action == .end)
        for stale in [Int64(50), 49] {
            await #expect(throws: PipelineError.apsTimestampNotIncreasing(channelID: channel.id, attempted: stale)) {
                try await f.outbox.recordBroadcast(end, delivery: f.delivery(for: end), apsTimestamp: stale, now: t0 + 5)
            }
        }
        let after = try #require(try await f.channels.get(id: channel.id))
        #expect(after.state == .lifecycle(.open))
        #expect(after.lastApsTimestamp == 50)
        #expect(try await f.scalar(Date.self, "SELECT last_broadcast_at FROM channels WHERE id = \(channel.id)") == t0)
        #expect(try await f.events.get(id: event.id)?.status == .ending)
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(end.update.id)") == "pending")
        #expect(try await f.deliveries.recent(channelID: channel.id).count == 1)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE claim_token = \(end.claimToken)") == 1)
        // With a higher one it all happens.
        #expect(try await f.outbox.recordBroadcast(end, delivery: f.delivery(for: end), apsTimestamp: 51, now: t0 + 5) == .completed)
        #expect(try await f.channels.get(id: channel.id)?.state == .lifecycle(.ended))
        #expect(try await f.events.get(id: event.id)?.status == .ended)
    }

    /// A newer update arriving during the send: the row is released due after `nextAttemptDelay`, or
    /// at once when the newer update is urgent.
    @Test func aReleasedRowIsDueAfterTheDelayUnlessUrgent() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        try await f.post(event.id, ["home": 2], at: t0 + 1)
        let now = Date()
        #expect(
            try await f.outbox.recordBroadcast(
                claim, delivery: f.delivery(for: claim), apsTimestamp: 10, nextAttemptDelay: 1,
                now: now) == .newerPending)
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: now + 0.5).isEmpty)
        let paced = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: now + 1).first)
        #expect(paced.update.contentState == ["home": 2])
        // Now an urgent update arrives during that send.
        _ = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(alert: ["title": "GOAL"], occurredAt: t0 + 2, urgent: true),
            contentState: { _ in ["home": 3] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        #expect(
            try await f.outbox.recordBroadcast(
                paced, delivery: f.delivery(for: paced), apsTimestamp: 11, nextAttemptDelay: 1,
                now: now + 1) == .newerPending)
        #expect(try await f.outbox.claim(instance: "a", limit: 1, lease: 30, now: now + 1).first?.update.alert == ["title": "GOAL"])
    }

    /// An ingest that commits a newer update_id after recordBroadcast's snapshot, while it waits for the
    /// row: the row is released for the newer update, not deleted and not left claimed.
    @Test func aNewerUpdateCommittedDuringTheRecordIsReleased() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        let sent = try await f.postAccepted(event.id, ["home": 1], at: t0)
        let claim = try #require(try await f.outbox.claim(instance: "a", limit: 1, lease: 30).first)
        let newer = try await f.postAccepted(event.id, ["home": 2], at: t0 + 1)
        try await f.pool.execute("UPDATE outbox SET update_id = \(sent.id)")  // as if the newer update's upsert had not happened yet
        let ingest = f.secondPool()
        defer { ingest.close() }
        let committed = try await ingest.withTransaction { tx in
            try await tx.execute("UPDATE outbox SET update_id = \(newer.id), updated_at = now()")
            let recording = Task { try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 20) }
            // Commit only once the record waits for this transaction's row lock.
            _ = try await eventually(every: .milliseconds(10)) {
                try await f.scalar(Int.self, "SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
            }
            return recording
        }
        #expect(try await committed.value == .newerPending)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE claim_token IS NULL AND update_id = \(newer.id)") == 1)
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(sent.id)") == "broadcast")
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(newer.id)") == "pending")
        #expect(try await f.channels.get(id: channel.id)?.lastApsTimestamp == 20)
        let again = try #require(try await f.outbox.claim(instance: "b", limit: 1, lease: 30).first)
        #expect(again.update.id == newer.id)
    }

    /// A late instance whose claim was taken over: its failure is recorded, the new owner's row untouched.
    @Test func aLostClaimsRetryableFailureLeavesTheRowAlone() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1], at: t0)
        let late = try #require(try await f.outbox.claim(instance: "late", limit: 1, lease: 30).first)
        let owner = try #require(try await f.outbox.claim(instance: "b", limit: 1, lease: 30, now: Date() + 31).first)
        #expect(
            try await f.outbox.recordRetryableFailure(
                late, delivery: f.delivery(for: late, status: 503, reason: "ServiceUnavailable"),
                retryAfter: 60) == false)
        #expect(try await f.deliveries.recent(channelID: channel.id).map(\.draft.status) == [503])
        #expect(try await f.scalar(Int.self, "SELECT attempts FROM outbox WHERE claim_token = \(owner.claimToken)") == 0)
        #expect(try await f.outbox.recordRetryableFailure(owner, delivery: f.delivery(for: owner, status: 503), retryAfter: 60))
        #expect(try await f.scalar(Int.self, "SELECT attempts FROM outbox WHERE claim_token IS NULL") == 1)
    }

    /// With pacing, a row whose channel broadcast less than the interval ago is not claimed but made due
    /// when the pacing allows; urgent rows and rows of quiet channels are claimed as before.
    @Test func theClaimPacesChannelsThatJustBroadcast() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let events = try await f.eventsWithQueuedUpdates(3, at: t0)
        // Ahead of the database clock, so the rows posted below (due at the database's now()) are due for it: ten
        // minutes, as a starved machine once spent more than the 10 s this was between here and the posts.
        let now = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 600).rounded())
        for claim in try await f.outbox.claim(instance: "a", limit: 10, lease: 30, now: now) {
            // events[2] broadcast long ago; the others just now.
            let sentAt = claim.eventID == events[2] ? now - 5 : now - 0.25
            try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 5, now: sentAt)
        }
        for eventID in events { try await f.post(eventID, ["home": 2], at: t0 + 1) }
        _ = try await f.ingest.ingest(
            eventID: events[1], UpdateDraft(alert: ["title": "GOAL"], occurredAt: t0 + 2, urgent: true),
            contentState: { _ in ["home": 3] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        let batch = try await f.outbox.claimBatch(instance: "a", limit: 10, lease: 30, pacing: 1, now: now)
        #expect(batch.taken == 3)
        #expect(Set(batch.claims.map(\.eventID)) == [events[1], events[2]])
        #expect(batch.pacedUntil == now + 0.75)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE claim_token IS NULL AND event_id = \(events[0])") == 1)
        #expect(try await f.outbox.claimBatch(instance: "a", limit: 10, lease: 30, pacing: 1, now: now + 0.5).taken == 0)
        let due = try await f.outbox.claimBatch(instance: "a", limit: 10, lease: 30, pacing: 1, now: now + 0.75)
        #expect(due.claims.map(\.eventID) == [events[0]])
        #expect(due.pacedUntil == nil)
    }

    @Test func warmingUpPreparesWhatIngestAndTheDispatcherRunAndWritesNothing() async throws {
        let f = try await PipelineFixture.make(maxConnections: 1)  // one connection: every statement runs on it
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let rows: PostgresQuery = """
            SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM updates) + (SELECT count(*) FROM outbox)
                 + (SELECT count(*) FROM idempotency_keys) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM channels)
            """
        let before = try await f.scalar(Int.self, rows)
        let preparedCount: PostgresQuery = """
            SELECT count(*) FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'
            """
        let preparedBefore = try await f.scalar(Int.self, preparedCount)
        try await f.pool.withConnection { connection in
            try await PipelineWarmUp.ingest(on: connection, pacing: 1)
            try await PipelineWarmUp.dispatcher(on: connection)
        }
        #expect(try await f.scalar(Int.self, rows) == before)
        let warmed = try await f.scalar(Int.self, preparedCount)
        #expect(warmed == preparedBefore + 4)  // the ingest's write; the claim, its rows and the record
        let customPlans: PostgresQuery = """
            SELECT coalesce(sum(custom_plans), 0)::bigint FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'
            """
        let customPlansBefore = try await f.scalar(Int.self, customPlans)
        // The real thing reuses every one of them: a keyed ingest (planning nothing: its plans are settled),
        // a claim, a record.
        guard
            case .accepted = try await IngestRepository(pool: f.pool, pacing: 1).ingest(
                eventID: event.id, UpdateDraft(occurredAt: t0, apiKeyID: f.apiKeyID), state: ["home": 1],
                idempotency: IdempotencyRequest(apiKeyID: f.apiKeyID, key: "goal-1", requestHash: Data(count: 32)),
                response: { _ in StoredResponse(status: 202, body: Data()) })
        else { throw FixtureError.notAccepted }
        #expect(try await f.scalar(Int.self, customPlans) == customPlansBefore)
        let claim = try #require(try await f.outbox.claimBatch(instance: "a", limit: 10, lease: 30, pacing: 1).claims.first)
        try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 1)
        #expect(try await f.scalar(Int.self, preparedCount) == warmed)
    }

    @Test func anIngestWithPacingQueuesAnUpdateDueWhenItsChannelMayBroadcastAgain() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let events = try await f.eventsWithQueuedUpdates(3, at: t0)
        for claim in try await f.outbox.claim(instance: "a", limit: 10, lease: 30) {
            // events[0] broadcast a quarter of a second ago, the others long ago (a minute's pacing, so a slow
            // machine cannot make the first one due before the test looks).
            let sentAt = Date() - (claim.eventID == events[0] ? 0.25 : 600)
            try await f.outbox.recordBroadcast(claim, delivery: f.delivery(for: claim), apsTimestamp: 5, sentAt: sentAt)
        }
        let paced = IngestRepository(pool: f.pool, pacing: 60)
        func post(_ eventID: Int, urgent: Bool = false, at offset: TimeInterval) async throws -> IngestedUpdate {
            guard
                case .accepted(let update, _) = try await paced.ingest(
                    eventID: eventID, UpdateDraft(occurredAt: t0 + offset, urgent: urgent), state: ["home": .int(Int64(offset))],
                    response: { _ in StoredResponse(status: 202, body: Data()) })
            else { throw FixtureError.notAccepted }
            return update
        }
        let held = try await post(events[0], at: 1)
        let free = try await post(events[1], at: 1)
        // The outbox row is due a minute after the channel's last broadcast, and the answer says in how long.
        #expect(
            try await f.scalar(
                Bool.self,
                """
                SELECT o.next_attempt_at = c.last_broadcast_at + interval '1 minute' AS paced
                FROM outbox o JOIN channels c ON c.event_id = o.event_id WHERE o.event_id = \(events[0])
                """))
        let dueIn = try #require(held.dueIn)
        #expect(dueIn > 50 && dueIn <= 59.75)
        #expect(try #require(free.dueIn) <= 0)
        // A claim now takes only the row that may go, with no pacing of its own to do.
        let batch = try await f.outbox.claimBatch(instance: "a", limit: 10, lease: 30, pacing: 60)
        #expect(batch.claims.map(\.eventID) == [events[1]])
        #expect(batch.taken == 1 && batch.pacedUntil == nil)
        // An urgent update makes the held row due at once; without pacing a row is due now.
        #expect(try #require(try await post(events[0], urgent: true, at: 2).dueIn) < 0)
        #expect(try await f.outbox.claim(instance: "a", limit: 10, lease: 30).map(\.eventID) == [events[0]])
        guard
            case .accepted(let unpaced, _) = try await f.ingest.ingest(
                eventID: events[2], UpdateDraft(occurredAt: t0 + 1), state: ["home": 1],
                response: { _ in StoredResponse(status: 202, body: Data()) })
        else { throw FixtureError.notAccepted }
        #expect(try #require(unpaced.dueIn) <= 0)
    }
}
