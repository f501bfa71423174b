// The dispatcher turns outbox rows into APNs broadcasts. Any number of instances run it: work is
// claimed per event (so per channel) as a lease in the outbox (OutboxRepository) that ends with its holder
// (InstanceHeartbeat), and every outcome is written as soon as the database takes it (`persistently`), so
// a crash or a database restart never leaves a channel waiting for a lease. NOTIFY marquee_outbox
// wakes the loop and polling covers lost notifications and due retries. This file is the loop: it reads a
// claim's facts, asks `BroadcastClaimPlanner` what to do (postpone, give back, refuse, send) and hands a send
// to `BroadcastSender`, which records what APNs answered and keeps the channels' memory.
//
// Pacing costs no round trip where it can be helped: an ingest queues an update that is not urgent due
// when its channel may broadcast again (and tells this process's dispatcher when), the run loop's claim
// leaves alone (and makes due later) rows whose channel broadcast less than the conflation interval ago
// and that hold nothing urgent, a row released because a newer update arrived during its send is made due
// when the pacing allows, and the loop sleeps until the earliest due time it knows of (`DueSchedule`:
// ingested here, postponed, paced or released), not a whole poll interval. Claims keep a few milliseconds
// apart (`claimSpacing`), so a burst of urgent updates is claimed a few rows at a time.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Broadcasts outbox work to APNs: claims, conflates, composes, prioritises, sends and records.
public final class BroadcastDispatcher: Service {
    public let name = "dispatcher"
    public let configuration: BroadcastDispatcherConfiguration

    private let pool: PostgresPool
    private let listenConfiguration: PostgresConfiguration?
    private let apns: any BroadcastChannelAPNs
    private let catalog: any PipelineCatalog
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let clock: any WallClock
    private let outbox: OutboxRepository
    private let wakeup = Wakeup()
    private let loopState = Mutex(LoopState())
    /// Every send slot was busy at the last turn of the loop: the next finished send asks for a claim.
    private let slotWanted = Mutex(false)
    private let sending = Mutex<Set<Int>>([])
    /// The claim tokens of the sends in flight, which `releaseClaims(of:keeping:)` leaves alone.
    private let claimsInFlight = Mutex<Set<UUID>>([])
    /// A claim statement's answer was lost, or a claim could not be given back: rows this instance claimed
    /// may be held with nobody sending them. The loop gives them back before its next claim.
    private let mayHoldOrphans = Mutex(false)
    private let parking: CredentialsParking
    private let planner: BroadcastClaimPlanner
    /// Sends what the planner decided and records the answers.
    private let sender: BroadcastSender

    /// `listenTo` is the database to LISTEN on for `marquee_outbox` (nil: poll only). `parking` is the process's view
    /// of apps parked for a credentials fault, shared with the scheduler (nil: one of its own).
    public init(
        pool: PostgresPool, listenTo: PostgresConfiguration?, apns: any BroadcastChannelAPNs,
        catalog: any PipelineCatalog, configuration: BroadcastDispatcherConfiguration, metrics: PipelineMetrics,
        logger: Logger, clock: any WallClock = SystemWallClock(), parking: CredentialsParking? = nil
    ) {
        self.pool = pool
        self.listenConfiguration = listenTo
        self.apns = apns
        self.catalog = catalog
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger.with(["service": "dispatcher"])
        self.clock = clock
        outbox = OutboxRepository(pool: pool)
        let clockDrivesDatabase = configuration.clockDrivesDatabase
        databaseClock = { [clock] in clockDrivesDatabase ? clock.now : nil }
        self.parking = parking ?? CredentialsParking(pool: pool, metrics: metrics, logger: self.logger, clock: clock)
        planner = BroadcastClaimPlanner(
            conflation: configuration.conflation, highPriorityBudget: configuration.highPriorityBudget,
            highPriorityWindow: configuration.highPriorityWindow)
        sender = BroadcastSender(
            pool: pool, apns: apns, catalog: catalog, configuration: configuration, planner: planner,
            parking: self.parking, metrics: metrics, logger: self.logger, clock: clock, databaseClock: databaseClock,
            wakeup: wakeup)
    }

