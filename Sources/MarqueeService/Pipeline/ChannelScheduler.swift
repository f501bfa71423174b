// The channel scheduler: one leader across instances (a lease row with a fencing number,
// LeaderLeaseRepository) opens channels a lead time before events, ends events that nobody ended,
// deletes ended channels after a delay and reconciles with Apple's channel lists. Every decision goes
// through ChannelLifecycle (the state machine returns the action; this file performs it) and every
// write carries the lease (`fence:`), so a leader that lost its lease mid-sweep changes nothing.
// A renewer task keeps the lease while a sweep runs; `runOnce()` does one sweep for cron.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Settings of the channel scheduler, with their defaults.
public struct ChannelSchedulerConfiguration: Sendable {
    /// Names this instance as the lease holder; unique per process.
    public var instance: String
    /// The lease row's name; default `channel-scheduler`.
    public var leaseName = "channel-scheduler"
    /// How long a lease lasts without renewal; default 15 s.
    public var leaseDuration: TimeInterval = 15
    /// How often the lease is renewed (or, by a follower, tried); default 5 s.
    public var renewInterval: Duration = .seconds(5)
    /// How often the leader sweeps; default 5 s.
    public var tickInterval: Duration = .seconds(5)
    /// Channels open this long before `startsAt`; default 2 h.
    public var leadTime: TimeInterval = 2 * 3600
    /// Ended channels are deleted this long after the end broadcast; default 15 min.
    public var deleteDelay: TimeInterval = 15 * 60
    /// An event nobody ended is ended this long after `endsAt`; default 30 min.
    public var endGrace: TimeInterval = 30 * 60
    /// The `dismissal-date` of such an automatic end, after the end; nil (default): the system's default.
    public var automaticEndDismissal: TimeInterval?
    /// How often every app's channel list is reconciled; default 1 h.
    public var reconcileInterval: TimeInterval = 3600
    /// Delete unknown channels (in Apple's list, not Marquee's) once first seen this long ago. Off by
    /// default: another backend (staging) may share the bundle id and environment.
    public var deleteUnknown = false
    /// Default 24 h.
    public var unknownDeleteGrace: TimeInterval = 24 * 3600
    /// 10,000 channels per app and environment, warning at 80 %.
    public var quota = ChannelQuota()
    /// Backoff of failed creates and deletes; default 2 s doubling up to 10 min, jittered.
    public var retryBackoff = RetryBackoff(base: 2, maximum: 600)
    /// Wait before trying a create again after a quota refusal (ours or CannotCreateChannelConfig); default 5 min.
    public var quotaRetryDelay: TimeInterval = 300
    /// A create or delete without a recorded answer after this long is retried (the instance died); default 120 s.
    public var inFlightTimeout: TimeInterval = 120
    /// Delivery rows (the log of APNs exchanges) older than this are deleted, a few batches each sweep; nil
    /// keeps them. Default 30 days.
    public var deliveryRetention: TimeInterval? = 30 * 86400
    /// The updates of events that ended longer ago than this are deleted in the hourly pass (their counts by
    /// disposition are kept); nil keeps them. Default 30 days.
    public var updateRetention: TimeInterval? = 30 * 86400
    /// Channel creates sent to APNs at once (each admitted against the quota first, one at a time); default 8.
    public var createConcurrency = 8
    /// Items of each kind handled per sweep; default 100.
    public var batchLimit = 100
    /// Pass the injected clock's time to the database instead of its `now()` (tests with a manual clock).
    public var clockDrivesDatabase = false

    public init(instance: String) { self.instance = instance }
}

/// What one sweep did.
public struct SweepReport: Sendable, Equatable {
    /// Channels that APNs created (now open).
    public var opened: [Int] = []
    /// Channels whose create will be retried (transient failure).
    public var createRetries: [Int] = []
    /// Channels whose create timed out (create_unknown: reconcile settles them).
    public var createsUnknown: [Int] = []
    /// Channels APNs refused to create for good (create_failed).
    public var createsFailed: [Int] = []
    /// Channels not created because the app's quota is spent.
    public var quotaRefused: [Int] = []
    /// Scheduled events whose `startsAt` came: now live.
    public var eventsStarted: [Int] = []
    /// Events ended by the scheduler (an `end` update was queued).
    public var eventsEnded: [Int] = []
    /// Channels deleted at APNs (or found gone).
    public var deleted: [Int] = []
    /// Channels APNs no longer knows while events used them (flagged channel_lost).
    public var lost: [Int] = []
    /// Apple ids of unknown channels seen in this sweep's reconciles.
    public var unknown: [String] = []
    /// Apple ids of unknown channels this sweep started deleting (`deleteUnknown`).
    public var unknownDeleted: [String] = []
    /// What each reconciled app's channel list showed.
    public var reconciled: [AppReconcileReport] = []
    /// Channels whose create or delete waits because APNs refuses their app's credentials (`CredentialsParking`).
    public var parked: [Int] = []
    /// Reads of due work the sweep acted on: more than one when a kind of work filled its batch.
    public var rounds = 0

    public init() {}

    /// Adds what `other` did (its rounds aside).
    mutating func absorb(_ other: SweepReport) {
        let rowIDs: [WritableKeyPath<SweepReport, [Int]>] = [
            \.opened, \.createRetries, \.createsUnknown, \.createsFailed, \.quotaRefused, \.eventsStarted, \.eventsEnded, \.deleted, \.lost,
            \.parked,
        ]
        for field in rowIDs { self[keyPath: field] += other[keyPath: field] }
        unknown += other.unknown
        unknownDeleted += other.unknownDeleted
        reconciled += other.reconciled
    }
}

