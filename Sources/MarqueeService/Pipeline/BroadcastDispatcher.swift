// The dispatcher turns outbox rows into APNs broadcasts. Any number of instances run it: work is
// claimed per event (so per channel) as a lease in the outbox (OutboxRepository) that ends with its holder
// (InstanceHeartbeat), and every outcome is written as soon as the database takes it (`persistently`), so
// a crash or a database restart never leaves a channel waiting for a lease. NOTIFY marquee_outbox
// wakes the loop and polling covers lost notifications and due retries. For each claim it applies,
// in order: conflation (≈1 broadcast/s per channel, urgent updates at once; otherwise postponed),
// the payload (newest state, carried alert dropped if it would not fit 5,120 bytes), a strictly
// increasing aps.timestamp, the expiration of the storage policy, and the priority (auto: alert or
// significant change → 10, within a per-channel hourly budget). Then it sends and records the result
// in one statement per outcome.
//
// Pacing costs no round trip where it can be helped: an ingest queues an update that is not urgent due
// when its channel may broadcast again (and tells this process's dispatcher when), the run loop's claim
// leaves alone (and makes due later) rows whose channel broadcast less than the conflation interval ago
// and that hold nothing urgent, a row released because a newer update arrived during its send is made due
// when the pacing allows, and the loop sleeps until the earliest due time it knows of (`DueSchedule`:
// ingested here, postponed, paced or released), not a whole poll interval. Claims keep a few milliseconds
// apart (`claimSpacing`), so a burst of urgent updates is claimed a few rows at a time.
//
// Per-channel memory (last aps.timestamp, last state sent, when, and the priority-10 budget) is kept
// in process and trusted only while the claim's `lastApsTimestamp` matches what this instance last
// sent; otherwise (another instance sent meanwhile, or after a restart) it is rebuilt from the
// database: the budget from the channel's accepted priority-10 deliveries of the last window, the
// previous state from the event's last broadcast update. So the budget holds across instances.
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
    private let recorder: BroadcastRecordBatcher
    private let deliveries: DeliveryRepository
    private let wakeup = Wakeup()
    /// Something asked for a claim (NOTIFY, `wake()`, shutdown, a send slot the loop waited for), as
    /// opposed to a wake-up that only moved the earliest due time earlier.
    private let claimRequested = Mutex(false)
    /// Every send slot was busy at the last turn of the loop: the next finished send asks for a claim.
    private let slotWanted = Mutex(false)
    private let sending = Mutex<Set<Int>>([])
    /// The claim tokens of the sends in flight, which `releaseClaims(of:keeping:)` leaves alone.
    private let claimsInFlight = Mutex<Set<UUID>>([])
    /// A claim statement's answer was lost, or a claim could not be given back: rows this instance claimed
    /// may be held with nobody sending them. The loop gives them back before its next claim.
    private let mayHoldOrphans = Mutex(false)
    /// When rows this instance postponed, paced, released or saw ingested (due later) become due.
    private let dueTimes = Mutex(DueSchedule(step: BroadcastDispatcherConfiguration.dueStep))
    private let memory: Mutex<ChannelMemoryTable>
    private let parking: CredentialsParking
    private let planner: BroadcastClaimPlanner

    /// `listenTo` is the database to LISTEN on for `marquee_outbox` (nil: poll only).
    public init(pool: PostgresPool, listenTo: PostgresConfiguration?, apns: any BroadcastChannelAPNs,
                catalog: any PipelineCatalog, configuration: BroadcastDispatcherConfiguration, metrics: PipelineMetrics,
                logger: Logger, clock: any WallClock = SystemWallClock()) {
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
        recorder = BroadcastRecordBatcher(outbox: outbox, now: databaseClock)
        deliveries = DeliveryRepository(pool: pool)
        memory = Mutex(ChannelMemoryTable(capacity: configuration.channelMemoryCapacity))
        parking = CredentialsParking(pool: pool, metrics: metrics, logger: self.logger, clock: clock)
        planner = BroadcastClaimPlanner(conflation: configuration.conflation, highPriorityBudget: configuration.highPriorityBudget,
                                        highPriorityWindow: configuration.highPriorityWindow)
    }

    /// The time passed to the database instead of its `now()`: the injected clock's with
    /// `clockDrivesDatabase` (tests), else nil. One closure, shared with the record batcher.
    private let databaseClock: @Sendable () -> Date?
    private var databaseNow: Date? { databaseClock() }

    // MARK: the service

    /// Outbox work was committed in this process: claims now rather than at the next poll, or, with
    /// `dueIn` (seconds, above 0), wakes when it is due.
    public func wake(dueIn: TimeInterval? = nil) {
        if let dueIn, dueIn > 0 { noteDue(after: dueIn) } else { requestClaim() }
    }

    private func requestClaim() {
        claimRequested.withLock { $0 = true }
        wakeup.signal()
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
        logger.info("dispatcher started", ["instance": .string(configuration.instance),
                                           "max_concurrent_sends": .int(configuration.maxConcurrentSends)])
        await withDiscardingTaskGroup { group in
            if let listener {
                group.addTask { [self] in
                    for await event in listener.events {
                        // This process's notifier woke us already, before it sent the NOTIFY.
                        if case .notification(let note) = event, note.payload == configuration.instance { continue }
                        requestClaim()
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
                    dueTimes.withLock { $0.removeDue(by: ContinuousClock.now) }
                    do {
                        if mayHoldOrphans.withLock({ $0 }) { try await releaseOrphanedClaims() }
                        let batch = try await outbox.claimBatch(instance: configuration.instance, limit: limit,
                                                                lease: configuration.claimLease,
                                                                pacing: configuration.conflation.pacing, now: databaseNow)
                        full = batch.taken == limit
                        claimFailures = 0
                        if let paced = batch.pacedUntil { noteDue(at: paced) }
                        if !batch.takenOver.isEmpty {
                            metrics.claimsTakenOver.increment(by: Double(batch.takenOver.count))
                            logger.info("claims taken over from instances whose heartbeat or lease lapsed",
                                        ["claims": .int(batch.takenOver.count),
                                         "holders": .string(Set(batch.takenOver).sorted().joined(separator: ","))])
                        }
                        await rememberChannels(of: batch.claims)
                        claimsInFlight.withLock { $0.formUnion(batch.claims.map(\.claimToken)) }
                        for claim in batch.claims {
                            group.addTask { [self] in
                                _ = await handle(claim, shutdown: shutdown)
                                // Only a loop short of slots needs to hear of it: what a send leaves due
                                // later (postponed, released) is in `dueTimes`.
                                if slotWanted.withLock({ wanted in defer { wanted = false }; return wanted }) { requestClaim() }
                            }
                        }
                    } catch {
                        // The database is away: back off up to 5 s, logging the first failure and every tenth.
                        // The claim may have run without its answer reaching us: its rows are freed before the next.
                        mayHoldOrphans.withLock { $0 = true }
                        claimFailures += 1
                        if claimFailures % 10 == 1 {
                            logger.error("outbox claim failed", ["error": .string("\(error)"), "failures": .int(claimFailures)])
                        }
                    }
                }
                let backoff = claimFailures == 0 ? configuration.pollInterval
                    : min(configuration.pollInterval * (1 << min(claimFailures, 6)), .seconds(5))
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
            if dueTimes, let due = self.dueTimes.withLock({ $0.earliest }) { end = min(end, due + .milliseconds(2)) }
            let left = end - ContinuousClock.now
            if left <= .zero { return }
            await wakeup.wait(upTo: left)
            if claimRequested.withLock({ requested in defer { requested = false }; return requested }) { return }
        }
    }

    /// Claims one batch and handles every claim in it (for tests and one-shot tools); returns the results.
    /// Unlike the run loop it claims rows that are too soon for the pacing too, so each due row gets a result.
    public func dispatchOnce(limit: Int? = nil) async throws -> [DispatchResult] {
        let claims = try await outbox.claim(instance: configuration.instance, limit: limit ?? configuration.claimBatch,
                                            lease: configuration.claimLease, now: databaseNow)
        await rememberChannels(of: claims)
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

    /// Remembers that a row becomes due `delay` seconds from now (the run loop wakes for it).
    private func noteDue(after delay: TimeInterval) {
        let time = ContinuousClock.now + .microseconds(Int64(max(0, delay) * 1_000_000))
        if dueTimes.withLock({ $0.insert(time) }) { wakeup.signal() }  // the waiting loop shortens its wait
    }

    /// How long from now until a channel that broadcast at `sentAt` may broadcast again.
    private func pacedDelay(sentAt: Date) -> TimeInterval {
        max(0, sentAt.addingTimeInterval(configuration.conflation.pacing).timeIntervalSince(clock.now))
    }

    /// `noteDue(after:)` for a due time on the dispatcher's clock.
    private func noteDue(at date: Date) { noteDue(after: date.timeIntervalSince(clock.now)) }

    /// Gives a claim back unsent, due after `delay`, and remembers when.
    @discardableResult
    private func postpone(_ claim: ClaimedBroadcast, by delay: TimeInterval) async throws -> Bool {
        let postponed = try await outbox.postpone(claim, by: delay, now: databaseNow)
        noteDue(after: delay)
        return postponed
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
            logger.error("broadcast failed", ["event": .int(claim.eventID), "channel": .int(claim.channelID),
                                              "error": .string("\(error)")])
            await giveBack(claim, by: configuration.retryBackoff.delay(attempt: claim.attempts + 1))
            return .abandoned
        }
    }

    /// Postpones a claim `persistently`; when even that fails, the loop frees it before its next claim.
    private func giveBack(_ claim: ClaimedBroadcast, by delay: TimeInterval) async {
        do {
            try await persistently(claim, "postpone") { try await postpone(claim, by: delay) }
        } catch {
            mayHoldOrphans.withLock { $0 = true }
        }
    }

    /// Runs a write of a claim's outcome until PostgreSQL takes it. A failure that a retry can mend (a lost
    /// connection, a server restarting or refusing connections) is tried again after a backoff (50 ms
    /// doubling up to 1 s, jittered) until the claim's lease would end (the row is anybody's then) or the
    /// task is cancelled; any other error is thrown at once. So a broadcast sent while the database went
    /// away is recorded, or its claim given back, as soon as the database answers again, not after the lease.
    @discardableResult
    private func persistently<T: Sendable>(_ claim: ClaimedBroadcast, _ write: String, _ body: () async throws -> T) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(max(0, claim.claimedUntil.timeIntervalSince(clock.now)))
        var failures = 0
        while true {
            do {
                let result = try await body()
                if failures > 0 {
                    logger.info("claim outcome written once the database answered again",
                                ["event": .int(claim.eventID), "write": .string(write), "failures": .int(failures)])
                }
                return result
            } catch let error as PostgresError where error.isRetryable {
                failures += 1
                let delay = Self.writeBackoff.delay(attempt: failures)
                guard !Task.isCancelled, ContinuousClock.now + .seconds(delay) < deadline else { throw error }
                if failures == 1 {
                    logger.warning("claim outcome not written; retrying until the database answers",
                                   ["event": .int(claim.eventID), "write": .string(write), "error": .string("\(error)")])
                }
                try await Task.sleep(for: .seconds(delay))
            }
        }
    }

    /// The backoff of `persistently`.
    private static let writeBackoff = RetryBackoff(base: 0.05, maximum: 1)

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
            try await persistently(claim, "park") { try await postpone(claim, by: max(0.01, until.timeIntervalSince(now))) }
            return .parked(until: until)
        }
        var remembered = memory.withLock { $0.entry(channelID: claim.channelID, lastApsTimestamp: claim.lastApsTimestamp) }
        if remembered == nil { remembered = try await loadMemory(claim) }
        let facts = ClaimFacts(claim: claim, memory: remembered,
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
                claim, delivery: DeliveryDraft(appID: claim.appID, kind: .broadcast, channelID: claim.channelID, updateID: claim.update.id,
                                               status: nil, reason: "not sent: \(refusal)", attempt: claim.attempts + 1),
                channelNotRegistered: false, now: databaseNow)
            logger.error("broadcast refused locally", ["event": .int(claim.eventID), "update": .int(claim.update.id), "error": .string(refusal)])
            return .rejected(refusal)
        case .send(let planned):
            return try await send(planned, claim: claim, lastState: remembered?.lastState, now: now, shutdown: shutdown)
        }
    }

    /// Sends a planned broadcast and performs what its answer asks for.
    private func send(_ planned: PlannedBroadcast, claim: ClaimedBroadcast, lastState: JSONValue?, now: Date,
                      shutdown: ShutdownSignal?) async throws -> DispatchResult {
        if planned.droppedAlert {
            metrics.alertsDropped.increment()
            logger.warning("carried alert dropped to fit the broadcast limit", ["event": .int(claim.eventID), "update": .int(claim.update.id)])
        }
        guard let app = try await catalog.app(id: claim.appID) else { throw DispatcherError.unknownApp(claim.appID) }
        let outcome: ChannelAPNsOutcome
        do {
            outcome = try await apns.broadcast(app: app, channelID: claim.apnsChannelID, payload: planned.body,
                                               expiration: configuration.expiration.expiration(for: claim.storagePolicy, now: now),
                                               priority: planned.priority)
        } catch {
            if Task.isCancelled || shutdown?.isTriggered == true {
                // Unstructured, so a cancelled task still gives the row back.
                try? await Task { [outbox] in try await outbox.release([claim]) }.value
                return .released
            }
            outcome = ChannelAPNsOutcome(ChannelAPNsAttempt(result: APNsResult(transportFailure: .io("not sent: \(error)"))))
        }
        let label = String(planned.priority.rawValue)
        for attempt in outcome.attempts {
            metrics.apnsAnswers.increment(["broadcast", attempt.result.acceptance != nil ? "ok" : attempt.reasonText ?? "unknown"])
        }
        var attempts = outcome.attempts.isEmpty ? [ChannelAPNsAttempt(result: outcome.result)] : outcome.attempts
        let last = attempts.removeLast()
        func delivery(_ attempt: ChannelAPNsAttempt, number: Int) -> DeliveryDraft {
            attempt.delivery(appID: claim.appID, kind: .broadcast, channelID: claim.channelID, updateID: claim.update.id,
                             priority: planned.priority.rawValue, attempt: claim.attempts + number, apsTimestamp: planned.apsTimestamp)
        }
        // The earlier attempts' rows go in after the outcome is recorded: the outcome is what matters.
        func withEarlierAttempts(_ result: DispatchResult) async -> DispatchResult {
            for (index, attempt) in attempts.enumerated() {
                do {
                    try await deliveries.insert(delivery(attempt, number: index + 1))
                } catch {
                    logger.warning("delivery row of an earlier attempt not recorded", ["error": .string("\(error)")])
                }
            }
            return result
        }
        let final = delivery(last, number: attempts.count + 1)
        let logFields: KeyValuePairs<String, LogValue> = [
            "event": .int(claim.eventID), "channel": .int(claim.channelID), "update": .int(claim.update.id),
            "priority": .int(planned.priority.rawValue), "aps_timestamp": .int(planned.apsTimestamp),
        ]

        switch planner.afterAnswer(outcome.result, retryDelay: configuration.retryBackoff.delay(attempt: claim.attempts + 1)) {
        case .record:
            let recorded: BroadcastOutcome
            do {
                // A newer update that arrived during the send is due when the pacing allows (at once if urgent).
                let record = BroadcastRecord(claim: claim, delivery: final, apsTimestamp: planned.apsTimestamp,
                                             nextAttemptDelay: pacedDelay(sentAt: now), sentAt: now)
                recorded = try await persistently(claim, "broadcast") { try await recorder.record(record) }
            } catch PipelineError.apsTimestampNotIncreasing {
                // Another instance sent a later timestamp meanwhile: send again with a new one.
                memory.withLock { $0.forget(channelID: claim.channelID) }
                try await postpone(claim, by: 0)
                logger.warning("aps.timestamp overtaken; sending again", logFields)
                return .abandoned
            }
            await parking.succeeded(app)
            if planned.downgraded {
                metrics.priorityDowngrades.increment()
                logger.info("priority downgraded by the channel budget", logFields)
            }
            metrics.broadcasts.increment([label, "accepted"])
            metrics.conflated.increment(by: Double(planned.conflated))
            metrics.ingestToAccepted.observe(max(0, clock.now.timeIntervalSince(claim.update.receivedAt)))
            memory.withLock {
                if claim.update.action == .end {
                    $0.forget(channelID: claim.channelID)
                } else {
                    $0.store(channelID: claim.channelID, ChannelMemory(lastApsTimestamp: planned.apsTimestamp, lastState: claim.update.contentState,
                                                                       lastSentAt: now, budget: planned.budget))
                }
            }
            if claim.update.action == .end { logger.info("end broadcast accepted; channel ended", logFields) }
            if recorded == .newerPending { noteDue(after: pacedDelay(sentAt: now)) }
            if recorded == .claimLost { logger.warning("claim lost while sending; broadcast recorded", logFields) }
            return await withEarlierAttempts(.sent(updateID: claim.update.id, priority: planned.priority, apsTimestamp: planned.apsTimestamp))

        case .channelLost:
            try await persistently(claim, "channel lost") {
                try await outbox.recordPermanentFailure(claim, delivery: final, channelNotRegistered: true, now: databaseNow)
            }
            memory.withLock { $0.forget(channelID: claim.channelID) }
            metrics.broadcasts.increment([label, "channel_lost"])
            logger.error("APNs no longer knows the channel; event flagged channel_lost, broadcasting stopped",
                         ["event": .int(claim.eventID), "channel": .int(claim.channelID),
                          "apns_channel_id": .string(claim.apnsChannelID), "update": .int(claim.update.id)])
            return await withEarlierAttempts(.channelLost)

        case .reject(let reason):
            try await persistently(claim, "rejection") {
                try await outbox.recordPermanentFailure(claim, delivery: final, channelNotRegistered: false, now: databaseNow)
            }
            metrics.broadcasts.increment([label, "rejected"])
            logger.error("APNs refused the broadcast", ["event": .int(claim.eventID), "update": .int(claim.update.id),
                                                        "reason": .string(outcome.failure.map { "\($0)" } ?? reason)])
            return await withEarlierAttempts(.rejected(reason))

        case .parkApp(let failure):
            // The app's key or certificate, not this broadcast: the row waits with every other of the app's.
            let park = try await parking.refused(app, failure: failure)
            let delay = max(0.01, park.retryAt.timeIntervalSince(clock.now))
            try await persistently(claim, "credentials park") {
                try await outbox.recordRetryableFailure(claim, delivery: final, retryAfter: delay, now: databaseNow)
            }
            noteDue(after: delay)
            metrics.broadcasts.increment([label, "parked"])
            return await withEarlierAttempts(.parked(until: park.retryAt))

        case .retry(let delay):
            try await persistently(claim, "retryable failure") {
                try await outbox.recordRetryableFailure(claim, delivery: final, retryAfter: delay, now: databaseNow)
            }
            noteDue(after: delay)
            metrics.broadcasts.increment([label, "retryable"])
            metrics.retries.increment(["broadcast"])
            logger.warning("broadcast failed; retrying after backoff",
                           ["event": .int(claim.eventID), "update": .int(claim.update.id),
                            "reason": .string(outcome.failure.map { "\($0)" } ?? "unknown"),
                            "retry_in_seconds": .double(delay), "attempt": .int(claim.attempts + 1)])
            return await withEarlierAttempts(.retryScheduled)
        }
    }

    /// The channel's memory rebuilt from the database (see `loadMemories`).
    private func loadMemory(_ claim: ClaimedBroadcast) async throws -> ChannelMemory {
        try await loadMemories([claim])[claim.channelID]!
    }

    /// Rebuilds the memories of a claim batch's channels that this instance lacks (after a start, every
    /// channel's first claim), so its sends find them; on failure each send loads its own when it needs it.
    private func rememberChannels(of claims: [ClaimedBroadcast]) async {
        let missing = memory.withLock { table in
            claims.filter { table.entry(channelID: $0.channelID, lastApsTimestamp: $0.lastApsTimestamp) == nil }
        }
        guard !missing.isEmpty else { return }
        do {
            let loaded = try await loadMemories(missing)
            memory.withLock { table in for (channelID, channel) in loaded { table.store(channelID: channelID, channel) } }
        } catch {
            logger.debug("channel memories not loaded; each send loads its own", ["error": .string("\(error)")])
        }
    }

    /// Channel memories rebuilt from the database, by channel id, with two statements for any number of
    /// claims: each event's last broadcast state and each channel's accepted priority-10 broadcasts
    /// inside the budget window.
    private func loadMemories(_ claims: [ClaimedBroadcast]) async throws -> [Int: ChannelMemory] {
        let states = try await EventRepository(pool: pool).lastBroadcastStates(eventIDs: claims.map(\.eventID))
        let sends = try await deliveries.highPrioritySends(channelIDs: claims.map(\.channelID),
                                                           since: clock.now.addingTimeInterval(-configuration.highPriorityWindow))
        var memories: [Int: ChannelMemory] = [:]
        for claim in claims {
            memories[claim.channelID] = ChannelMemory(
                lastApsTimestamp: claim.lastApsTimestamp, lastState: states[claim.eventID], lastSentAt: nil,
                budget: HighPriorityBudget(limit: configuration.highPriorityBudget, window: configuration.highPriorityWindow,
                                           sends: sends[claim.channelID] ?? []))
        }
        return memories
    }
}