    /// The longest wait between two claims that failed (the database is away).
    static let outageBackoff: Duration = .seconds(2)

    /// The time passed to the database instead of its `now()`: the injected clock's with
    /// `clockDrivesDatabase` (tests), else nil. One closure, shared with the record batcher.
    private let databaseClock: @Sendable () -> Date?
    private var databaseNow: Date? { databaseClock() }

    // MARK: the service

    /// The run loop's wait, kept together so that `isIdle` reads it in one step.
    private struct LoopState {
        /// Something asked for a claim (NOTIFY, `wake()`, shutdown, a send slot the loop waited for), as
        /// opposed to a wake-up that only moved the earliest due time earlier.
        var claimRequested = false
        /// The loop waits for work.
        var waiting = false
        /// The LISTEN is in place.
        var listening = false
    }

    /// Outbox work was committed in this process: claims now rather than at the next poll, or, with
    /// `dueIn` (seconds, above 0), wakes when it is due.
    public func wake(dueIn: TimeInterval? = nil) {
        if let dueIn, dueIn > 0 { noteDue(after: dueIn) } else { requestClaim() }
    }

    private func requestClaim() {
        loopState.withLock { $0.claimRequested = true }
        wakeup.signal()
    }

    /// Whether the run loop waits for work: its last claim done, none asked for, and its LISTEN in place (when it
    /// listens). For tests that must act between two claims: they wait for this, never for a time.
    public var isIdle: Bool {
        loopState.withLock { $0.waiting && !$0.claimRequested && ($0.listening || listenConfiguration == nil) }
    }

    public func run(until shutdown: ShutdownSignal) async throws {
        let listener = listenConfiguration.map { PostgresListener(configuration: $0, channels: [IngestRepository.notifyChannel]) }
        let bridge = Task { [self] in
            await shutdown.wait()
            requestClaim()
        }
        defer {
            listener?.stop()
            bridge.cancel()
        }
        logger.info(
            "dispatcher started",
            [
                "instance": .string(configuration.instance),
                "max_concurrent_sends": .int(configuration.maxConcurrentSends),
            ])
        await withDiscardingTaskGroup { group in
            if let listener {
                group.addTask { [self] in
                    for await event in listener.events {
                        // This process's notifier woke us already, before it sent the NOTIFY.
                        if case .notification(let note) = event, note.payload == configuration.instance { continue }
                        // In one step with the claim it asks for, so `isIdle` never sees the LISTEN without it.
                        loopState.withLock { state in
                            if case .listening = event { state.listening = true }
                            state.claimRequested = true
                        }
                        wakeup.signal()
                    }
                }
            }
            var lastSample: ContinuousClock.Instant?
            var lastClaim: ContinuousClock.Instant?
            var claimFailures = 0
            while !shutdown.isTriggered && !Task.isCancelled {
                if let interval = configuration.statusSampleInterval, lastSample.map({ ContinuousClock.now - $0 >= interval }) ?? true {
                    lastSample = ContinuousClock.now
                    await sampleStatus()
                }
                let free = configuration.maxConcurrentSends - sending.withLock { $0.count }
                slotWanted.withLock { $0 = free <= 0 }
                var full = false
                if free > 0 {
                    lastClaim = .now
                    let limit = min(configuration.claimBatch, free)
                    // What comes due by now is claimed now; later due times stay for the wait below.
                    sender.dueTimes.withLock { $0.removeDue(by: ContinuousClock.now) }
                    do {
                        if mayHoldOrphans.withLock({ $0 }) { try await releaseOrphanedClaims() }
                        let batch = try await outbox.claimBatch(
                            instance: configuration.instance, limit: limit,
                            lease: configuration.claimLease,
                            pacing: configuration.conflation.pacing, now: databaseNow)
                        full = batch.taken == limit
                        claimFailures = 0
                        if let paced = batch.pacedUntil { noteDue(at: paced) }
                        if !batch.takenOver.isEmpty {
                            metrics.claimsTakenOver.increment(by: Double(batch.takenOver.count))
                            logger.info(
                                "claims taken over from instances whose heartbeat or lease lapsed",
                                [
                                    "claims": .int(batch.takenOver.count),
                                    "holders": .string(Set(batch.takenOver).sorted().joined(separator: ",")),
                                ])
                        }
                        await sender.rememberChannels(of: batch.claims)
                        claimsInFlight.withLock { $0.formUnion(batch.claims.map(\.claimToken)) }
                        for claim in batch.claims {
                            group.addTask { [self] in
                                _ = await handle(claim, shutdown: shutdown)
                                // Only a loop short of slots needs to hear of it: what a send leaves due
                                // later (postponed, released) is in `dueTimes`.
                                if slotWanted.withLock({ wanted in
                                    defer { wanted = false }
                                    return wanted
                                }) {
                                    requestClaim()
                                }
                            }
                        }
                    } catch {
                        // The database is away: back off up to 2 s (so sends resume within that once it is back),
                        // logging the first failure and every tenth.
                        // The claim may have run without its answer reaching us: its rows are freed before the next.
                        mayHoldOrphans.withLock { $0 = true }
                        claimFailures += 1
                        if claimFailures % 10 == 1 {
                            logger.error("outbox claim failed", ["error": .string("\(error)"), "failures": .int(claimFailures)])
                        }
                    }
                }
                let backoff =
                    claimFailures == 0
                    ? configuration.pollInterval
                    : min(configuration.pollInterval * (1 << min(claimFailures, 6)), Self.outageBackoff)
                // Short of slots, due times wait too: a finished send asks for the next claim.
                if !full {
                    await waitForWork(until: ContinuousClock.now + backoff, dueTimes: claimFailures == 0 && free > 0, shutdown: shutdown)
                    if let spacing = configuration.claimSpacing, let lastClaim, lastClaim + spacing > .now, !shutdown.isTriggered {
                        // What arrives meanwhile joins the next claim.
                        try? await Task.sleep(until: lastClaim + spacing, clock: .continuous)
                    }
                }
            }
            // Stop claiming; the group waits for the sends in flight (they finish and record).
            listener?.stop()
        }
        logger.info("dispatcher stopped", ["instance": .string(configuration.instance)])
    }