/// What one app's reconcile found and did.
public struct AppReconcileReport: Sendable, Equatable {
    public var appID: Int
    /// Apple ids of unknown channels recorded by this reconcile (first seen now).
    public var recorded: [String] = []
    /// Apple ids of every unknown channel still listed.
    public var unknown: [String] = []
    /// Channels (row ids) Apple's list lacked: flagged lost, or settled as deleted.
    public var missing: [Int] = []
    /// Channels (row ids) marked deleted that Apple still listed: deleted again.
    public var resurrected: [Int] = []
    /// Apple ids of unknown channels deleted (`deleteUnknown`).
    public var deleted: [String] = []
}

/// What a reconcile would find for one app, without changing anything (`marquee channel reconcile --dry-run`).
public struct ReconcilePreview: Sendable, Equatable {
    public var appID: Int
    /// Apple ids in Apple's list that no channel row has (a reconcile records them as unknown).
    public var unrecorded: [String]
    /// Apple ids already recorded as unknown and still listed.
    public var unknown: [String]
    /// Channels (row ids) the database believes exist that Apple's list lacks (a reconcile flags or settles them).
    public var missing: [Int]
    /// Channels (row ids) marked deleted that Apple still lists (a reconcile deletes them again).
    public var resurrected: [Int]
}

/// Why the scheduler could not act.
public enum ChannelSchedulerError: Error, Equatable, CustomStringConvertible {
    /// Another instance leads; `runOnce` does nothing while it does.
    case leaseHeldElsewhere(holder: String?)
    /// APNs did not give the app's channel list.
    case listFailed(appID: Int, reason: String)
    /// No such channel, or the event has no channel to act on.
    case channelNotFound(String)
    /// The channel is not in a state this operator action applies to; nothing changed.
    case refused(String)

    public var description: String {
        switch self {
        case .leaseHeldElsewhere(let holder):
            "the channel scheduler lease is held by \(holder ?? "another instance"); the running daemon sweeps already"
        case .listFailed(let appID, let reason):
            "APNs did not list the channels of app \(appID) (\(reason)); check the app's key and APNs host, then try again"
        case .channelNotFound(let what): "\(what) not found"
        case .refused(let why): why
        }
    }
}

/// Opens, ends, deletes and reconciles channels on schedule, as the leader of all instances.
public final class ChannelScheduler: Service {
    public let name = "scheduler"
    public let configuration: ChannelSchedulerConfiguration

    private let pool: PostgresPool
    private let apns: any BroadcastChannelAPNs
    private let catalog: any PipelineCatalog
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let clock: any WallClock
    private let channels: ChannelRepository
    private let leases: LeaderLeaseRepository
    private let ingest: IngestRepository
    private let events: EventRepository
    private let deliveries: DeliveryRepository
    private let parking: CredentialsParking
    private let grant = Mutex<LeaseGrant?>(nil)
    private let lastReconcile = Mutex<Date?>(nil)
    private let wakeup = Wakeup()
    private let renewWakeup = Wakeup()
    /// Wakes dispatchers after the scheduler queues an end.
    private let notifier: OutboxNotifier?

    public init(pool: PostgresPool, apns: any BroadcastChannelAPNs, catalog: any PipelineCatalog,
                configuration: ChannelSchedulerConfiguration, metrics: PipelineMetrics, logger: Logger,
                clock: any WallClock = SystemWallClock(), notifier: OutboxNotifier? = nil) {
        self.notifier = notifier
        self.pool = pool
        self.apns = apns
        self.catalog = catalog
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger.with(["service": "scheduler"])
        self.clock = clock
        channels = ChannelRepository(pool: pool)
        leases = LeaderLeaseRepository(pool: pool)
        ingest = IngestRepository(pool: pool)
        events = EventRepository(pool: pool)
        deliveries = DeliveryRepository(pool: pool)
        parking = CredentialsParking(pool: pool, metrics: metrics, logger: self.logger, clock: clock)
    }

    /// True while this instance holds the lease.
    public var isLeader: Bool { grant.withLock { $0 != nil } }

    /// Sweeps now rather than at the next tick, if this instance leads (e.g. after an event was created
    /// inside its lead time, or an operator asked for a recreate).
    public func wake() { wakeup.signal() }

    private var databaseNow: Date? { configuration.clockDrivesDatabase ? clock.now : nil }

    // MARK: the service

    public func run(until shutdown: ShutdownSignal) async throws {
        let bridge = Task { [wakeup, renewWakeup] in
            await shutdown.wait()
            wakeup.signal()
            renewWakeup.signal()
        }
        defer { bridge.cancel() }
        await withDiscardingTaskGroup { group in
            group.addTask { [self] in
                while !shutdown.isTriggered && !Task.isCancelled {
                    let wasLeader = isLeader
                    await holdLease()
                    if !wasLeader && isLeader { wakeup.signal() }
                    await renewWakeup.wait(upTo: configuration.renewInterval)
                }
            }
            while !shutdown.isTriggered && !Task.isCancelled {
                if let fence = grant.withLock({ $0 }) {
                    do {
                        _ = try await sweep(fence: fence, reconcileAll: reconcileDue())
                    } catch PipelineError.leaseNotHeld {
                        grant.withLock { $0 = nil }
                        logger.warning("lease lost during a sweep; following")
                    } catch {
                        logger.error("sweep failed", ["error": .string("\(error)")])
                    }
                }
                await wakeup.wait(upTo: configuration.tickInterval)
            }
        }
        if let held = grant.withLock({ grant -> LeaseGrant? in defer { grant = nil }; return grant }) {
            do {
                try await leases.release(held)
                logger.info("scheduler lease released", ["fencing": .int(Int(held.fencing))])
            } catch {
                logger.warning("scheduler lease release failed; it expires on its own", ["error": .string("\(error)")])
            }
        }
    }

