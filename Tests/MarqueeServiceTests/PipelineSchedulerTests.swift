import APNs
import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Synchronization
import Testing

/// The channel scheduler against a real PostgreSQL and an in-memory APNs, on a manual clock.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct PipelineSchedulerTests {
    @Test func opensChannelsWithinTheLeadTimeOrWithQueuedUpdates() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let soon = try await f.makeEvent("soon", startsAt: f.clock.now.addingTimeInterval(3600))
        let later = try await f.makeEvent("later", startsAt: f.clock.now.addingTimeInterval(3 * 3600))
        let busy = try await f.makeEvent("busy", startsAt: f.clock.now.addingTimeInterval(3 * 3600))
        try await f.post(busy.id, ["home": 0, "away": 0, "minute": 0], at: f.clock.now)
        let scheduler = f.scheduler()
        let report = try #require(try await scheduler.tick())
        #expect(report.opened.count == 2)
        #expect(f.apns.state.withLock { $0.creates } == 2)
        let soonChannel = try #require(try await f.channels.channels(eventID: soon.id).first)
        #expect(soonChannel.state == .lifecycle(.open))
        #expect(f.apns.listed.contains(soonChannel.apnsChannelID!))
        #expect(try await f.channels.channels(eventID: busy.id).first?.state == .lifecycle(.open))
        #expect(try await f.channels.channels(eventID: later.id).isEmpty)
        // The queued update goes out once the channel is open.
        #expect(try await f.dispatcher().dispatchOnce().count == 1)
        #expect(f.apns.broadcasts.count == 1)

        f.clock.advance(by: 1.5 * 3600)
        #expect(try await scheduler.tick()?.opened.count == 1)
        #expect(try await f.channels.channels(eventID: later.id).first?.state == .lifecycle(.open))
        #expect(try await scheduler.tick()?.opened.isEmpty == true)
        #expect(f.apns.state.withLock { $0.creates } == 3)
    }

    @Test func aSweepReadsAgainAtOnceWhileABatchIsFull() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        for index in 0..<5 { _ = try await f.makeEvent("e\(index)", startsAt: f.clock.now.addingTimeInterval(60)) }
        let scheduler = f.scheduler { $0.batchLimit = 2 }
        let report = try #require(try await scheduler.tick())
        #expect(report.opened.count == 5)
        #expect(report.rounds == 3)  // 2, 2 and 1 events
        #expect(f.apns.state.withLock { $0.creates } == 5)
        #expect(try await scheduler.tick()?.rounds == 1)
    }

    @Test func createsGoToAPNsSeveralAtOnceAndStillKeepToTheQuota() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        for index in 0..<7 { _ = try await f.makeEvent("e\(index)", startsAt: f.clock.now.addingTimeInterval(60 + Double(index))) }
        f.apns.state.withLock { $0.createDelay = .milliseconds(100) }
        let report = try #require(
            try await f.scheduler {
                $0.createConcurrency = 3
                $0.quota = ChannelQuota(limit: 6)
            }.tick())
        #expect(report.opened.count == 6)
        #expect(report.quotaRefused.count == 1)
        #expect(f.apns.state.withLock { ($0.creates, $0.mostCreatesInFlight) } == (6, 3))
    }

    @Test func aSweepActsOnEachItemOnceAndEndsWhenAReadBringsNothingNew() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        for index in 0..<3 { _ = try await f.makeEvent("e\(index)", startsAt: f.clock.now.addingTimeInterval(60 + Double(index))) }
        let scheduler = f.scheduler {
            $0.batchLimit = 1
            $0.quota = ChannelQuota(limit: 1)
        }
        // e0 opens; e1's and e2's channels are planned and refused at the quota, each once; the fourth read
        // brings back e1's refused channel only, and the sweep ends.
        let report = try #require(try await scheduler.tick())
        #expect(report.opened.count == 1)
        #expect(report.quotaRefused.count == 2)
        #expect(Set(report.quotaRefused).count == 2)
        #expect(report.rounds == 3)
    }

    @Test func eventsBecomeLiveAtTheirStartOnceTheyHaveAChannel() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent("soon", startsAt: f.clock.now.addingTimeInterval(3600))
        let scheduler = f.scheduler()
        let first = try #require(try await scheduler.tick())
        #expect(first.opened.count == 1)
        #expect(first.eventsStarted.isEmpty)
        #expect(try await f.events.get(id: event.id)?.status == .scheduled)

        f.clock.advance(by: 3601)
        #expect(try await scheduler.tick()?.eventsStarted == [event.id])
        #expect(try await f.events.get(id: event.id)?.status == .live)
        #expect(f.metrics.schedulerActions.value(["start"]) == 1)
        #expect(try await f.events.list(EventFilter(status: .live)).events.map(\.id) == [event.id])
        #expect(try await scheduler.tick()?.eventsStarted.isEmpty == true)

        // One already past its start without a channel stays scheduled until it has one: the sweep that
        // plans its channel leaves it for the next sweep to start (its channel is found by then).
        let late = try await f.makeEvent("late", startsAt: f.clock.now.addingTimeInterval(-60))
        let planning = try #require(try await scheduler.tick())
        #expect(planning.opened.count == 1)
        #expect(try await f.events.get(id: late.id)?.status == .scheduled)
        #expect(try await scheduler.tick()?.eventsStarted == [late.id])
    }

    /// A sweep does not wait for an event row another transaction holds (an ingest, here this test): the
    /// event starts at the next sweep instead, and the sweep goes on to the rest of its work.
    @Test func aSweepLeavesAnEventItFindsLockedForTheNextOne() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent("held", startsAt: f.clock.now.addingTimeInterval(3600))
        let scheduler = f.scheduler()
        #expect(try await scheduler.tick()?.opened.count == 1)
        f.clock.advance(by: 3601)
        let locker = try await PostgresConnection.connect(f.configuration)
        try await locker.execute("BEGIN")
        try await locker.execute("SELECT 1 FROM events WHERE id = \(event.id) FOR UPDATE")
        // Released after 10 s whatever happens, so a sweep that waits ends (and fails the expectation below): a
        // guard that only a failing test reaches, not a wait.
        let release = Task {
            try await Task.sleep(for: .seconds(10))
            try await locker.execute("ROLLBACK")
        }
        let held = try await scheduler.tick()
        release.cancel()
        #expect(held?.eventsStarted == [], "the sweep waited for the locked event")
        if (try? await release.value) == nil { try await locker.execute("ROLLBACK") }
        #expect(try await scheduler.tick()?.eventsStarted == [event.id])
    }

    @Test func endsEventsPastTheirEndThenDeletesTheChannelAfterTheDelay() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(-3600), endsAt: f.clock.now.addingTimeInterval(600))
        let scheduler = f.scheduler()
        let dispatcher = f.dispatcher()
        let channelID = try #require(try await scheduler.tick()?.opened.first)
        try await f.post(event.id, ["home": 2, "away": 1, "minute": 90], at: f.clock.now)
        #expect(try await dispatcher.dispatchOnce().count == 1)

        // Not yet: endsAt + grace (30 min) has not passed.
        f.clock.advance(by: 600 + 1200)
        #expect(try await scheduler.tick()?.eventsEnded.isEmpty == true)
        f.clock.advance(by: 700)
        #expect(try await scheduler.tick()?.eventsEnded == [event.id])
        #expect(try await f.events.get(id: event.id)?.status == .ending)
        // The dispatcher sends the end with the latest state; the channel is ended.
        #expect(try await dispatcher.dispatchOnce().count == 1)
        let end = try #require(f.apns.broadcasts.last)
        #expect(end.aps["event"] == "end")
        #expect(end.aps["content-state"] == ["home": 2, "away": 1, "minute": 90])
        #expect(try await f.channels.get(id: channelID)?.state == .lifecycle(.ended))
        #expect(try await f.events.get(id: event.id)?.status == .ended)

        // Deleted only after the delete delay (15 min).
        f.clock.advance(by: 600)
        #expect(try await scheduler.tick()?.deleted.isEmpty == true)
        f.clock.advance(by: 400)
        #expect(try await scheduler.tick()?.deleted == [channelID])
        let channel = try #require(try await f.channels.get(id: channelID))
        #expect(channel.state == .lifecycle(.deleted))
        #expect(f.apns.state.withLock { $0.deletes } == [channel.apnsChannelID!])
        #expect(!f.apns.listed.contains(channel.apnsChannelID!))
        #expect(try await scheduler.tick()?.deleted.isEmpty == true)
    }

    @Test func anEventThatNeverGotAChannelIsEndedWithoutOne() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(-7200), endsAt: f.clock.now.addingTimeInterval(-3600))
        #expect(try await f.scheduler().tick()?.eventsEnded == [event.id])
        #expect(try await f.events.get(id: event.id)?.status == .ended)
        #expect(f.apns.state.withLock { $0.creates } == 0)
    }

    @Test func anEventWhoseChannelWasLostEndsWithItsPendingUpdatesUnsent() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(-3600), endsAt: f.clock.now.addingTimeInterval(60))
        let channel = try await f.openChannel(eventID: event.id)
        var lifecycle = try #require(channel.lifecycle)
        let before = lifecycle
        _ = try lifecycle.channelNotRegistered()
        try await f.channels.transition(channelID: channel.id, from: before, to: lifecycle, broadcasts: .stop)
        let update = try await f.post(event.id, ["home": 1, "away": 0, "minute": 12], at: f.clock.now)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 1)

        f.clock.advance(by: 60 + 1801)
        #expect(try await f.scheduler().tick()?.eventsEnded == [event.id])
        #expect(try await f.events.get(id: event.id)?.status == .ended)
        #expect(try await f.dispositions(eventID: event.id) == ["unsent": 2])
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(try await f.events.counts(eventID: event.id).unsent == 2)
        #expect(try await f.scalar(String.self, "SELECT disposition FROM updates WHERE id = \(update.id)") == "unsent")
        #expect(f.apns.broadcasts.isEmpty)
    }

    @Test func anEndingEventWhoseChannelCreateFailedForGoodEndsWithoutIt() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.scriptCreates([RecordingChannelAPNs.failure(400, .featureNotEnabled)])
        let scheduler = f.scheduler()
        #expect(try await scheduler.tick()?.createsFailed.count == 1)
        try await f.post(event.id, ["home": 0, "away": 0, "minute": 90], action: .end, at: f.clock.now)
        #expect(try await f.events.get(id: event.id)?.status == .ending)

        #expect(try await scheduler.tick()?.eventsEnded == [event.id])
        #expect(try await f.events.get(id: event.id)?.status == .ended)
        #expect(try await f.dispositions(eventID: event.id) == ["unsent": 1])
        #expect(try await scheduler.tick()?.eventsEnded.isEmpty == true)
    }

    @Test func theHourlyReconcilePurgesExpiredIdempotencyKeys() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let keyID = try await f.scalar(
            Int.self,
            """
            INSERT INTO api_keys (app_id, name, prefix, salt, hash, scopes)
            VALUES (\(f.appID), 'feed', 'feed_key1', \(Data(repeating: 1, count: 16)), \(Data(repeating: 2, count: 32)), \(["ingest"]))
            RETURNING id
            """)
        for (key, age) in [("old", 2 * 86400.0), ("fresh", 0)] {
            _ = try await f.ingest.ingest(
                eventID: event.id, UpdateDraft(occurredAt: f.clock.now),
                idempotency: IdempotencyRequest(apiKeyID: keyID, key: key, requestHash: Data(repeating: 3, count: 32)),
                now: f.clock.now.addingTimeInterval(-age), contentState: { _ in ["home": 0, "away": 0] },
                response: { _ in StoredResponse(status: 202, body: Data()) })
        }
        _ = try await f.scheduler().runOnce()
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM idempotency_keys") == 2)
        _ = try await f.scheduler().runOnce(reconcile: true)
        #expect(try await f.scalar(String.self, "SELECT string_agg(key, ',') FROM idempotency_keys") == "fresh")
    }

    @Test func aSweepPurgesDeliveryRowsPastTheirRetention() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        for reason in ["old1", "old2", "recent"] {
            try await f.deliveries.insert(DeliveryDraft(appID: f.appID, kind: .channelList, status: 200, reason: reason, attempt: 1))
        }
        try await f.pool.execute(
            """
            UPDATE deliveries SET sent_at = now() - CASE reason WHEN 'old1' THEN interval '32 days' ELSE interval '31 days' END
            WHERE reason LIKE 'old%'
            """)
        let reasons: PostgresQuery = "SELECT string_agg(reason, ',' ORDER BY id) FROM deliveries WHERE reason IN ('old1', 'old2', 'recent')"
        _ = try await f.scheduler { $0.deliveryRetention = nil }.runOnce()
        #expect(try await f.scalar(String.self, reasons) == "old1,old2,recent")
        // Oldest first, in bounded statements.
        let cutoff = Date().addingTimeInterval(-30 * 86400)
        #expect(try await DeliveryRepository(pool: f.pool).purge(sentBefore: cutoff, batch: 1, statements: 1) == 1)
        #expect(try await f.scalar(String.self, reasons) == "old2,recent")
        _ = try await f.scheduler().runOnce()
        #expect(try await f.scalar(String.self, reasons) == "recent")
        #expect(f.metrics.schedulerActions.value(["purge_deliveries"]) == 1)
    }

    /// The hourly pass deletes the updates of events ended longer ago than the retention, oldest event first
    /// and in bounded statements, and keeps their counts by disposition; recent and open events keep theirs.
    @Test func theHourlyPassPurgesTheUpdatesOfEventsEndedPastTheirRetention() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let (first, second, recent, live) = (try await f.makeEvent(), try await f.makeEvent(), try await f.makeEvent(), try await f.makeEvent())
        for event in [first, second, recent, live] {
            for minute in 1...3 {
                _ = try await f.ingest.ingest(
                    eventID: event.id, UpdateDraft(occurredAt: f.clock.now.addingTimeInterval(Double(minute))),
                    state: ["home": .int(Int64(minute)), "away": 0],
                    response: { _ in StoredResponse(status: 202, body: Data()) })
            }
        }
        let endedIDs = [first.id, second.id, recent.id].map(String.init)
        // Ended: one update of each kind an ended event has; the first two 31 days ago, the third an hour ago.
        try await f.pool.execute(
            """
            UPDATE updates u SET disposition = (ARRAY['broadcast', 'conflated', 'unsent'])[n.rank], disposed_at = now()
            FROM (SELECT id, rank() OVER (PARTITION BY event_id ORDER BY id) AS rank FROM updates) n
            WHERE n.id = u.id AND u.event_id = ANY (\(endedIDs)::bigint[])
            """)
        try await f.pool.execute(
            """
            UPDATE events SET status = 'ended',
                updated_at = now() - CASE WHEN id = \(recent.id) THEN interval '1 hour' ELSE interval '31 days' END
            WHERE id = ANY (\(endedIDs)::bigint[])
            """)
        let ended = EventCounts(broadcast: 1, conflated: 1, unsent: 1)
        let left: PostgresQuery =
            "SELECT string_agg(event_id::text || ':' || n, ',' ORDER BY event_id) FROM (SELECT event_id, count(*) AS n FROM updates GROUP BY 1) c"
        let all = "\(first.id):3,\(second.id):3,\(recent.id):3,\(live.id):3"
        _ = try await f.scheduler { $0.updateRetention = nil }.runOnce(reconcile: true)
        _ = try await f.scheduler().runOnce()
        #expect(try await f.scalar(String.self, left) == all)
        // Oldest event first, in bounded statements.
        let cutoff = Date().addingTimeInterval(-30 * 86400)
        #expect(try await f.events.purgeUpdates(endedBefore: cutoff, batch: 1, statements: 1) == 3)
        #expect(try await f.scalar(String.self, left) == "\(second.id):3,\(recent.id):3,\(live.id):3")
        _ = try await f.scheduler().runOnce(reconcile: true)
        #expect(try await f.scalar(String.self, left) == "\(recent.id):3,\(live.id):3")
        #expect(f.metrics.schedulerActions.value(["purge_updates"]) == 3)
        for event in [first, second, recent] {
            #expect(try await f.events.counts(eventID: event.id) == ended, "event \(event.id)")
        }
        let liveCounts = try await f.events.counts(eventID: live.id)  // its channel's create is a delivery too
        #expect(
            [liveCounts.pending, liveCounts.broadcast, liveCounts.conflated, liveCounts.superseded, liveCounts.unsent] == [3, 0, 0, 0, 0] as [Int])
        // Done once: the next pass finds nothing.
        _ = try await f.scheduler().runOnce(reconcile: true)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM purged_update_counts") == 2)
        #expect(f.metrics.schedulerActions.value(["purge_updates"]) == 3)
    }

    @Test func onlyTheLeaseHolderActsAndShutdownHandsTheLeaseOver() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let first = f.scheduler(instance: "s1")
        let second = f.scheduler(instance: "s2")
        #expect(try await first.tick() != nil)
        _ = try await f.makeEvent(startsAt: f.clock.now)
        #expect(try await second.tick() == nil)
        #expect(!second.isLeader)
        await #expect(throws: ChannelSchedulerError.leaseHeldElsewhere(holder: "s1")) { try await second.runOnce() }
        #expect(f.apns.state.withLock { $0.creates } == 0)

        // The leader runs as a service; on shutdown it gives the lease up and the other takes over at once.
        let shutdown = ShutdownSignal()
        let running = Task { try await first.run(until: shutdown) }
        #expect(try await eventually { f.apns.state.withLock({ $0.creates }) > 0 })
        #expect(f.apns.state.withLock { $0.creates } == 1)
        shutdown.trigger()
        try await running.value
        #expect(!first.isLeader)
        #expect(try await second.tick() != nil)
        #expect(second.isLeader)
    }

    /// An operator's sweep or reconcile in a running serve (`runOnce` from the routes) shares the service's
    /// lease: it takes it when free and keeps it. Giving it back would expire the lease the service holds
    /// under the same holder and fencing, and the service's next write would find it lost.
    @Test func aSweepAskedOfARunningServiceKeepsTheLeaseItTook() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let other = f.scheduler(instance: "s2")
        #expect(try await other.tick() != nil)
        let serving = f.scheduler(instance: "s1") {
            $0.renewInterval = .seconds(600)
            $0.tickInterval = .seconds(600)
        }
        let shutdown = ShutdownSignal()
        let running = Task { try await serving.run(until: shutdown) }
        // The service's first look finds s2 leading (had it not looked yet, it takes the lease itself below):
        // the look sets the shared leader gauge, which s2's sweep left at 1, to 0.
        #expect(f.metrics.schedulerLeader.value() == 1)
        try #require(try await eventually { f.metrics.schedulerLeader.value() == 0 }, "the service never looked at the lease")
        await #expect(throws: ChannelSchedulerError.leaseHeldElsewhere(holder: "s2")) { try await serving.runOnce() }
        f.clock.advance(by: 20)  // s2's lease (15 s) expires unrenewed
        _ = try await serving.runOnce(reconcile: true)
        #expect(serving.isLeader)
        let lease = try #require(try await LeaderLeaseRepository(pool: f.pool).current(name: serving.configuration.leaseName))
        #expect(lease.holder == "s1" && lease.expiresAt > f.clock.now)
        _ = try await f.makeEvent(startsAt: f.clock.now)
        #expect(try await serving.runOnce().opened.count == 1)
        shutdown.trigger()
        try await running.value
        #expect(try await other.tick() != nil)
    }

    @Test func aSweepThatTookTheLeaseBeforeTheServiceStartedLeavesItToTheService() async throws {
        // serve answers the operator's routes before its scheduler's loop starts: a sweep asked then takes the lease
        // itself, and the service starting during it shares that lease (same holder, same fencing). Given back at the
        // end, it expired under the service, and the next operator's sweep was refused as led elsewhere.
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let scheduler = f.scheduler(instance: "s1") {
            $0.renewInterval = .seconds(600)
            $0.tickInterval = .seconds(600)
        }
        _ = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.state.withLock { $0.createsHeld = true }
        let sweepEnded = SweepEnded()
        let sweep = Task {
            defer { sweepEnded.value.withLock { $0 = true } }
            return try await scheduler.runOnce()
        }
        // The sweep holds the lease once its create is in flight; the create is held there (a fixed sleep, then a
        // 1 s create, lost that race on a busy machine), and the service starts during it. The wait ends at the
        // create or at the sweep's end: a sweep that threw or made no create fails here at once, with what it
        // said. Beside two CPU hogs and the whole suite, the sweep's few statements before its create once took
        // over a minute, so the bound (10 minutes) only guards against a hang; it is not what the test checks.
        try await waitUntil("the sweep's create is in flight or the sweep ended", within: .seconds(600)) {
            f.apns.state.withLock { $0.createsInFlight } == 1 || sweepEnded.value.withLock { $0 }
        }
        if f.apns.state.withLock({ $0.createsInFlight }) != 1 {
            Issue.record("the sweep ended before its create: \(await sweep.result); log: \(f.log.all.suffix(20).joined(separator: "\n"))")
            return
        }
        let shutdown = ShutdownSignal()
        let running = Task { try await scheduler.run(until: shutdown) }
        // The service's first look at the lease (it renews the sweep's: same holder), then the create answers. The
        // bound only guards against a hang, as above.
        try await waitUntil("the service leads", within: .seconds(600)) { f.metrics.schedulerLeader.value() == 1 }
        f.apns.state.withLock { $0.createsHeld = false }
        #expect(try await sweep.value.opened.count == 1)
        #expect(scheduler.isLeader)
        let lease = try #require(try await LeaderLeaseRepository(pool: f.pool).current(name: scheduler.configuration.leaseName))
        #expect(lease.holder == "s1" && lease.expiresAt > f.clock.now, "the service's lease is held still")
        _ = try await scheduler.runOnce(reconcile: true)
        shutdown.trigger()
        try await running.value
    }

    @Test func aFencedLeaderThatLostItsLeaseWritesNothing() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let first = f.scheduler(instance: "s1")
        let second = f.scheduler(instance: "s2")
        #expect(try await first.tick() != nil)
        f.clock.advance(by: 20)  // the lease (15 s) expires unrenewed
        #expect(try await second.tick() != nil)
        _ = try await f.makeEvent(startsAt: f.clock.now)
        #expect(try await first.tick() == nil)  // its renewal fails: it follows
        #expect(f.apns.state.withLock { $0.creates } == 0)
        #expect(try await second.tick()?.opened.count == 1)
    }

    @Test func createsAreRefusedAtTheQuotaAndCannotCreateChannelConfigMapsToTheSameRefusal() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        var events: [EventRecord] = []
        for index in 0..<3 { events.append(try await f.makeEvent("e\(index)", startsAt: f.clock.now.addingTimeInterval(Double(index)))) }
        let scheduler = f.scheduler { $0.quota = ChannelQuota(limit: 2) }
        let report = try #require(try await scheduler.tick())
        #expect(report.opened.count == 2)
        #expect(report.quotaRefused.count == 1)
        #expect(f.apns.state.withLock { $0.creates } == 2)
        let refused = try #require(try await f.channels.get(id: report.quotaRefused[0]))
        #expect(refused.state == .lifecycle(.planned))
        #expect(refused.lastError?.contains("channel quota exhausted") == true)
        #expect(f.metrics.quotaRefusals.value(["com.example.scores/development"]) == 1)
        // The app's id is the label's one form; the old bundle/environment series stays one release (issue 48).
        #expect(f.metrics.quotaRefusals.value(["\(f.appID)"]) == 1)
        #expect(f.log.all.contains { $0.contains("level=warning") && $0.contains("nearly spent") })
        // Still refused next tick, still without asking APNs.
        #expect(try await scheduler.tick()?.quotaRefused == [refused.id])
        #expect(f.apns.state.withLock { $0.creates } == 2)

        // APNs' CannotCreateChannelConfig: the same error, retried later.
        let roomy = f.scheduler(instance: "s1") { $0.quota = ChannelQuota(limit: 100) }
        f.apns.scriptCreates([RecordingChannelAPNs.failure(400, .cannotCreateChannelConfig)])
        #expect(try await roomy.tick()?.quotaRefused == [refused.id])
        let waiting = try #require(try await f.channels.get(id: refused.id))
        #expect(waiting.state == .lifecycle(.creating))
        #expect(waiting.lastError?.contains("channel quota exhausted") == true)
        #expect(try await f.deliveries.recent(channelID: refused.id).first?.draft.reason == "CannotCreateChannelConfig")
        f.clock.advance(by: 301)
        #expect(try await roomy.tick()?.opened == [refused.id])
    }

    @Test func aRetriedCreateIsRetriedWithBackoffAndKeepsItsPlaceInTheQuota() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.scriptCreates([RecordingChannelAPNs.failure(503, .serviceUnavailable)])
        let scheduler = f.scheduler { $0.quota = ChannelQuota(limit: 1) }
        let first = try #require(try await scheduler.tick())
        #expect(first.createRetries.count == 1)
        let channel = try #require(try await f.channels.channels(eventID: event.id).first)
        #expect(channel.state == .lifecycle(.creating))
        #expect(channel.nextAttemptAt.map { $0 > f.clock.now } == true)
        #expect(try await scheduler.tick()?.opened.isEmpty == true)  // backing off
        f.clock.advance(by: 2.5)  // the first retry waits 1 to 2 s
        #expect(try await scheduler.tick()?.opened == [channel.id])
        #expect(f.metrics.retries.value(["channel_create"]) == 1)
        let attempts = try await f.pool.query("SELECT attempt, status FROM deliveries WHERE kind = 'channel_create' ORDER BY id")
            .map { [try $0.decode(Int.self, column: "attempt"), try $0.decode(Int.self, column: "status")] }
        #expect(attempts == [[1, 503], [2, 201]])
    }

    @Test func aCreateThatTimedOutIsSettledByReconcile() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.scriptCreates([APNsResult(transportFailure: .timeout)])
        let scheduler = f.scheduler()
        let report = try #require(try await scheduler.tick())
        #expect(report.createsUnknown.count == 1)
        #expect(try await f.channels.channels(eventID: event.id).first?.state == .lifecycle(.createUnknown))
        // Next tick lists Apple's channels, finds no id of its own and creates again.
        let settled = try #require(try await scheduler.tick())
        #expect(settled.opened.count == 1)
        #expect(try await f.channels.channels(eventID: event.id).first?.state == .lifecycle(.open))
        #expect(f.apns.state.withLock { $0.lists } == 2)  // the first tick of a new leader reconciles every app too
    }

    /// A create whose connection broke after it was written may have made a channel: it is `create_unknown`, like
    /// a timeout, and never created again before a reconcile tells (a second channel would hold quota forever).
    @Test func aCreateLostInFlightIsUnknownNotRetried() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.state.withLock { $0.nextCreateUnknown = true }
        f.apns.scriptCreates([APNsResult(transportFailure: .io("connection closed"))])
        let report = try #require(try await f.scheduler().tick())
        #expect(report.createsUnknown.count == 1 && report.createRetries.isEmpty, "\(report)")
        #expect(try await f.channels.channels(eventID: event.id).first?.state == .lifecycle(.createUnknown))
        // The same failure before anything was written is an ordinary retry.
        let g = try await PipelineServiceFixture.make()
        defer { g.pool.close() }
        let other = try await g.makeEvent(startsAt: g.clock.now)
        g.apns.scriptCreates([APNsResult(transportFailure: .io("connect refused"))])
        let retried = try #require(try await g.scheduler().tick())
        #expect(retried.createRetries.count == 1 && retried.createsUnknown.isEmpty, "\(retried)")
        #expect(try await g.channels.channels(eventID: other.id).first?.state == .lifecycle(.creating))
    }

    @Test func reconcileReportsUnknownChannelsAndDeletesThemOnlyWhenConfigured() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let orphan = f.apns.makeChannel()
        let reporting = f.scheduler()
        let preview = try await reporting.reconcilePreview()
        #expect(preview.map(\.appID) == [f.appID])
        #expect(preview.first?.unrecorded == [orphan])
        #expect(preview.first.map { $0.unknown.isEmpty && $0.missing.isEmpty && $0.resurrected.isEmpty } == true)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM channels") == 0)  // a preview records nothing
        let report = try await reporting.runOnce(reconcile: true)
        #expect(report.unknown == [orphan])
        #expect(report.unknownDeleted.isEmpty)
        #expect(f.apns.state.withLock { $0.deletes }.isEmpty)
        #expect(f.log.all.contains { $0.contains("unknown channel") && $0.contains(orphan) })
        #expect(f.metrics.unknownChannels.value(["com.example.scores/development"]) == 1)
        #expect(f.metrics.unknownChannels.value(["\(f.appID)"]) == 1)

        let deleting = f.scheduler {
            $0.deleteUnknown = true
            $0.unknownDeleteGrace = 3600
        }
        #expect(try await deleting.runOnce(reconcile: true).unknownDeleted.isEmpty)  // first seen just now
        f.clock.advance(by: 3601)
        #expect(try await reporting.runOnce(reconcile: true).unknownDeleted.isEmpty)  // not configured
        let deleted = try await deleting.runOnce(reconcile: true)
        #expect(deleted.unknownDeleted == [orphan])
        #expect(f.apns.state.withLock { $0.deletes } == [orphan])
        #expect(!f.apns.listed.contains(orphan))
        #expect(try await f.channels.get(appID: f.appID, apnsChannelID: orphan)?.state == .lifecycle(.deleted))
    }

    @Test func reconcileFlagsAnOpenChannelApnsNoLongerLists() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        let scheduler = f.scheduler()
        let channelID = try #require(try await scheduler.tick()?.opened.first)
        f.apns.state.withLock { $0.listed.removeAll() }
        f.clock.advance(by: 1)
        let report = try await scheduler.runOnce(reconcile: true)
        #expect(report.lost == [channelID])
        #expect(try await f.events.get(id: event.id)?.channelLost == true)
        #expect(f.log.all.contains { $0.contains("level=error") && $0.contains("channel_lost") })
    }
}