    /// Returns when a claim is asked for, at `deadline`, or (with `dueTimes`) a little after the earliest
    /// due time this instance set, so the database's clock has passed it too. A due time set earlier
    /// meanwhile shortens the wait without a claim.
    private func waitForWork(until deadline: ContinuousClock.Instant, dueTimes: Bool, shutdown: ShutdownSignal) async {
        while !shutdown.isTriggered && !Task.isCancelled {
            var end = deadline
            if dueTimes, let due = sender.dueTimes.withLock({ $0.earliest }) { end = min(end, due + .milliseconds(2)) }
            let left = end - ContinuousClock.now
            if left <= .zero { return }
            loopState.withLock { $0.waiting = true }
            await wakeup.wait(upTo: left)
            if loopState.withLock({ state in
                defer { state.claimRequested = false }
                state.waiting = false
                return state.claimRequested
            }) {
                return
            }
        }
    }

    /// Claims one batch and handles every claim in it (for tests and one-shot tools); returns the results.
    /// Unlike the run loop it claims rows that are too soon for the pacing too, so each due row gets a result.
    public func dispatchOnce(limit: Int? = nil) async throws -> [DispatchResult] {
        let claims = try await outbox.claim(
            instance: configuration.instance, limit: limit ?? configuration.claimBatch,
            lease: configuration.claimLease, now: databaseNow)
        await sender.rememberChannels(of: claims)
        claimsInFlight.withLock { $0.formUnion(claims.map(\.claimToken)) }
        return await withTaskGroup(of: (Int, DispatchResult).self) { group in
            for (index, claim) in claims.enumerated() {
                group.addTask { [self] in (index, await handle(claim, shutdown: nil)) }
            }
            var results = [DispatchResult](repeating: .abandoned, count: claims.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// Remembers that a row becomes due `delay` seconds from now (the run loop wakes for it, shortening its wait).
    private func noteDue(after delay: TimeInterval) { sender.noteDue(after: delay) }

    /// `noteDue(after:)` for a due time on the dispatcher's clock.
    private func noteDue(at date: Date) { noteDue(after: date.timeIntervalSince(clock.now)) }

    /// Gives a claim back unsent, due after `delay`, and remembers when.
    @discardableResult
    private func postpone(_ claim: ClaimedBroadcast, by delay: TimeInterval) async throws -> Bool {
        try await sender.postpone(claim, by: delay)
    }

    private func sampleStatus() async {
        do {
            metrics.record(try await StatusRepository(pool: pool).status(errorLimit: 0))
        } catch {
            logger.warning("status sample failed", ["error": .string("\(error)")])
        }
    }

    // MARK: one claim

    private func handle(_ claim: ClaimedBroadcast, shutdown: ShutdownSignal?) async -> DispatchResult {
        defer { _ = claimsInFlight.withLock { $0.remove(claim.claimToken) } }
        // One channel is never sent twice at once: a claim whose lease ran out during a slow send of
        // this instance can come back to it; give it back for a moment.
        guard sending.withLock({ $0.insert(claim.channelID).inserted }) else {
            await giveBack(claim, by: 0.2)
            return .released
        }
        defer { _ = sending.withLock { $0.remove(claim.channelID) } }
        do {
            return try await dispatch(claim, shutdown: shutdown)
        } catch {
            logger.error(
                "broadcast failed",
                [
                    "event": .int(claim.eventID), "channel": .int(claim.channelID),
                    "error": .string("\(error)"),
                ])
            await giveBack(claim, by: configuration.retryBackoff.delay(attempt: claim.attempts + 1))
            return .abandoned
        }
    }

    /// Postpones a claim `persistently`; when even that fails, the loop frees it before its next claim.
    private func giveBack(_ claim: ClaimedBroadcast, by delay: TimeInterval) async {
        do {
            try await sender.persistently(claim, "postpone") { try await postpone(claim, by: delay) }
        } catch {
            mayHoldOrphans.withLock { $0 = true }
        }
    }

    /// Gives back what this instance claims with no send in flight (`mayHoldOrphans`).
    private func releaseOrphanedClaims() async throws {
        mayHoldOrphans.withLock { $0 = false }
        do {
            let released = try await outbox.releaseClaims(of: configuration.instance, keeping: Array(claimsInFlight.withLock { $0 }))
            if released > 0 { logger.info("claims with no send in flight given back", ["rows": .int(released)]) }
        } catch {
            mayHoldOrphans.withLock { $0 = true }
            throw error
        }
    }

    private func dispatch(_ claim: ClaimedBroadcast, shutdown: ShutdownSignal?) async throws -> DispatchResult {
        let now = clock.now
        if let until = await parking.heldUntil(appID: claim.appID) {
            try await sender.persistently(claim, "park") { try await postpone(claim, by: max(0.01, until.timeIntervalSince(now))) }
            return .parked(until: until)
        }
        let remembered = try await sender.memory(of: claim)
        let facts = ClaimFacts(
            claim: claim, memory: remembered,
            schema: try await catalog.contentStateSchema(attributeTypeID: claim.attributeTypeID), now: now,
            stopping: shutdown?.isTriggered == true)
        switch planner.plan(facts) {
        case .postpone(let delay):
            try await postpone(claim, by: delay)
            return .postponed
        case .release:
            try await outbox.release([claim])
            return .released
        case .refuse(let refusal):
            try await outbox.recordPermanentFailure(
                claim,
                delivery: DeliveryDraft(
                    appID: claim.appID, kind: .broadcast, channelID: claim.channelID, updateID: claim.update.id,
                    status: nil, reason: "not sent: \(refusal)", attempt: claim.attempts + 1),
                channelNotRegistered: false, now: databaseNow)
            logger.error("broadcast refused locally", ["event": .int(claim.eventID), "update": .int(claim.update.id), "error": .string(refusal)])
            return .rejected(refusal)
        case .send(let planned):
            return try await sender.send(planned, claim: claim, now: now, shutdown: shutdown)
        }
    }

}