    /// Takes or renews the lease once (for tests and the run loop); returns whether this instance leads.
    @discardableResult
    public func holdLease() async -> Bool {
        let current = grant.withLock { $0 }
        do {
            var next: LeaseGrant?
            if let current {
                next = try await leases.renew(current, duration: configuration.leaseDuration, now: databaseNow)
                if next == nil { logger.warning("scheduler lease lost", ["fencing": .int(Int(current.fencing))]) }
            }
            if next == nil {
                // Free or expired: take it (a takeover raises the fencing number).
                next = try await leases.acquire(name: configuration.leaseName, holder: configuration.instance,
                                                duration: configuration.leaseDuration, now: databaseNow)
                if let next, next.fencing != current?.fencing {
                    logger.info("scheduler lease acquired; leading", ["fencing": .int(Int(next.fencing))])
                }
            }
            grant.withLock { $0 = next }
            return next != nil
        } catch {
            logger.warning("scheduler lease check failed", ["error": .string("\(error)")])
            return current != nil
        }
    }

    /// One tick: holds the lease, then sweeps if leading (reconciling every app when it is due).
    /// Returns nil when another instance leads.
    public func tick() async throws -> SweepReport? {
        guard await holdLease(), let fence = grant.withLock({ $0 }) else { return nil }
        do {
            return try await sweep(fence: fence, reconcileAll: reconcileDue())
        } catch PipelineError.leaseNotHeld {
            grant.withLock { $0 = nil }
            return nil
        }
    }

    /// One full sweep for `marquee channel sweep` (cron): takes the lease unless held, sweeps, and gives
    /// the lease back if it took it. Throws `leaseHeldElsewhere` while a daemon leads.
    public func runOnce(reconcile: Bool = false, deleteUnknown: Bool? = nil) async throws -> SweepReport {
        if let fence = grant.withLock({ $0 }) { return try await sweep(fence: fence, reconcileAll: reconcile, deleteUnknown: deleteUnknown) }
        guard let fence = try await leases.acquire(name: configuration.leaseName, holder: configuration.instance,
                                                   duration: configuration.leaseDuration, now: databaseNow) else {
            throw ChannelSchedulerError.leaseHeldElsewhere(holder: try? await leases.current(name: configuration.leaseName)?.holder)
        }
        do {
            let report = try await sweep(fence: fence, reconcileAll: reconcile, deleteUnknown: deleteUnknown)
            try await leases.release(fence)
            return report
        } catch {
            try? await leases.release(fence)
            throw error
        }
    }

    // MARK: operator actions (no lease needed: every step is a state-guarded transition)

    /// `marquee channel recreate`: a new APNs channel for an event whose channel APNs lost or refused
    /// to create, or an operator deleted while it was live (`deleteChannel(force:)`). Activities already
    /// running stay on the old id; those started from now on use the new one.
    public func recreateChannel(eventID: Int) async throws -> ChannelRecord {
        guard var channel = try await channels.channels(eventID: eventID).first else {
            throw ChannelSchedulerError.channelNotFound("a channel of event \(eventID)")
        }
        // Deleted while live: a new channel row (the event's updates resume once it is open); lost or refused:
        // the same row, created again.
        var deletedWhileLive = false
        if channel.state == .lifecycle(.deleted) { deletedWhileLive = try await events.get(id: eventID)?.channelLost == true }
        if deletedWhileLive { channel = try await channels.createPlanned(eventID: eventID) }
        guard var lifecycle = channel.lifecycle,
              deletedWhileLive ? lifecycle.state == .planned : lifecycle.state == .lost || lifecycle.state == .createFailed else {
            throw ChannelSchedulerError.refused(
                "channel \(channel.id) of event \(eventID) is \(channel.state); only a lost or refused channel is recreated")
        }
        let before = lifecycle
        let action = deletedWhileLive ? try lifecycle.leadTimeReached() : try lifecycle.retryCreateRequested()
        guard case .createChannel(let attempt) = action else { return channel }
        var report = SweepReport()
        try await create(channel, from: before, to: lifecycle, attempt: attempt, fence: nil, report: &report)
        logger.info("channel recreated on an operator's request", ["channel": .int(channel.id), "event": .int(eventID)])
        return try await channels.get(id: channel.id) ?? channel
    }

    /// `marquee channel delete`: deletes the channel at APNs now. An open channel needs `force`
    /// (running activities stop getting updates); an unresolved create is refused until it settles. An event
    /// whose live channel went this way is flagged `channel_lost`, as when APNs loses one: its broadcasts stop,
    /// `status` lists it, and `recreateChannel` gives it a new channel.
    public func deleteChannel(id: Int, force: Bool) async throws -> ChannelRecord {
        guard let channel = try await channels.get(id: id) else { throw ChannelSchedulerError.channelNotFound("channel \(id)") }
        var report = SweepReport()
        if channel.state == .unknown {
            if try await channels.beginDeletingUnknown(channelID: id, inFlightTimeout: configuration.inFlightTimeout) {
                let deleting = ChannelLifecycle(state: .deleting, attempt: 1)
                try await delete(channel, from: deleting, to: deleting, fence: nil, report: &report)
            }
        } else if let current = channel.lifecycle {
            var next = current
            let action: ChannelLifecycle.Action
            do {
                action = try next.deleteRequested(force: force)
            } catch {
                let hint = current.state == .open || current.state == .ending
                    ? "it still carries the event's updates; end the event first, or force the delete"
                    : "its create is unresolved; try again once it settled"
                throw ChannelSchedulerError.refused("channel \(id) is \(current.state.rawValue): \(hint)")
            }
            if case .deleteChannel = action {
                try await delete(channel, from: current, to: next, fence: nil, report: &report)
                if current.state == .open || current.state == .ending, let eventID = channel.eventID,
                   try await channels.get(id: id)?.state == .lifecycle(.deleted) {
                    try await channels.stopBroadcasting(eventID: eventID)
                    logger.warning("a live channel was deleted: its event is flagged channel_lost until 'marquee channel recreate'",
                                   ["channel": .int(id), "event": .int(eventID)])
                }
            } else if next != current {
                try await channels.transition(channelID: id, from: current, to: next)
            }
        }
        logger.info("channel deleted on an operator's request", ["channel": .int(id), "force": .bool(force)])
        return try await channels.get(id: id) ?? channel
    }

