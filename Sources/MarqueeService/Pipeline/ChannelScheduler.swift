// The channel scheduler: one leader across instances (a lease row with a fencing number,
// LeaderLeaseRepository) opens channels a lead time before events, ends events that nobody ended,
// deletes ended channels after a delay and reconciles with Apple's channel lists. A sweep reads the due
// work, `SweepPlanner` turns it into lifecycle steps (ChannelLifecycle decides each), and `ChannelRequests`
// performs them against APNs; every write carries the lease (`fence:`), so a leader that lost its lease
// mid-sweep changes nothing. Retention purges are a service of their own (`RetentionService`).
// A renewer task keeps the lease while a sweep runs; `runOnce()` does one sweep for cron.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Opens, ends, deletes and reconciles channels on schedule, as the leader of all instances.
public final class ChannelScheduler: Service {
    public let name = "scheduler"
    public let configuration: ChannelSchedulerConfiguration

    private let pool: PostgresPool
    private let apns: any BroadcastChannelAPNs
    private let catalog: any PipelineCatalog
    private let metrics: PipelineMetrics
    let logger: Logger
    private let clock: any WallClock
    let channels: ChannelRepository
    private let leases: LeaderLeaseRepository
    private let ingest: IngestRepository
    let events: EventRepository
    /// The requests to APNs and the steps their answers lead to.
    let requests: ChannelRequests
    private let grant = Mutex<LeaseGrant?>(nil)
    /// True while `run(until:)` runs: `runOnce` then shares the service's lease instead of borrowing it.
    private let serving = Mutex(false)
    private let lastReconcile = Mutex<Date?>(nil)
    private let wakeup = Wakeup()
    private let renewWakeup = Wakeup()
    /// Wakes dispatchers after the scheduler queues an end.
    private let notifier: OutboxNotifier?

    public init(
        pool: PostgresPool, apns: any BroadcastChannelAPNs, catalog: any PipelineCatalog,
        configuration: ChannelSchedulerConfiguration, metrics: PipelineMetrics, logger: Logger,
        clock: any WallClock = SystemWallClock(), notifier: OutboxNotifier? = nil, parking: CredentialsParking? = nil
    ) {
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
        requests = ChannelRequests(
            configuration: configuration, pool: pool, apns: apns, catalog: catalog, metrics: metrics,
            logger: self.logger, clock: clock,
            parking: parking ?? CredentialsParking(pool: pool, metrics: metrics, logger: self.logger, clock: clock))
    }

    /// True while this instance holds the lease.
    public var isLeader: Bool { grant.withLock { $0 != nil } }

    /// Sweeps now rather than at the next tick, if this instance leads (e.g. after an event was created
    /// inside its lead time, or an operator asked for a recreate).
    public func wake() { wakeup.signal() }

    private var databaseNow: Date? { configuration.clockDrivesDatabase ? clock.now : nil }

    // MARK: the service