extension PipelineSchedulerTests {
    /// A forced delete of a live channel used to strand its event: scheduled with no channel, its updates piling
    /// up, and recreate refusing it. Now the event is flagged channel_lost (no broadcasts, listed by status) and
    /// recreate gives it a new channel that carries its newest state.
    @Test func aForcedDeleteOfALiveChannelLeavesTheEventRecreatable() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let old = try await f.openChannel(eventID: event.id)
        try await f.post(event.id, ["home": 1, "away": 0])
        let scheduler = f.scheduler()

        let deleted = try await scheduler.deleteChannel(id: old.id, force: true)
        #expect(deleted.state == .lifecycle(.deleted))
        #expect(f.apns.state.withLock { $0.deletes } == [old.apnsChannelID])
        #expect(try await f.events.get(id: event.id)?.channelLost == true)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(try await StatusRepository(pool: f.pool).status().lostChannels.map(\.eventID) == [event.id])
        // Updates are still taken (and the flag shows why nothing goes out).
        let newest = try await f.post(event.id, ["home": 2, "away": 0])

        let recreated = try await scheduler.recreateChannel(eventID: event.id)
        #expect(recreated.id != old.id && recreated.state == .lifecycle(.open), "\(recreated)")
        #expect(recreated.apnsChannelID != nil && recreated.apnsChannelID != old.apnsChannelID)
        #expect(try await f.events.get(id: event.id)?.channelLost == false)
        let results = try await f.dispatcher().dispatchOnce()
        guard case .sent(let sent, _, _)? = results.first else {
            Issue.record("expected a send, got \(results)")
            return
        }
        #expect(sent == newest.id)
        #expect(f.apns.broadcasts.last?.channelID == recreated.apnsChannelID)
        #expect(f.apns.broadcasts.last?.aps["content-state"]?["home"] == 2)
        // An event that never had a channel has none to recreate.
        await #expect(throws: ChannelSchedulerError.self) { _ = try await scheduler.recreateChannel(eventID: try await f.makeEvent().id) }
    }
}

/// Set once a test's sweep task has ended, however it ended.
private final class SweepEnded: Sendable {
    let value = Mutex(false)
}