    /// Lists every app's channels at APNs and compares them with the database, changing nothing but
    /// the delivery rows of the list requests. Needs no lease.
    public func reconcilePreview() async throws -> [ReconcilePreview] {
        var previews: [ReconcilePreview] = []
        for app in try await catalog.apps() {
            let outcome = await perform("channel_list") { try await apns.listChannels(app: app) }
            try await record(outcome, kind: .channelList, appID: app.id, channelID: nil, firstAttempt: 1)
            guard let listed = outcome.acceptance?.channels?.map(\.value) else {
                throw ChannelSchedulerError.listFailed(appID: app.id, reason: outcome.failure.map { "\($0)" } ?? "unknown")
            }
            let listedSet = Set(listed)
            let rows = try await pool.query("""
                SELECT id, apns_channel_id, state FROM channels WHERE app_id = \(app.id) AND apns_channel_id IS NOT NULL ORDER BY id
                """).map { row in
                (id: try row.decode(Int.self, column: "id"), apnsID: try row.decode(String.self, column: "apns_channel_id"),
                 state: try row.decode(String.self, column: "state"))
            }
            let recorded = Set(rows.map(\.apnsID))
            let existing: Set<String> = ["open", "ending", "ended", "deleting"]
            previews.append(ReconcilePreview(
                appID: app.id,
                unrecorded: listed.filter { !recorded.contains($0) },
                unknown: rows.filter { $0.state == "unknown" && listedSet.contains($0.apnsID) }.map(\.apnsID),
                missing: rows.filter { existing.contains($0.state) && !listedSet.contains($0.apnsID) }.map(\.id),
                resurrected: rows.filter { $0.state == "deleted" && listedSet.contains($0.apnsID) }.map(\.id)))
        }
        return previews
    }

    private func reconcileDue() -> Bool {
        let now = clock.now
        return lastReconcile.withLock { last in
            guard last.map({ now.timeIntervalSince($0) >= configuration.reconcileInterval }) ?? true else { return false }
            last = now
            return true
        }
    }

    // MARK: one sweep

    /// Ends, opens, retries, resolves, deletes and (when asked) reconciles, under `fence`. A failure of
    /// one item is logged and the sweep goes on; a lost lease or cancellation ends it. `deleteUnknown`
    /// overrides the configured deletion of unknown channels.
    ///
    /// Work is read `batchLimit` items of each kind at a time; while a kind fills its batch, the sweep
    /// reads again at once (renewing the lease between rounds), so a thousand events created together get
    /// their channels in one sweep rather than a hundred a tick. Each event and channel is acted on once
    /// per sweep: a read that brings nothing new (creates refused at the quota) ends it.
    public func sweep(fence: LeaseGrant, reconcileAll: Bool = false, deleteUnknown: Bool? = nil) async throws -> SweepReport {
        let deleteUnknown = deleteUnknown ?? configuration.deleteUnknown
        var report = SweepReport()
        var fence = fence
        var handled = Set<SchedulerWork.Item>()
        var reconciled = Set<Int>()
        while true {
            let started = try await events.markStarted(limit: configuration.batchLimit, fence: fence, now: databaseNow)
            report.eventsStarted += started
            if !started.isEmpty { metrics.schedulerActions.increment(["start"], by: Double(started.count)) }
            let read = try await channels.dueWork(leadTime: configuration.leadTime, deleteDelay: configuration.deleteDelay,
                                                  endGrace: configuration.endGrace, now: databaseNow, limit: configuration.batchLimit)
            let work = read.excluding(handled)
            guard report.rounds == 0 || !started.isEmpty || !work.isEmpty else { break }
            report.rounds += 1
            handled.formUnion(try await sweepRound(work, fence: fence, deleteUnknown: deleteUnknown, reconciled: &reconciled,
                                                   report: &report))
            guard read.fills(limit: configuration.batchLimit) || started.count >= configuration.batchLimit else { break }
            guard let renewed = try await leases.renew(fence, duration: configuration.leaseDuration, now: databaseNow) else {
                throw PipelineError.leaseNotHeld(name: fence.name)
            }
            fence = renewed
            grant.withLock { held in if held?.fencing == renewed.fencing { held = renewed } }
        }
        if let retention = configuration.deliveryRetention {
            // Every sweep takes what fell out of the retention since the last, a few statements at most, so the
            // deletes are spread evenly rather than an hour's worth at once.
            try await purge("delivery rows past their retention", action: "purge_deliveries", level: .debug) {
                try await deliveries.purge(sentBefore: clock.now.addingTimeInterval(-retention), statements: 5)
            }
        }
        if reconcileAll {
            // Hourly housekeeping rides on the reconcile: idempotency keys past their 24 hours, updates past their
            // retention, the heartbeats of instances gone for a day (their claims' leases ran out long before).
            try await purge("expired idempotency keys", action: nil, level: .info) {
                try await ingest.purgeExpiredIdempotencyKeys(now: databaseNow)
            }
            try await purge("heartbeats of instances gone for a day", action: nil, level: .debug) {
                try await InstanceHeartbeatRepository().purge(lapsedFor: 86400, pool: pool)
            }
            if let retention = configuration.updateRetention {
                try await purge("updates of events ended past their retention", action: "purge_updates", level: .info) {
                    try await events.purgeUpdates(endedBefore: clock.now.addingTimeInterval(-retention), statements: 50)
                }
            }
            for app in try await catalog.apps() where !reconciled.contains(app.id) {
                try await isolated("reconcile app", app.id) {
                    try await reconcile(appID: app.id, unresolved: [], deleteUnknown: deleteUnknown, fence: fence, report: &report)
                }
            }
        }
        return report
    }