    public func run(until shutdown: ShutdownSignal) async throws {
        serving.withLock { $0 = true }
        defer { serving.withLock { $0 = false } }
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
        if let held = grant.withLock({ grant -> LeaseGrant? in
            defer { grant = nil }
            return grant
        }) {
            do {
                try await leases.release(held)
                metrics.schedulerLeader.set(0)
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
                next = try await leases.acquire(
                    name: configuration.leaseName, holder: configuration.instance,
                    duration: configuration.leaseDuration, now: databaseNow)
                if let next, next.fencing != current?.fencing {
                    logger.info("scheduler lease acquired; leading", ["fencing": .int(Int(next.fencing))])
                }
            }
            grant.withLock { $0 = next }
            metrics.schedulerLeader.set(next != nil ? 1 : 0)
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

    /// One full sweep for `marquee channel sweep` (cron) and the operator's routes. Inside a running service
    /// it sweeps under the service's lease, taking it if free, and keeps it: giving back a lease the service
    /// shares (same holder, same fencing) would fence the service's own sweeps. On its own it takes the
    /// lease, sweeps and gives it back. Throws `leaseHeldElsewhere` while another instance leads.
    public func runOnce(reconcile: Bool = false, deleteUnknown: Bool? = nil) async throws -> SweepReport {
        var fence = grant.withLock { $0 }
        let inService = serving.withLock { $0 }
        if fence == nil && inService {
            fence = await holdLease() ? grant.withLock { $0 } : nil
        }
        let takenForThisSweep = fence == nil && !inService
        if takenForThisSweep {
            fence = try await leases.acquire(
                name: configuration.leaseName, holder: configuration.instance,
                duration: configuration.leaseDuration, now: databaseNow)
        }
        guard let fence else {
            throw await heldElsewhere()
        }
        do {
            let report = try await sweep(fence: fence, reconcileAll: reconcile, deleteUnknown: deleteUnknown)
            await retention().purge(hourly: reconcile)
            if takenForThisSweep { try await giveBack(fence) }
            return report
        } catch PipelineError.leaseNotHeld {
            grant.withLock { held in if held?.fencing == fence.fencing { held = nil } }
            throw await heldElsewhere()
        } catch {
            if takenForThisSweep { try? await giveBack(fence) }
            throw error
        }
    }

    /// Gives back the lease `runOnce` took for its sweep, unless the service started meanwhile: it shares that
    /// lease (same holder, same fencing), and serve answers the operator's routes before its scheduler's loop
    /// starts, so giving it back would expire the service's lease under it (its sweeps fenced, and the next
    /// operator's sweep refused) until its next renewal.
    private func giveBack(_ fence: LeaseGrant) async throws {
        guard !serving.withLock({ $0 }), grant.withLock({ $0?.fencing != fence.fencing }) else { return }
        try await leases.release(fence)
    }

    private func heldElsewhere() async -> ChannelSchedulerError {
        .leaseHeldElsewhere(holder: try? await leases.current(name: configuration.leaseName)?.holder)
    }

    /// The retention purges, run while this instance leads (a service of its own in the daemon; `runOnce`
    /// runs one pass after its sweep).
    public func retention() -> RetentionService {
        RetentionService(
            pool: pool, configuration: configuration, metrics: metrics, logger: logger, clock: clock,
            leads: { [weak self] in self?.isLeader ?? false })
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
            let read = try await channels.dueWork(
                leadTime: configuration.leadTime, deleteDelay: configuration.deleteDelay,
                endGrace: configuration.endGrace, now: databaseNow, limit: configuration.batchLimit)
            let work = read.excluding(handled)
            guard report.rounds == 0 || !started.isEmpty || !work.isEmpty else { break }
            report.rounds += 1
            handled.formUnion(
                try await sweepRound(
                    work, fence: fence, deleteUnknown: deleteUnknown, reconciled: &reconciled,
                    report: &report))
            guard read.fills(limit: configuration.batchLimit) || started.count >= configuration.batchLimit else { break }
            guard let renewed = try await leases.renew(fence, duration: configuration.leaseDuration, now: databaseNow) else {
                throw PipelineError.leaseNotHeld(name: fence.name)
            }
            fence = renewed
            grant.withLock { held in if held?.fencing == renewed.fencing { held = renewed } }
        }
        if reconcileAll {
            for app in try await catalog.apps() where !reconciled.contains(app.id) {
                try await requests.isolated("reconcile app", app.id) {
                    try await requests.reconcile(appID: app.id, unresolved: [], deleteUnknown: deleteUnknown, fence: fence, report: &report)
                }
            }
        }
        return report
    }

    /// One round of a sweep: performs what the planner makes of one read of due work. Returns the items it
    /// handled (the work's, and the channels it planned).
    private func sweepRound(
        _ work: SchedulerWork, fence: LeaseGrant, deleteUnknown: Bool, reconciled: inout Set<Int>,
        report: inout SweepReport
    ) async throws -> Set<SchedulerWork.Item> {
        var plan = SweepPlanner.plan(work)
        for event in plan.eventsToEnd {
            try await requests.isolated("end event", event.id) { try await end(event, fence: fence, report: &report) }
        }
        for event in plan.endsWithoutChannel {
            try await requests.isolated("end event without a channel", event.id) {
                guard try await events.endWithoutChannel(eventID: event.id) else { return }
                report.eventsEnded.append(event.id)
                logger.warning(
                    "event ended with no channel to carry the end; its pending updates are unsent",
                    ["event": .int(event.id), "external_id": .string(event.externalID)])
            }
        }
        var planned: [ChannelRecord] = []
        for event in plan.channelsToPlan {
            try await requests.isolated("plan channel for event", event.id) {
                let channel = try await channels.createPlanned(eventID: event.id, fence: fence)
                if channel.state == .lifecycle(.planned) && !work.plannedChannels.contains(where: { $0.id == channel.id }) {
                    planned.append(channel)
                }
            }
        }
        let extra = SweepPlanner.createSteps(for: planned)
        plan.creates += extra.creates
        plan.skipped += extra.skipped
        for (channel, error) in plan.skipped {
            logger.warning("due work skipped: its channel moved on", ["channel": .int(channel.id), "error": .string("\(error)")])
        }
        // Creates are admitted one at a time (each admitted create counts against the quota before the next
        // is weighed), then sent to APNs `createConcurrency` at a time.
        var admitted: [ChannelRequests.AdmittedCreate] = []
        for step in plan.creates {
            guard case .createChannel(let attempt) = step.action else { continue }
            try await requests.isolated("create channel", step.channel.id) {
                if let admission = try await requests.admitCreate(step, attempt: attempt, fence: fence, report: &report) {
                    admitted.append(admission)
                }
            }
        }
        report.absorb(try await requests.sendCreates(admitted, fence: fence))
        for step in plan.retries {
            try await requests.isolated("retry channel request", step.channel.id) {
                try await requests.perform(step, fence: fence, report: &report)
            }
        }
        for (appID, unresolved) in plan.reconciles {
            reconciled.insert(appID)
            try await requests.isolated("reconcile app", appID) {
                try await requests.reconcile(appID: appID, unresolved: unresolved, deleteUnknown: deleteUnknown, fence: fence, report: &report)
            }
        }
        for step in plan.deletions {
            try await requests.isolated("delete channel", step.channel.id) {
                try await requests.perform(step, fence: fence, report: &report)
            }
        }
        return work.items.union(planned.map { .channel($0.id) })
    }

    /// Ends an event past `endsAt` + grace: queues an `end` with its latest state (the dispatcher sends
    /// it on the open channel); an event without a channel able to carry it is ended at once.
    private func end(_ event: EventRecord, fence: LeaseGrant, report: inout SweepReport) async throws {
        let now = clock.now
        let draft = UpdateDraft(
            action: .end, dismissalDate: configuration.automaticEndDismissal.map { now.addingTimeInterval($0) },
            occurredAt: now, urgent: true)
        do {
            _ = try await ingest.ingest(
                eventID: event.id, draft, contentState: { $0.latestState ?? [:] },
                response: { _ in StoredResponse(status: 202, body: Data()) })
        } catch PipelineError.eventClosed {
            return
        }
        notifier?.committed(urgent: true)
        report.eventsEnded.append(event.id)
        metrics.schedulerActions.increment(["end"])
        logger.info("event past its end; end queued", ["event": .int(event.id), "external_id": .string(event.externalID)])
        try await EndWithoutChannel(channels: channels, events: events).endIfNoChannelCarries(eventID: event.id, fence: fence, now: databaseNow)
    }
}
