import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// Channels: guarded lifecycle writes, quota counts, scheduler work, reconcile; plus status figures.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineChannelTests {
    @Test func transitionsAreGuardedByTheStateTheWriterRead() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let planned = try await f.channels.createPlanned(eventID: event.id)
        #expect(planned.state == .lifecycle(.planned))
        #expect(try await f.channels.createPlanned(eventID: event.id).id == planned.id)
        await #expect(throws: PipelineError.eventNotFound(424_242)) { try await f.channels.createPlanned(eventID: 424_242) }

        var lifecycle = try #require(planned.lifecycle)
        let before = lifecycle
        #expect(try lifecycle.leadTimeReached() == .createChannel(attempt: 1))
        #expect(try await f.channels.transition(channelID: planned.id, from: before, to: lifecycle))
        // A second writer that read 'planned' too changes nothing.
        #expect(try await f.channels.transition(channelID: planned.id, from: before, to: lifecycle) == false)
        let creating = try #require(try await f.channels.get(id: planned.id))
        #expect(creating.state == .lifecycle(.creating))
        #expect(creating.attempts == 1)
        #expect(creating.requestedAt != nil)
        #expect(creating.nextAttemptAt != nil)  // in flight: retried if this instance dies before the answer

        // A retryable failure: same state, retry time set; the retry raises the attempt.
        let retryAt = Date(timeIntervalSince1970: 1_800_000_100)
        #expect(try lifecycle.createFailedRetryable() == .scheduleRetry(.create, failedAttempts: 1))
        #expect(try await f.channels.transition(channelID: planned.id, from: lifecycle, to: lifecycle, nextAttemptAt: retryAt, error: "HTTP 503"))
        let waiting = try #require(try await f.channels.get(id: planned.id))
        #expect(waiting.nextAttemptAt == retryAt)
        #expect(waiting.lastError == "HTTP 503")
        let beforeRetry = lifecycle
        #expect(lifecycle.retryDue() == .createChannel(attempt: 2))
        #expect(try await f.channels.transition(channelID: planned.id, from: beforeRetry, to: lifecycle))
        let afterRetry = lifecycle
        _ = try lifecycle.createSucceeded()
        #expect(
            try await f.channels.transition(
                channelID: planned.id, from: afterRetry, to: lifecycle, apnsChannelID: "dGVzdA==",
                broadcasts: ChannelLifecycle.broadcasts(from: afterRetry.state, to: lifecycle.state)))
        let open = try #require(try await f.channels.get(id: planned.id))
        #expect(open.state == .lifecycle(.open))
        #expect(open.attempts == 0)
        #expect(open.nextAttemptAt == nil)
        #expect(open.apnsChannelID == "dGVzdA==")
        #expect(open.firstSeenAt != nil)
        #expect(open.openedAt != nil)
        #expect(try await f.channels.get(appID: f.appID, apnsChannelID: "dGVzdA==")?.id == planned.id)

        // Missing at APNs → lost: the event is flagged and its outbox dropped.
        try await f.post(event.id, ["home": 1], at: Date())
        let beforeLoss = lifecycle
        #expect(try lifecycle.reconcileNotFound() == .flagLost)
        #expect(
            try await f.channels.transition(
                channelID: planned.id, from: beforeLoss, to: lifecycle,
                broadcasts: ChannelLifecycle.broadcasts(from: beforeLoss.state, to: lifecycle.state)))
        #expect(try await f.events.get(id: event.id)?.channelLost == true)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
    }

    @Test func quotaCountsChannelsThatMayExistAtAPNs() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        _ = try await f.channels.createPlanned(eventID: try await f.makeEvent().id)  // planned: not counted
        _ = try await f.openChannel(eventID: try await f.makeEvent().id)  // open: counted
        let creating = try await f.channels.createPlanned(eventID: try await f.makeEvent().id)
        var lifecycle = try #require(creating.lifecycle)
        _ = try lifecycle.leadTimeReached()
        try await f.channels.transition(channelID: creating.id, from: creating.lifecycle!, to: lifecycle)  // creating: counted
        _ = try await f.channels.reconcile(appID: f.appID, apnsChannelIDs: ["b3JwaGFu"])  // unknown: counted
        #expect(try await f.channels.quotaCount(appID: f.appID) == 3)
        #expect(try await f.channels.quotaCount(appID: f.appID + 1) == 0)
        let status = try await StatusRepository(pool: f.pool).status()
        #expect(status.apps.first?.quotaInUse == 3)
        #expect(status.apps.first?.channelsByState == ["planned": 1, "open": 1, "creating": 1, "unknown": 1])
    }

    @Test func reconcileRecordsUnknownChannelsAndReportsMissingOnes() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let known = try await f.openChannel(eventID: try await f.makeEvent().id, apnsID: "a25vd24=")
        let gone = try await f.openChannel(eventID: try await f.makeEvent().id, apnsID: "Z29uZQ==")
        let firstSeen = Date(timeIntervalSince1970: 1_800_000_000)
        let report = try await f.channels.reconcile(appID: f.appID, apnsChannelIDs: ["a25vd24=", "b3JwaGFu"], now: firstSeen)
        #expect(report.newlyRecorded.map(\.apnsChannelID) == ["b3JwaGFu"])
        #expect(report.newlyRecorded.first?.firstSeenAt == firstSeen)
        #expect(report.newlyRecorded.first?.state == .unknown)
        #expect(report.newlyRecorded.first?.eventID == nil)
        #expect(report.missing.map(\.id) == [gone.id])
        #expect(report.unknown.map(\.apnsChannelID) == ["b3JwaGFu"])
        _ = known

        // Seen again later: not re-recorded, first_seen_at kept.
        let again = try await f.channels.reconcile(appID: f.appID, apnsChannelIDs: ["a25vd24=", "b3JwaGFu"], now: firstSeen + 3600)
        #expect(again.newlyRecorded.isEmpty)
        #expect(again.unknown.first?.firstSeenAt == firstSeen)
        // Gone from Apple's list: the unknown channel is marked deleted.
        let later = try await f.channels.reconcile(appID: f.appID, apnsChannelIDs: ["a25vd24="])
        #expect(later.unknown.isEmpty)
        #expect(try await f.channels.get(appID: f.appID, apnsChannelID: "b3JwaGFu")?.state == .lifecycle(.deleted))
    }

    @Test func dueWorkForTheScheduler() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let now = Date()
        let soon = try await f.makeEvent("soon", startsAt: now + 3600)
        _ = try await f.makeEvent("far", startsAt: now + 86_400)
        let early = try await f.makeEvent("early-update", startsAt: now + 86_400)
        try await f.post(early.id, ["home": 1], at: now)
        let overdue = try await f.makeEvent("overdue", startsAt: now - 7200, endsAt: now - 1800)
        try await f.events.perform(.startsAtReached, eventID: overdue.id)
        let ending = try await f.makeEvent("ended", startsAt: now - 7200)
        let channel = try await f.openChannel(eventID: ending.id)
        // The event ended with its channel (a scheduled event whose channel ended is one postponed after its
        // start: it gets a new channel).
        for event in [EventLifecycle.Event.startsAtReached, .endAccepted, .endBroadcast] {
            #expect(try await f.events.perform(event, eventID: ending.id))
        }
        var lifecycle = try #require(channel.lifecycle)
        let open = lifecycle
        _ = try lifecycle.endRequested()
        let ending1 = lifecycle
        _ = try lifecycle.endSent()
        try await f.channels.transition(channelID: channel.id, from: open, to: ending1)
        try await f.channels.transition(channelID: channel.id, from: ending1, to: lifecycle, now: now - 1200)

        let work = try await f.channels.dueWork(leadTime: 7200, deleteDelay: 900, endGrace: 600, now: now)
        #expect(Set(work.eventsNeedingChannel.map(\.externalID)) == ["soon", "early-update"])
        #expect(work.deletionsDue.map(\.id) == [channel.id])
        #expect(work.eventsToEnd.map(\.id) == [overdue.id])
        #expect(work.retriesDue.isEmpty)
        _ = try await f.channels.createPlanned(eventID: soon.id)
        let next = try await f.channels.dueWork(leadTime: 7200, deleteDelay: 900, endGrace: 600, now: now)
        #expect(next.eventsNeedingChannel.map(\.externalID) == ["early-update"])
        #expect(next.plannedChannels.map(\.eventID) == [soon.id])

        // An event whose channel was deleted (by an operator, or by `app remove` on its way out) gets no new one;
        // after a postponement, the round's deleted channel no longer counts and it does.
        let live = try await f.makeEvent("live-deleted", startsAt: now + 600)
        let liveChannel = try await f.openChannel(eventID: live.id)
        var deleting = try #require(liveChannel.lifecycle)
        let opened = deleting
        _ = try deleting.deleteRequested(force: true)
        let requested = deleting
        _ = try deleting.deleteSucceeded()
        try await f.channels.transition(channelID: liveChannel.id, from: opened, to: requested)
        try await f.channels.transition(channelID: liveChannel.id, from: requested, to: deleting)
        let afterDelete = try await f.channels.dueWork(leadTime: 7200, deleteDelay: 900, endGrace: 600, now: now)
        #expect(!afterDelete.eventsNeedingChannel.map(\.externalID).contains("live-deleted"))
        try await f.pool.execute("UPDATE events SET postponed_at = now() + interval '1 second' WHERE id = \(live.id)")
        let afterPostponement = try await f.channels.dueWork(leadTime: 7200, deleteDelay: 900, endGrace: 600, now: now)
        #expect(afterPostponement.eventsNeedingChannel.map(\.externalID).contains("live-deleted"))
        // Not yet past the delete delay or the grace period.
        let earlier = try await f.channels.dueWork(leadTime: 7200, deleteDelay: 1800, endGrace: 3600, now: now)
        #expect(earlier.deletionsDue.isEmpty)
        #expect(earlier.eventsToEnd.isEmpty)
    }

    @Test func aRequestLeftInFlightByACrashBecomesDue() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let planned = try await f.channels.createPlanned(eventID: try await f.makeEvent().id)
        var lifecycle = try #require(planned.lifecycle)
        _ = try lifecycle.leadTimeReached()
        try await f.channels.transition(channelID: planned.id, from: planned.lifecycle!, to: lifecycle, inFlightTimeout: 60)
        let soon = try await f.channels.dueWork(leadTime: 0, deleteDelay: 0, endGrace: 0, now: Date() + 30)
        #expect(soon.retriesDue.isEmpty)
        let later = try await f.channels.dueWork(leadTime: 0, deleteDelay: 0, endGrace: 0, now: Date() + 90)
        #expect(later.retriesDue.map(\.id) == [planned.id])
        #expect(later.retriesDue.first?.lifecycle == ChannelLifecycle(state: .creating, attempt: 1))
    }

    @Test func leaderWritesAreFenced() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let leases = LeaderLeaseRepository(pool: f.pool)
        let stale = try #require(try await leases.acquire(name: "scheduler", holder: "old", duration: 30))
        let event = try await f.makeEvent()
        let later = Date() + 60
        _ = try #require(try await leases.acquire(name: "scheduler", holder: "new", duration: 30, now: later))
        await #expect(throws: PipelineError.leaseNotHeld(name: "scheduler")) {
            try await f.channels.createPlanned(eventID: event.id, fence: stale)
        }
        #expect(try await f.channels.channels(eventID: event.id).isEmpty)
        let report = try await f.channels.reconcile(appID: f.appID, apnsChannelIDs: ["b3JwaGFu"])
        let unknown = try #require(report.newlyRecorded.first)
        await #expect(throws: PipelineError.leaseNotHeld(name: "scheduler")) {
            try await f.channels.beginDeletingUnknown(channelID: unknown.id, fence: stale)
        }
        #expect(try await f.channels.beginDeletingUnknown(channelID: unknown.id))
        let deleting = try #require(try await f.channels.get(id: unknown.id))
        #expect(deleting.lifecycle == ChannelLifecycle(state: .deleting, attempt: 1))
        var lifecycle = try #require(deleting.lifecycle)
        _ = try lifecycle.deleteSucceeded()
        #expect(try await f.channels.transition(channelID: unknown.id, from: deleting.lifecycle!, to: lifecycle))
        #expect(try await f.channels.get(id: unknown.id)?.state == .lifecycle(.deleted))
        #expect(try await f.channels.get(id: unknown.id)?.deletedAt != nil)
    }

    @Test func statusFiguresShowTheBacklog() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        try await f.post(event.id, ["home": 1], at: Date())
        let status = try await StatusRepository(pool: f.pool).status()
        #expect(status.outboxBacklog == 1)
        #expect((status.oldestOutboxAge ?? -1) >= 0)
        #expect(status.lostChannels.isEmpty)
        #expect(status.apps.map(\.bundleID) == ["com.example.scores"])
    }
}