    /// One round of a sweep: acts on one read of due work. Returns the items it handled (the work's, and
    /// the channels it planned).
    private func sweepRound(_ work: SchedulerWork, fence: LeaseGrant, deleteUnknown: Bool, reconciled: inout Set<Int>,
                            report: inout SweepReport) async throws -> Set<SchedulerWork.Item> {
        for event in work.eventsToEnd {
            try await isolated("end event", event.id) { try await end(event, fence: fence, report: &report) }
        }
        for event in work.endsWithoutChannel {
            try await isolated("end event without a channel", event.id) {
                guard try await events.endWithoutChannel(eventID: event.id) else { return }
                report.eventsEnded.append(event.id)
                logger.warning("event ended with no channel to carry the end; its pending updates are unsent",
                               ["event": .int(event.id), "external_id": .string(event.externalID)])
            }
        }
        var planned = work.plannedChannels
        for event in work.eventsNeedingChannel {
            try await isolated("plan channel for event", event.id) {
                let channel = try await channels.createPlanned(eventID: event.id, fence: fence)
                if channel.state == .lifecycle(.planned) && !planned.contains(where: { $0.id == channel.id }) { planned.append(channel) }
            }
        }
        // Creates are admitted one at a time (each admitted create counts against the quota before the next
        // is weighed), then sent to APNs `createConcurrency` at a time.
        var admitted: [AdmittedCreate] = []
        for channel in planned {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            try await isolated("create channel", channel.id) {
                if case .createChannel(let attempt) = try lifecycle.leadTimeReached(),
                   let admission = try await admitCreate(channel, from: before, to: lifecycle, attempt: attempt, fence: fence,
                                                         report: &report) {
                    admitted.append(admission)
                }
            }
        }
        report.absorb(try await sendCreates(admitted, fence: fence))
        for channel in work.retriesDue {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            try await isolated("retry channel request", channel.id) {
                switch lifecycle.retryDue() {
                case .createChannel(let attempt):
                    try await create(channel, from: before, to: lifecycle, attempt: attempt, fence: fence, report: &report)
                case .deleteChannel:
                    try await delete(channel, from: before, to: lifecycle, fence: fence, report: &report)
                default: break
                }
            }
        }
        for (appID, unresolved) in Dictionary(grouping: work.unresolvedCreates, by: \.appID) {
            reconciled.insert(appID)
            try await isolated("reconcile app", appID) {
                try await reconcile(appID: appID, unresolved: unresolved, deleteUnknown: deleteUnknown, fence: fence, report: &report)
            }
        }
        for channel in work.deletionsDue {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            try await isolated("delete channel", channel.id) {
                if case .deleteChannel = try lifecycle.deleteDelayElapsed() {
                    try await delete(channel, from: before, to: lifecycle, fence: fence, report: &report)
                }
            }
        }
        return work.items.union(planned.map { .channel($0.id) })
    }

    /// One purge of the housekeeping (`body` returns how many rows went), isolated like any other work; the
    /// rows are counted under `action` in the scheduler's metric, when it has one, and logged at `level`.
    private func purge(_ what: String, action: String?, level: Logger.Level, _ body: () async throws -> Int) async throws {
        try await isolated("purge \(what)", 0) {
            let purged = try await body()
            guard purged > 0 else { return }
            if let action { metrics.schedulerActions.increment([action], by: Double(purged)) }
            logger.log(level, "\(what) purged", ["count": .int(purged)])
        }
    }

    /// Runs one item of a sweep: a lost lease or cancellation ends the sweep, anything else is logged.
    private func isolated(_ what: String, _ id: Int, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as PipelineError {
            if case .leaseNotHeld = error { throw error }
            logger.error("\(what) failed", ["id": .int(id), "error": .string("\(error)")])
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            logger.error("\(what) failed", ["id": .int(id), "error": .string("\(error)")])
        }
    }

    /// Ends an event past `endsAt` + grace: queues an `end` with its latest state (the dispatcher sends
    /// it on the open channel); an event without a channel able to carry it is ended at once.
    private func end(_ event: EventRecord, fence: LeaseGrant, report: inout SweepReport) async throws {
        let now = clock.now
        let draft = UpdateDraft(action: .end, dismissalDate: configuration.automaticEndDismissal.map { now.addingTimeInterval($0) },
                                occurredAt: now, urgent: true)
        do {
            _ = try await ingest.ingest(eventID: event.id, draft, contentState: { $0.latestState ?? [:] },
                                        response: { _ in StoredResponse(status: 202, body: Data()) })
        } catch PipelineError.eventClosed {
            return
        }
        notifier?.committed(urgent: true)
        report.eventsEnded.append(event.id)
        metrics.schedulerActions.increment(["end"])
        logger.info("event past its end; end queued", ["event": .int(event.id), "external_id": .string(event.externalID)])
        let live = try await channels.channels(eventID: event.id).first { record in
            guard case .lifecycle(let state) = record.state else { return false }
            return [.planned, .creating, .createUnknown, .createFailed, .open, .ending].contains(state)
        }
        if let live, var lifecycle = live.lifecycle, lifecycle.state == .planned || lifecycle.state == .createFailed {
            let before = lifecycle
            _ = try lifecycle.endRequested()
            try await channels.transition(channelID: live.id, from: before, to: lifecycle, fence: fence, now: databaseNow)
        }
        if live == nil || live?.state == .lifecycle(.planned) || live?.state == .lifecycle(.createFailed) {
            try await events.endWithoutChannel(eventID: event.id)
        }
    }

