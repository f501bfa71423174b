import APNs
import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The dispatcher against a real PostgreSQL and an in-memory APNs: conflation, timestamps, priority,
/// budget, expiration, failures, and two instances sharing one database.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct PipelineDispatcherTests {
    @Test func aBurstIsConflatedToAboutOneBroadcastPerSecondWithTheNewestState() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        let dispatcher = f.dispatcher()
        for minute in 1...10 {
            try await f.post(
                event.id, ["home": 0, "away": 0, "minute": .int(Int64(minute))], at: f.clock.now.addingTimeInterval(Double(minute) / 100))
        }
        let first = try await dispatcher.dispatchOnce()
        #expect(first.count == 1)
        guard case .sent = first.first else {
            Issue.record("expected a send, got \(first)")
            return
        }
        #expect(f.apns.broadcasts.count == 1)
        #expect(f.apns.broadcasts.last?.aps["content-state"]?["minute"] == 10)
        #expect(f.apns.broadcasts.last?.channelID == channel.apnsChannelID)
        #expect(try await f.dispositions(eventID: event.id) == ["broadcast": 1, "conflated": 9])

        // More within the same second: postponed, not sent.
        for minute in 11...15 {
            try await f.post(
                event.id, ["home": 0, "away": 0, "minute": .int(Int64(minute))], at: f.clock.now.addingTimeInterval(Double(minute) / 100))
        }
        #expect(try await dispatcher.dispatchOnce() == [.postponed])
        #expect(try await dispatcher.dispatchOnce().isEmpty)  // not due yet
        #expect(f.apns.broadcasts.count == 1)

        f.clock.advance(by: 1.1)
        let second = try await dispatcher.dispatchOnce()
        guard case .sent = second.first else {
            Issue.record("expected a send, got \(second)")
            return
        }
        #expect(f.apns.broadcasts.count == 2)
        #expect(f.apns.broadcasts.last?.aps["content-state"]?["minute"] == 15)
        #expect(try await f.dispositions(eventID: event.id) == ["broadcast": 2, "conflated": 13])
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(f.metrics.conflated.value() == 13)
        #expect(f.metrics.ingestToAccepted.count() == 2)
    }

    @Test func apsTimestampsStrictlyIncreaseEvenWhenTheClockGoesBackwards() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        var dispatcher = f.dispatcher()
        var stamps: [Int64] = []
        let start = f.clock.now
        for step in 0..<4 {
            if step == 2 { dispatcher = f.dispatcher(instance: "d2") }  // a fresh instance: no memory, the database only
            try await f.post(event.id, ["home": .int(Int64(step)), "away": 0], priority: .high, at: start.addingTimeInterval(Double(step)))
            let results = try await dispatcher.dispatchOnce()
            guard case .sent(_, _, let stamp)? = results.first else {
                Issue.record("expected a send, got \(results)")
                return
            }
            stamps.append(stamp)
            f.clock.advance(by: -10)  // the clock steps back after every send
        }
        #expect(stamps == [stamps[0], stamps[0] + 1, stamps[0] + 2, stamps[0] + 3])
        #expect(f.apns.broadcasts.map { $0.aps["timestamp"] } == stamps.map { JSONValue.int($0) })
    }

    @Test func aSendRepeatedAfterACrashBeforeItsRecordCarriesTheSameApsTimestamp() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1, "away": 0], alert: ["title": "GOAL", "body": "1-0"])
        // An instance claims the update and sends it, APNs accepts it, and the instance dies before the record.
        let crashed = try await OutboxRepository(pool: f.pool).claimBatch(instance: "crashed", limit: 10, lease: 30, now: f.clock.now)
        let sent = try #require(crashed.claims.first?.apsTimestamp)
        // Its claim runs out; another instance sends the update again, with the same aps.timestamp (the device
        // ignores it rather than showing the goal twice).
        f.clock.advance(by: 45)
        let dispatcher = f.dispatcher(instance: "d2")
        guard case .sent(_, _, let repeated)? = try await dispatcher.dispatchOnce().first else {
            Issue.record("expected the repeated send")
            return
        }
        #expect(repeated == sent)
        #expect(f.apns.broadcasts.map { $0.aps["timestamp"] } == [.int(sent)])
        // The next update goes above it.
        try await f.post(event.id, ["home": 2, "away": 0], priority: .high)
        guard case .sent(_, _, let next)? = try await dispatcher.dispatchOnce().first else {
            Issue.record("expected the next send")
            return
        }
        #expect(next > sent)
    }

    @Test func aFixedTimestampThatAnotherSendOvertookIsNotReused() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1, "away": 0], priority: .high)
        let crashed = try await OutboxRepository(pool: f.pool).claimBatch(instance: "crashed", limit: 10, lease: 30, now: f.clock.now)
        let fixed = try #require(crashed.claims.first?.apsTimestamp)
        // Meanwhile the channel recorded a later timestamp (another instance's send). Two guards keep the fixed one
        // from going again: the claim fixes a new one when the old is not above the channel's last, and the
        // dispatcher sends above what it remembers (its memory rebuilt from the channel).
        try await f.pool.execute("UPDATE channels SET last_aps_timestamp = \(fixed + 5) WHERE id = \(channel.id)")
        f.clock.advance(by: 45)
        guard case .sent(_, _, let sent)? = try await f.dispatcher(instance: "d2").dispatchOnce().first else {
            Issue.record("expected a send")
            return
        }
        #expect(sent > fixed + 5)
    }

    @Test func alertsGoAtOnceAtTenPlainUpdatesAtFiveSignificantChangesAtTen() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let dispatcher = f.dispatcher()
        func send(_ state: JSONValue, alert: JSONValue? = nil) async throws -> [DispatchResult] {
            try await f.post(event.id, state, alert: alert, at: f.clock.now)
            return try await dispatcher.dispatchOnce()
        }
        // The first broadcast has no baseline: every significant field counts as changed.
        #expect(try await send(["home": 0, "away": 0, "minute": 1]).first.map(priority) == .high)
        f.clock.advance(by: 2)
        #expect(try await send(["home": 0, "away": 0, "minute": 2]).first.map(priority) == .low)
        f.clock.advance(by: 2)
        #expect(try await send(["home": 1, "away": 0, "minute": 3]).first.map(priority) == .high)
        // Within the same second: an alert goes at once, at 10, with its alert.
        let goal: JSONValue = ["title": "Goal", "body": "1-1", "sound": "default"]
        #expect(try await send(["home": 1, "away": 1, "minute": 4], alert: goal).first.map(priority) == .high)
        #expect(f.apns.broadcasts.last?.aps["alert"] == ["title": "Goal", "body": "1-1", "sound": "default"])
        // A plain update in that second waits.
        #expect(try await send(["home": 1, "away": 1, "minute": 5]) == [.postponed])
        #expect(f.apns.broadcasts.map(\.priority) == [.high, .low, .high, .high])
        #expect(f.metrics.broadcasts.value(["10", "accepted"]) == 3)
        #expect(f.metrics.broadcasts.value(["5", "accepted"]) == 1)
    }

    @Test func anAlertOfAConflatedUpdateIsCarriedWithTheNewestState() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1, "away": 0], alert: ["title": "Goal", "body": "1-0"], at: f.clock.now)
        try await f.post(event.id, ["home": 1, "away": 0, "minute": 12], at: f.clock.now.addingTimeInterval(1))
        let results = try await f.dispatcher().dispatchOnce()
        #expect(results.first.map(priority) == .high)
        #expect(f.apns.broadcasts.last?.aps["alert"]?["title"] == "Goal")
        #expect(f.apns.broadcasts.last?.aps["content-state"]?["minute"] == 12)
    }

    @Test func theBudgetDowngradesAndCountsAndHoldsAcrossInstances() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        var dispatcher = f.dispatcher(budget: 2)
        var priorities: [PushPriority] = []
        for goals in 1...5 {
            if goals == 5 { dispatcher = f.dispatcher(instance: "d2", budget: 2) }  // rebuilt from deliveries
            try await f.post(event.id, ["home": .int(Int64(goals)), "away": 0], at: f.clock.now)
            guard let result = try await dispatcher.dispatchOnce().first else {
                Issue.record("nothing claimed")
                return
            }
            priorities.append(priority(result)!)
            f.clock.advance(by: 2)
        }
        #expect(priorities == [.high, .high, .low, .low, .low])
        #expect(f.metrics.priorityDowngrades.value() == 3)
        let recorded = try await f.deliveries.recent(channelID: channel.id).map(\.draft.priority)
        #expect(recorded == [5, 5, 5, 10, 10])
        // An hour later the budget is back.
        f.clock.advance(by: 3700)
        try await f.post(event.id, ["home": 9, "away": 0], at: f.clock.now)
        #expect(try await dispatcher.dispatchOnce().first.map(priority) == .high)
    }

    @Test func aFreshInstanceRebuildsEachChannelsMemoryOfABatch() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        var events: [Int] = []
        for _ in 0..<3 {
            let event = try await f.makeEvent()
            _ = try await f.openChannel(eventID: event.id)
            events.append(event.id)
        }
        // The first instance spends the budget (1) of the first two channels and sets their last state.
        let first = f.dispatcher(budget: 1)
        for event in events.prefix(2) { try await f.post(event, ["home": 1, "away": 0], at: f.clock.now) }
        #expect(try await first.dispatchOnce().compactMap(priority) == [.high, .high])
        f.clock.advance(by: 2)
        // A fresh instance claims all three in one batch: the first two spent their budget, so their goals
        // go at 5; the third has no history (no baseline, budget intact) and goes at 10. A minute-only change
        // of the first two would be at 5 anyway, so the goals also show the baselines were each channel's.
        try await f.post(events[0], ["home": 2, "away": 0], at: f.clock.now)
        try await f.post(events[1], ["home": 1, "away": 0, "minute": 5], at: f.clock.now)
        try await f.post(events[2], ["home": 1, "away": 0], at: f.clock.now)
        let second = f.dispatcher(instance: "d2", budget: 1)
        #expect(try await second.dispatchOnce().compactMap(priority) == [.low, .low, .high])
        #expect(f.metrics.priorityDowngrades.value() == 1)
    }

    @Test func expirationIsZeroWithoutStorageAndATimeToLiveWithIt() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let stored = try await f.makeEvent(storage: .mostRecent)
        let unstored = try await f.makeEvent(storage: .notStored)
        let storedChannel = try await f.openChannel(eventID: stored.id)
        let unstoredChannel = try await f.openChannel(eventID: unstored.id)
        try await f.post(stored.id, ["home": 1, "away": 0], at: f.clock.now)
        try await f.post(unstored.id, ["home": 1, "away": 0], at: f.clock.now)
        #expect(try await f.dispatcher().dispatchOnce().count == 2)
        let byChannel = Dictionary(uniqueKeysWithValues: f.apns.broadcasts.map { ($0.channelID, $0.expiration) })
        #expect(byChannel[unstoredChannel.apnsChannelID!] == 0)
        #expect(byChannel[storedChannel.apnsChannelID!] == Int64(f.clock.now.timeIntervalSince1970) + 4 * 3600)
    }

    @Test func channelNotRegisteredFlagsTheEventAndStopsBroadcasting() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        f.apns.scriptBroadcasts([RecordingChannelAPNs.failure(400, .channelNotRegistered)])
        try await f.post(event.id, ["home": 1, "away": 0], at: f.clock.now)
        let dispatcher = f.dispatcher()
        #expect(try await dispatcher.dispatchOnce() == [.channelLost])
        #expect(try await f.events.get(id: event.id)?.channelLost == true)
        #expect(try await f.channels.get(id: channel.id)?.state == .lifecycle(.lost))
        #expect(try await f.deliveries.recent(channelID: channel.id).first?.draft.reason == "ChannelNotRegistered")
        #expect(f.log.all.contains { $0.contains("level=error") && $0.contains("channel_lost") })
        #expect(f.metrics.broadcasts.value(["10", "channel_lost"]) == 1)
        // Later updates are accepted but not broadcast.
        f.clock.advance(by: 5)
        try await f.post(event.id, ["home": 2, "away": 0], at: f.clock.now)
        #expect(try await dispatcher.dispatchOnce().isEmpty)
        #expect(f.apns.broadcasts.isEmpty)
    }

    @Test func aRetryable503IsRecordedAndRetriedAfterBackoff() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        f.apns.scriptBroadcasts([RecordingChannelAPNs.failure(503, .serviceUnavailable)])
        let update = try await f.post(event.id, ["home": 1, "away": 0], at: f.clock.now)
        let dispatcher = f.dispatcher()
        #expect(try await dispatcher.dispatchOnce() == [.retryScheduled])
        #expect(try await f.scalar(Int.self, "SELECT attempts FROM outbox") == 1)
        #expect(try await dispatcher.dispatchOnce().isEmpty)  // backing off
        f.clock.advance(by: 1.5)  // the first retry waits 0.5 to 1 s
        let results = try await dispatcher.dispatchOnce()
        guard case .sent(let sent, _, _)? = results.first else {
            Issue.record("expected a send, got \(results)")
            return
        }
        #expect(sent == update.id)
        let rows = try await f.deliveries.recent(channelID: channel.id)
        #expect(rows.map(\.draft.status) == [200, 503])
        #expect(rows.map(\.draft.attempt) == [2, 1])
        #expect(f.metrics.retries.value(["broadcast"]) == 1)
        #expect(f.metrics.apnsAnswers.value(["broadcast", "ServiceUnavailable"]) == 1)
    }

    @Test func everyAttemptOfTheClientIsADeliveryRow() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        f.apns.state.withLock {
            $0.clientRetriesBeforeNext = [RecordingChannelAPNs.failure(503, .serviceUnavailable), APNsResult(transportFailure: .timeout)]
        }
        try await f.post(event.id, ["home": 1, "away": 0], at: f.clock.now)
        guard case .sent(_, _, let stamp)? = try await f.dispatcher().dispatchOnce().first else {
            Issue.record("expected a send")
            return
        }
        let rows = try await f.deliveries.recent(channelID: channel.id).sorted { $0.draft.attempt < $1.draft.attempt }
        #expect(rows.map(\.draft.attempt) == [1, 2, 3])
        #expect(rows.map(\.draft.status) == [503, nil, 200])
        #expect(rows.map(\.draft.reason) == ["ServiceUnavailable", "timeout", nil])
        #expect(rows.allSatisfy { $0.draft.apsTimestamp == stamp })
        #expect(f.metrics.apnsAnswers.value(["broadcast", "timeout"]) == 1)
    }

    @Test func twoDispatchersSendEachPendingStateOnceAndTheNewestOfEveryEvent() async throws {
        let f = try await PipelineServiceFixture.make(maxConnections: 8)
        defer { f.pool.close() }
        var eventIDs: [Int] = []
        for index in 0..<12 {
            let event = try await f.makeEvent("e\(index)")
            _ = try await f.openChannel(eventID: event.id)
            eventIDs.append(event.id)
        }
        let otherPool = PostgresPool(configuration: f.configuration, maxConnections: 8)
        defer { otherPool.close() }
        let fast: (inout BroadcastDispatcherConfiguration) -> Void = {
            $0.conflation = ConflationPolicy(minimumInterval: 0.05)
            $0.pollInterval = .milliseconds(50)
            $0.maxConcurrentSends = 4
        }
        let first = f.dispatcher(instance: "a", clock: SystemWallClock(), listen: true, configure: fast)
        let second = f.dispatcher(instance: "b", pool: otherPool, clock: SystemWallClock(), listen: true, configure: fast)
        let shutdown = ShutdownSignal()
        let running = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await first.run(until: shutdown) }
                group.addTask { try await second.run(until: shutdown) }
                try await group.waitForAll()
            }
        }
        var newest: [Int: Int64] = [:]
        for round in 1...8 {
            for eventID in eventIDs where Bool.random() || round == 8 {
                try await f.post(eventID, ["home": .int(Int64(round)), "away": .int(Int64(eventID))], at: Date().addingTimeInterval(Double(round)))
                newest[eventID] = Int64(round)
            }
            // The feed's pace is the scenario (rounds that land while both instances claim), not a wait for them.
            try await Task.sleep(for: .milliseconds(30))
        }
        _ = try await eventually { try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0 }
        shutdown.trigger()
        try await running.value
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates WHERE disposition = 'pending'") == 0)
        // Each update was sent at most once, by exactly one instance, and never concurrently per channel.
        #expect(
            try await f.scalar(
                Int.self,
                """
                SELECT count(*) FROM (SELECT update_id FROM deliveries WHERE status = 200 GROUP BY update_id HAVING count(*) > 1) d
                """) == 0)
        #expect(f.apns.state.withLock { $0.overlaps } == 0)
        #expect(f.apns.broadcasts.count == (try await f.scalar(Int.self, "SELECT count(*) FROM deliveries WHERE status = 200")))
        // The newest state of every event went last on its channel, with increasing timestamps.
        for eventID in eventIDs {
            let channel = try #require(try await f.channels.channels(eventID: eventID).first)
            let sent = f.apns.broadcasts.filter { $0.channelID == channel.apnsChannelID }
            #expect(sent.last?.aps["content-state"]?["home"] == .int(newest[eventID]!))
            let stamps = sent.compactMap { $0.aps["timestamp"]?.intValue }
            #expect(stamps == stamps.sorted() && Set(stamps).count == stamps.count)
        }
        let senders = try await f.pool.query("SELECT DISTINCT claimed_by FROM outbox")
        #expect(senders.isEmpty)
    }

    @Test func aCarriedAlertThatWouldNotFitIsDropped() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let long = String(repeating: "x", count: 1500)
        try await f.post(event.id, ["home": 1, "away": 0], alert: ["title": .string(long), "body": .string(long)], at: f.clock.now)
        let big: JSONValue = ["home": 1, "away": 0, "note": .string(String(repeating: "y", count: 3800))]
        try await f.post(event.id, big, at: f.clock.now.addingTimeInterval(1))
        let results = try await f.dispatcher().dispatchOnce()
        guard case .sent = results.first else {
            Issue.record("expected a send, got \(results)")
            return
        }
        let sent = try #require(f.apns.broadcasts.last)
        #expect(sent.aps["alert"] == nil)
        #expect(sent.aps["content-state"] == big)
        #expect(sent.bytes <= 5120)
        #expect(f.metrics.alertsDropped.value() == 1)
    }

    @Test func notifyWakesTheDispatcherLongBeforeItsPoll() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let dispatcher = f.dispatcher(clock: SystemWallClock(), listen: true) { $0.pollInterval = .seconds(120) }
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        // The first (empty) claim is done and the LISTEN in place; now it waits.
        try #require(try await eventually { dispatcher.isIdle }, "the dispatcher never settled to wait")
        try await f.post(event.id, ["home": 1, "away": 0], at: Date())
        // Its own instance's NOTIFY is skipped: that process's notifier wakes its dispatcher directly.
        OutboxNotifier(pool: f.pool, sender: "d1", logger: Logger { _ in }).committed()
        // Nothing happening is the behaviour under test: a fixed wait (the poll is 120 s away), then nothing was sent.
        try await Task.sleep(for: .milliseconds(500))
        #expect(f.apns.broadcasts.isEmpty)
        // Another instance's notifier (nothing wakes this dispatcher in-process): only the NOTIFY can.
        OutboxNotifier(pool: f.pool, sender: "d2", logger: Logger { _ in }).committed()
        #expect(try await eventually { !f.apns.broadcasts.isEmpty }, "the NOTIFY did not wake the dispatcher")
        shutdown.trigger()
        try await running.value
        #expect(f.apns.broadcasts.count == 1)
    }

    @Test func theCatalogReadsEachAttributeTypesSchemaOnce() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let schema = try #require(try await f.catalog.contentStateSchema(attributeTypeID: f.typeID))
        #expect(schema.significantChanges(from: ["home": 0, "away": 0], to: ["home": 1, "away": 0]).count == 1)
        // Immutable once written, so kept: a change behind its back (which the API never makes) is not read again.
        try await f.pool.execute("UPDATE attribute_types SET content_state_schema = '{\"home\": \"int\", \"away\": \"int\"}' WHERE id = \(f.typeID)")
        let again = try #require(try await f.catalog.contentStateSchema(attributeTypeID: f.typeID))
        #expect(again.significantChanges(from: ["home": 0, "away": 0], to: ["home": 1, "away": 0]).count == 1)
        #expect(try await f.catalog.contentStateSchema(attributeTypeID: f.typeID + 1000) == nil)
    }

    @Test func claimsKeepTheirSpacingSoABurstIsClaimedAFewAtATime() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let first = try await f.makeEvent()
        let second = try await f.makeEvent()
        let channels = [try await f.openChannel(eventID: first.id), try await f.openChannel(eventID: second.id)]
        let dispatcher = f.dispatcher(clock: SystemWallClock()) {
            $0.pollInterval = .seconds(120)
            $0.claimSpacing = .seconds(1)
        }
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        func waitForBroadcasts(_ count: Int) async throws { _ = try await eventually { f.apns.broadcasts.count >= count } }
        // Two goals, each woken for at once; the second claim waits out the spacing after the first, which
        // came no sooner than its wake-up.
        try await f.post(first.id, ["home": 1, "away": 0], alert: ["title": "GOAL"], at: Date())
        let firstWake = Date()
        dispatcher.wake()
        try await waitForBroadcasts(1)
        try await f.post(second.id, ["home": 1, "away": 0], alert: ["title": "GOAL"], at: Date())
        dispatcher.wake()
        try await waitForBroadcasts(2)
        shutdown.trigger()
        try await running.value
        #expect(f.apns.broadcasts.count == 2)
        let secondSentAt = try await f.scalar(Date.self, "SELECT last_broadcast_at FROM channels WHERE id = \(channels[1].id)")
        #expect(secondSentAt.timeIntervalSince(firstWake) >= 0.95)
    }

    @Test func shutdownFinishesSendsInFlightAndStopsClaiming() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        f.apns.state.withLock { $0.broadcastDelay = .milliseconds(300) }
        let dispatcher = f.dispatcher(clock: SystemWallClock(), listen: true) { $0.pollInterval = .milliseconds(50) }
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        try await f.post(event.id, ["home": 1, "away": 0], priority: .high, at: Date())
        // Bounded generously: under the full suite the first claim can take seconds.
        _ = try await eventually { f.apns.state.withLock({ $0.broadcastsStarted }) > 0 }
        try #require(f.apns.state.withLock { $0.broadcastsStarted } == 1)
        shutdown.trigger()
        try await running.value
        // The send in flight finished and was recorded; nothing is left claimed.
        #expect(f.apns.broadcasts.count == 1)
        #expect(try await f.dispositions(eventID: event.id) == ["broadcast": 1])
        try await f.post(event.id, ["home": 2, "away": 0], priority: .high, at: Date().addingTimeInterval(1))
        // Nothing happening is the behaviour under test: four polls' worth of time, and nobody claimed.
        try await Task.sleep(for: .milliseconds(200))
        #expect(f.apns.broadcasts.count == 1)  // stopped: nobody claims any more
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE claimed_by IS NOT NULL") == 0)
    }

    /// An update that comes too soon after a broadcast is sent when the pacing allows, not at the next
    /// poll: the loop sleeps until the earliest due time it set. The pacing still holds.
    @Test func aPacedUpdateGoesWhenDueLongBeforeThePoll() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        let dispatcher = f.dispatcher(clock: SystemWallClock()) { $0.pollInterval = .seconds(120) }
        try await f.post(event.id, ["home": 1, "away": 0], at: Date())
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        // Waits for the n-th accepted broadcast to be recorded; returns when its send began (the pacing reference).
        func recordedBroadcast(_ count: Int) async throws -> Date? {
            _ = try await eventually {
                try await f.scalar(Int.self, "SELECT count(*) FROM deliveries WHERE channel_id = \(channel.id) AND status = 200") >= count
            }
            return try await f.pool.query("SELECT last_broadcast_at FROM channels WHERE id = \(channel.id)")[0]
                .decode(Date?.self, column: "last_broadcast_at")
        }
        var sentAt = [try await recordedBroadcast(1)]
        // Too soon for the channel; nothing but the loop's own due time can bring it out (no NOTIFY, poll 120 s).
        try await f.post(event.id, ["home": 2, "away": 0], at: Date())
        dispatcher.wake()
        sentAt.append(try await recordedBroadcast(2))
        // And a third the same way.
        try await f.post(event.id, ["home": 3, "away": 0], at: Date())
        dispatcher.wake()
        sentAt.append(try await recordedBroadcast(3))
        shutdown.trigger()
        try await running.value
        #expect(f.apns.broadcasts.map { $0.aps["content-state"]?["home"] } == [1, 2, 3])
        let times = sentAt.compactMap { $0 }
        #expect(times.count == 3)
        // A second apart, less the tolerance for the loop's wake-up granularity.
        #expect(dispatcher.configuration.conflation.pacing == 0.975)
        for (earlier, later) in zip(times, times.dropFirst()) { #expect(later.timeIntervalSince(earlier) >= 0.975) }
    }

    @Test func anUpdateQueuedForLaterByThePacingWakesTheDispatcherWhenDue() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let channel = try await f.openChannel(eventID: event.id)
        // Two seconds' pacing: the next update comes well inside it even on a slow machine.
        let dispatcher = f.dispatcher(clock: SystemWallClock()) {
            $0.pollInterval = .seconds(120)
            $0.conflation = ConflationPolicy(minimumInterval: 2)
        }
        let paced = IngestRepository(pool: f.pool, pacing: 2)
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        var dueIn: [TimeInterval] = []
        var ingestedAt: [Date] = []
        var sentAt: [Date?] = []  // when each send began (the pacing's reference)
        for home in 1...3 {
            ingestedAt.append(Date())
            guard
                case .accepted(let update, _) = try await paced.ingest(
                    eventID: event.id, UpdateDraft(occurredAt: Date()), state: ["home": .int(Int64(home)), "away": 0],
                    response: { _ in StoredResponse(status: 202, body: Data()) })
            else {
                Issue.record("refused")
                return
            }
            dueIn.append(update.dueIn ?? -1)
            // What serve's notifier passes on: only the due time, never a claim now (no NOTIFY, poll 120 s).
            dispatcher.wake(dueIn: update.dueIn)
            _ = try await eventually {
                try await f.scalar(Int.self, "SELECT count(*) FROM deliveries WHERE channel_id = \(channel.id) AND status = 200") >= home
            }
            sentAt.append(
                try await f.pool.query("SELECT last_broadcast_at FROM channels WHERE id = \(channel.id)")[0]
                    .decode(Date?.self, column: "last_broadcast_at"))
        }
        shutdown.trigger()
        try await running.value
        #expect(f.apns.broadcasts.map { $0.aps["content-state"]?["home"] } == [1, 2, 3])
        // The first was due at once; the others waited for the channel's pacing, unless (a slow machine) the
        // previous send's record came in after its pacing had run out.
        #expect(dueIn[0] <= 0)
        for index in 1...2 {
            guard let previous = sentAt[index - 1] else { continue }
            #expect(
                dueIn[index] > 0 || ingestedAt[index].timeIntervalSince(previous) >= 2 - 0.05,
                "update \(index + 1) was due in \(dueIn[index]) s, ingested \(ingestedAt[index].timeIntervalSince(previous)) s after the last send")
        }
        let times = sentAt.compactMap { $0 }
        #expect(times.count == 3)
        for (earlier, later) in zip(times, times.dropFirst()) { #expect(later.timeIntervalSince(earlier) >= 2) }
    }

    /// With every send slot busy the loop waits; the send that frees one asks for the next claim at once.
    @Test func aFreedSendSlotClaimsTheWorkThatWaitedForIt() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        for index in 0..<3 {
            let event = try await f.makeEvent("slot-\(index)")
            _ = try await f.openChannel(eventID: event.id)
            try await f.post(event.id, ["home": .int(Int64(index)), "away": 0], at: Date())
        }
        f.apns.state.withLock { $0.broadcastDelay = .milliseconds(100) }
        let dispatcher = f.dispatcher(clock: SystemWallClock()) {
            $0.pollInterval = .seconds(120)
            $0.maxConcurrentSends = 1
        }
        let shutdown = ShutdownSignal()
        let running = Task { try await dispatcher.run(until: shutdown) }
        _ = try await eventually { f.apns.broadcasts.count >= 3 }
        shutdown.trigger()
        try await running.value
        #expect(f.apns.broadcasts.count == 3)
        #expect(f.apns.state.withLock { $0.overlaps } == 0)
    }

    private func priority(_ result: DispatchResult) -> PushPriority? {
        if case .sent(_, let priority, _) = result { return priority }
        return nil
    }
}

extension JSONValue {
    var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }
}