/// The leader lease: one winner, takeover with a higher fencing number, fenced writes refused to a stale holder.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineLeaseTests {
    @Test func oneContenderWinsAndATakeoverFencesTheOldLeader() async throws {
        let f = try await PipelineFixture.make(maxConnections: 6)
        defer { f.pool.close() }
        let leases = LeaderLeaseRepository(pool: f.pool)
        // One instant for every contender: on a starved machine they may reach the database tens of seconds
        // apart, which must not read as an expiry.
        let start = Date()
        let grants = try await withThrowingTaskGroup(of: LeaseGrant?.self) { group in
            for index in 0..<6 {
                group.addTask { try await leases.acquire(name: "scheduler", holder: "instance-\(index)", duration: 30, now: start) }
            }
            return try await group.reduce(into: [LeaseGrant]()) { if let grant = $1 { $0.append(grant) } }
        }
        #expect(grants.count == 1)
        let old = try #require(grants.first)
        #expect(old.fencing == 1)
        // The holder renews (same fencing); another contender is refused while it runs.
        let renewed = try #require(try await leases.renew(old, duration: 30, now: start + 1))
        #expect(renewed.fencing == 1)
        #expect(try await leases.acquire(name: "scheduler", holder: "other", duration: 30, now: start + 2) == nil)
        #expect(try await leases.acquire(name: "scheduler", holder: old.holder, duration: 30, now: start + 3)?.fencing == 1)

        // Expiry: another instance takes over with a higher fencing number. An hour on, so the release
        // below (which stamps the database's now() when that is later) still reads as `later`.
        let later = start + 3600
        let new = try #require(try await leases.acquire(name: "scheduler", holder: "other", duration: 30, now: later))
        #expect(new.fencing == 2)
        #expect(try await leases.renew(old, duration: 30, now: later) == nil)
        try await f.pool.execute("CREATE TABLE leader_writes (fencing bigint)")
        await #expect(throws: PipelineError.leaseNotHeld(name: "scheduler")) {
            try await leases.executeFenced(old, "INSERT INTO leader_writes VALUES (\(old.fencing))", now: later)
        }
        #expect(try await leases.executeFenced(new, "INSERT INTO leader_writes VALUES (\(new.fencing))", now: later) == 1)
        #expect(try await f.pool.query("SELECT fencing FROM leader_writes").map { try $0.decode(Int64.self, column: "fencing") } == [2])

        // Release: the next contender takes over at once, and fencing keeps increasing.
        try await leases.release(new)
        let third = try #require(try await leases.acquire(name: "scheduler", holder: "third", duration: 30, now: later))
        #expect(third.fencing == 3)
        #expect(try await leases.current(name: "scheduler")?.holder == "third")
    }
}