    /// Creates the channel at APNs (after the quota check) and records the lifecycle step it leads to.
    private func create(_ channel: ChannelRecord, from before: ChannelLifecycle, to creating: ChannelLifecycle, attempt: Int,
                        fence: LeaseGrant?, report: inout SweepReport) async throws {
        guard let admission = try await admitCreate(channel, from: before, to: creating, attempt: attempt, fence: fence,
                                                    report: &report) else { return }
        try await send(admission, fence: fence, report: &report)
    }

    /// A create that passed the quota and is recorded as in flight (`creating`), ready to go to APNs.
    private struct AdmittedCreate: Sendable {
        var channel: ChannelRecord
        var app: PipelineApp
        var creating: ChannelLifecycle
        var attempt: Int
        /// Channels counted against the quota besides this one when it was admitted.
        var inUse: Int
    }

    /// Weighs a create against the app's quota (refusing it past the quota) and moves the channel to
    /// `creating`, which counts it; nil when refused or when another writer moved the channel first.
    private func admitCreate(_ channel: ChannelRecord, from before: ChannelLifecycle, to creating: ChannelLifecycle, attempt: Int,
                             fence: LeaseGrant?, report: inout SweepReport) async throws -> AdmittedCreate? {
        guard let app = try await catalog.app(id: channel.appID) else { return nil }
        let appLabel = "\(app.bundleID)/\(app.environment)"
        if fence != nil, let until = await parking.heldUntil(appID: app.id) {
            // A sweep's create waits for the app's credentials (an operator's goes now); a planned channel is
            // read again each sweep, a retry waits for the park's end.
            if before.state == .creating {
                try await channels.transition(channelID: channel.id, from: before, to: before, nextAttemptAt: until, fence: fence, now: databaseNow)
            }
            report.parked.append(channel.id)
            return nil
        }
        // A retry (creating, create_unknown) is already counted: it takes no new place.
        let inUse = try await channels.quotaCount(appID: channel.appID) - (before.state.countsAgainstQuota ? 1 : 0)
        do {
            if case .nearLimit(let used, let limit) = try configuration.quota.admitCreate(inUse: inUse) {
                logger.warning("channel quota nearly spent", ["app": .string(appLabel), "in_use": .int(used), "limit": .int(limit)])
            }
        } catch {
            try await refuseForQuota(channel, state: before, app: appLabel, error: error.description, fence: fence, report: &report)
            return nil
        }
        guard try await channels.transition(channelID: channel.id, from: before, to: creating, inFlightTimeout: configuration.inFlightTimeout,
                                            fence: fence, now: databaseNow) else { return nil }
        return AdmittedCreate(channel: channel, app: app, creating: creating, attempt: attempt, inUse: inUse)
    }

    /// Sends admitted creates, `createConcurrency` at a time; returns what they did. A lost lease or
    /// cancellation ends it and cancels the creates in flight (a channel left `creating` is retried after
    /// `inFlightTimeout`); any other failure of one is logged.
    private func sendCreates(_ admitted: [AdmittedCreate], fence: LeaseGrant?) async throws -> SweepReport {
        try await withThrowingTaskGroup(of: SweepReport.self) { group in
            var reports = SweepReport()
            var next = admitted.makeIterator()
            func start() {
                guard let admission = next.next() else { return }
                group.addTask { [self] in
                    var report = SweepReport()
                    try await isolated("create channel", admission.channel.id) {
                        try await send(admission, fence: fence, report: &report)
                    }
                    return report
                }
            }
            for _ in 0..<max(1, configuration.createConcurrency) { start() }
            while let report = try await group.next() {
                reports.absorb(report)
                start()
            }
            return reports
        }
    }

    /// Asks APNs to create an admitted channel and records what came of it.
    private func send(_ admission: AdmittedCreate, fence: LeaseGrant?, report: inout SweepReport) async throws {
        let (channel, app, creating, attempt, inUse) = (admission.channel, admission.app, admission.creating, admission.attempt,
                                                         admission.inUse)
        let appLabel = "\(app.bundleID)/\(app.environment)"
        let outcome = await perform("channel_create") { try await apns.createChannel(app: app, storagePolicy: channel.storagePolicy) }
        try await record(outcome, kind: .channelCreate, appID: channel.appID, channelID: channel.id, firstAttempt: attempt)
        var next = creating
        switch outcome.result {
        case .accepted(let acceptance) where acceptance.channelID != nil:
            let id = acceptance.channelID!.value
            _ = try next.createSucceeded()
            try await channels.transition(channelID: channel.id, from: creating, to: next, apnsChannelID: id, fence: fence, now: databaseNow)
            await parking.succeeded(app)
            report.opened.append(channel.id)
            metrics.schedulerActions.increment(["open"])
            logger.info("channel opened", ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0), "apns_channel_id": .string(id)])
        case .rejected(let failure) where failure.reason == .cannotCreateChannelConfig:
            try await refuseForQuota(channel, state: creating, app: appLabel,
                                     error: "channel quota exhausted: APNs refused to create a channel (CannotCreateChannelConfig) "
                                         + "with \(inUse) of \(configuration.quota.limit) channels counted here; "
                                         + "delete ended channels or reconcile unknown ones before creating more",
                                     fence: fence, report: &report)
        case .credentialsFault(let failure):
            // The app's key, not this create: it waits with the app's other work, and stays a retry.
            let park = try await parking.refused(app, failure: failure)
            guard case .scheduleRetry = try next.createFailedRetryable() else { return }
            try await channels.transition(channelID: channel.id, from: creating, to: next, nextAttemptAt: park.retryAt,
                                          error: "\(failure)", fence: fence, now: databaseNow)
            report.parked.append(channel.id)
        case .rejected(let failure):
            _ = try next.createFailedPermanently()
            try await channels.transition(channelID: channel.id, from: creating, to: next, error: "\(failure)", fence: fence, now: databaseNow)
            report.createsFailed.append(channel.id)
            metrics.schedulerActions.increment(["create_failed"])
            logger.error("APNs refused to create the channel; an operator must act (marquee channel recreate)",
                         ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0), "reason": .string("\(failure)")])
        default:
            // Written and unanswered (a timeout, a connection lost or a stream reset in flight): APNs may have
            // made the channel, so it is not created again before a reconcile tells.
            if outcome.outcomeUnknown {
                _ = try next.createTimedOut()
                try await channels.transition(channelID: channel.id, from: creating, to: next,
                                              error: "create unanswered: \(outcome.failure.map { "\($0)" } ?? "unknown")",
                                              fence: fence, now: databaseNow)
                report.createsUnknown.append(channel.id)
                metrics.schedulerActions.increment(["create_unknown"])
                logger.warning("channel create unanswered; reconcile will settle it", ["channel": .int(channel.id)])
                return
            }
            guard case .scheduleRetry(_, let failed) = try next.createFailedRetryable() else { return }
            let delay = retryDelay(failed: failed, failure: outcome.failure)
            try await channels.transition(channelID: channel.id, from: creating, to: next, nextAttemptAt: clock.now.addingTimeInterval(delay),
                                          error: outcome.failure.map { "\($0)" }, fence: fence, now: databaseNow)
            report.createRetries.append(channel.id)
            metrics.retries.increment(["channel_create"])
            logger.warning("channel create failed; retrying after backoff",
                           ["channel": .int(channel.id), "reason": .string(outcome.failure.map { "\($0)" } ?? "unknown"),
                            "retry_in_seconds": .double(delay)])
        }
    }

    /// Leaves the channel where it was (planned, or creating waiting for a retry) with the quota error.
    private func refuseForQuota(_ channel: ChannelRecord, state: ChannelLifecycle, app: String, error: String, fence: LeaseGrant?,
                                report: inout SweepReport) async throws {
        let retryAt: Date? = state.state == .creating ? clock.now.addingTimeInterval(configuration.quotaRetryDelay) : nil
        try await channels.transition(channelID: channel.id, from: state, to: state, nextAttemptAt: retryAt, error: error,
                                      fence: fence, now: databaseNow)
        report.quotaRefused.append(channel.id)
        metrics.quotaRefusals.increment([app])
        if channel.lastError != error {
            logger.error("channel not created: quota", ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0),
                                                        "app": .string(app), "error": .string(error)])
        }
    }

    /// Deletes the channel at APNs and records the lifecycle step (deleted, or a retry).
    private func delete(_ channel: ChannelRecord, from before: ChannelLifecycle, to deleting: ChannelLifecycle, fence: LeaseGrant?,
                        report: inout SweepReport) async throws {
        guard let app = try await catalog.app(id: channel.appID), let apnsID = channel.apnsChannelID else { return }
        if fence != nil, let until = await parking.heldUntil(appID: app.id) {
            // A sweep's delete waits for the app's credentials (an operator's goes now).
            try await channels.transition(channelID: channel.id, from: before, to: deleting, nextAttemptAt: until, fence: fence, now: databaseNow)
            report.parked.append(channel.id)
            return
        }
        guard try await channels.transition(channelID: channel.id, from: before, to: deleting, inFlightTimeout: configuration.inFlightTimeout,
                                            fence: fence, now: databaseNow) else { return }
        let outcome = await perform("channel_delete") { try await apns.deleteChannel(app: app, channelID: apnsID) }
        try await record(outcome, kind: .channelDelete, appID: channel.appID, channelID: channel.id, firstAttempt: deleting.attempt)
        var next = deleting
        switch outcome.result {
        case .accepted:
            _ = try next.deleteSucceeded()
            await parking.succeeded(app)
        case .rejected(let failure) where failure.reason == .channelNotRegistered:
            _ = try next.channelNotRegistered()
        case .credentialsFault(let failure):
            let park = try await parking.refused(app, failure: failure)
            guard case .scheduleRetry = try next.deleteFailed() else { return }
            try await channels.transition(channelID: channel.id, from: deleting, to: next, nextAttemptAt: park.retryAt,
                                          error: "\(failure)", fence: fence, now: databaseNow)
            report.parked.append(channel.id)
            return
        default:
            guard case .scheduleRetry(_, let failed) = try next.deleteFailed() else { return }
            let delay = retryDelay(failed: failed, failure: outcome.failure)
            try await channels.transition(channelID: channel.id, from: deleting, to: next, nextAttemptAt: clock.now.addingTimeInterval(delay),
                                          error: outcome.failure.map { "\($0)" }, fence: fence, now: databaseNow)
            metrics.retries.increment(["channel_delete"])
            logger.warning("channel delete failed; retrying after backoff",
                           ["channel": .int(channel.id), "reason": .string(outcome.failure.map { "\($0)" } ?? "unknown"),
                            "retry_in_seconds": .double(delay)])
            return
        }
        try await channels.transition(channelID: channel.id, from: deleting, to: next, fence: fence, now: databaseNow)
        report.deleted.append(channel.id)
        metrics.schedulerActions.increment(["delete"])
        logger.info("channel deleted", ["channel": .int(channel.id), "apns_channel_id": .string(apnsID)])
    }

    /// Compares the app's channel list at APNs with the database: settles timed-out creates, flags
    /// channels APNs lost, deletes resurrected ones, reports unknown ones (deleting old ones if configured).
    private func reconcile(appID: Int, unresolved: [ChannelRecord], deleteUnknown: Bool, fence: LeaseGrant,
                           report: inout SweepReport) async throws {
        guard let app = try await catalog.app(id: appID) else { return }
        let appLabel = "\(app.bundleID)/\(app.environment)"
        if await parking.heldUntil(appID: appID) != nil {
            logger.debug("reconcile skipped: the app's credentials are parked", ["app": .string(appLabel)])
            return
        }
        let listedAt = clock.now
        let outcome = await perform("channel_list") { try await apns.listChannels(app: app) }
        try await record(outcome, kind: .channelList, appID: appID, channelID: nil, firstAttempt: 1)
        if case .credentialsFault(let failure) = outcome.result { _ = try await parking.refused(app, failure: failure) }
        if outcome.acceptance != nil { await parking.succeeded(app) }
        guard let listed = outcome.acceptance?.channels?.map(\.value) else {
            logger.warning("channel list failed; reconcile skipped", ["app": .string(appLabel),
                                                                     "reason": .string(outcome.failure.map { "\($0)" } ?? "unknown")])
            return
        }
        let result = try await channels.reconcile(appID: appID, apnsChannelIDs: listed, fence: fence, now: databaseNow)
        var appReport = AppReconcileReport(appID: appID)
        defer { report.reconciled.append(appReport) }
        let listedSet = Set(listed)
        for channel in unresolved {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            if let id = channel.apnsChannelID, listedSet.contains(id) {
                _ = try lifecycle.reconcileFound()
                try await channels.transition(channelID: channel.id, from: before, to: lifecycle, fence: fence, now: databaseNow)
                report.opened.append(channel.id)
            } else if case .createChannel(let attempt) = try lifecycle.reconcileNotFound() {
                // Any channel the timed-out create made shows up below as unknown.
                try await create(channel, from: before, to: lifecycle, attempt: attempt, fence: fence, report: &report)
            }
        }
        // Channels first seen after the list was taken cannot be in it.
        for channel in result.missing where (channel.firstSeenAt ?? .distantPast) < listedAt {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            let action = try lifecycle.reconcileNotFound()
            try await channels.transition(channelID: channel.id, from: before, to: lifecycle,
                                          error: "not in APNs' channel list", fence: fence, now: databaseNow)
            appReport.missing.append(channel.id)
            if action == .flagLost {
                report.lost.append(channel.id)
                metrics.schedulerActions.increment(["lost"])
                logger.error("APNs no longer lists the channel; event flagged channel_lost",
                             ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0),
                              "apns_channel_id": .string(channel.apnsChannelID ?? "")])
            }
        }
        for channel in result.resurrected {
            guard var lifecycle = channel.lifecycle else { continue }
            let before = lifecycle
            if case .deleteChannel = try lifecycle.reconcileFound() {
                appReport.resurrected.append(channel.id)
                try await delete(channel, from: before, to: lifecycle, fence: fence, report: &report)
            }
        }
        metrics.unknownChannels.set(Double(result.unknown.count), [appLabel])
        let newlyRecorded = Set(result.newlyRecorded.map(\.id))
        for channel in result.unknown {
            guard let apnsID = channel.apnsChannelID else { continue }
            report.unknown.append(apnsID)
            appReport.unknown.append(apnsID)
            if newlyRecorded.contains(channel.id) {
                appReport.recorded.append(apnsID)
                logger.warning("unknown channel in APNs' list", ["app": .string(appLabel), "apns_channel_id": .string(apnsID),
                                                                 "delete_unknown": .bool(deleteUnknown)])
            }
            guard deleteUnknown,
                  let seen = channel.firstSeenAt, clock.now.timeIntervalSince(seen) >= configuration.unknownDeleteGrace else { continue }
            guard try await channels.beginDeletingUnknown(channelID: channel.id, inFlightTimeout: configuration.inFlightTimeout,
                                                          fence: fence, now: databaseNow) else { continue }
            report.unknownDeleted.append(apnsID)
            appReport.deleted.append(apnsID)
            let deleting = ChannelLifecycle(state: .deleting, attempt: 1)
            try await delete(channel, from: deleting, to: deleting, fence: fence, report: &report)
        }
    }

    /// Runs an APNs call; a call that could not be made at all becomes a transient I/O failure.
    private func perform(_ operation: String, _ call: () async throws -> ChannelAPNsOutcome) async -> ChannelAPNsOutcome {
        let outcome: ChannelAPNsOutcome
        do {
            outcome = try await call()
        } catch {
            outcome = ChannelAPNsOutcome(ChannelAPNsAttempt(result: APNsResult(transportFailure: .io("not sent: \(error)"))))
        }
        for attempt in outcome.attempts {
            metrics.apnsAnswers.increment([operation, attempt.result.acceptance != nil ? "ok" : attempt.reasonText ?? "unknown"])
        }
        return outcome
    }

    /// One delivery row per attempt.
    private func record(_ outcome: ChannelAPNsOutcome, kind: DeliveryKind, appID: Int, channelID: Int?, firstAttempt: Int) async throws {
        let attempts = outcome.attempts.isEmpty ? [ChannelAPNsAttempt(result: outcome.result)] : outcome.attempts
        for (index, attempt) in attempts.enumerated() {
            try await deliveries.insert(attempt.delivery(appID: appID, kind: kind, channelID: channelID,
                                                         attempt: max(1, firstAttempt) + index))
        }
    }

    private func retryDelay(failed: Int, failure: APNsFailure?) -> TimeInterval {
        let delay = configuration.retryBackoff.delay(attempt: failed)
        return max(delay, TimeInterval(failure?.retryAfterSeconds ?? 0))
    }
}
