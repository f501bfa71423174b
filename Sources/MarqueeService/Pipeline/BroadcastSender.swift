// Sending and recording for the dispatcher: a broadcast the planner decided goes to APNs, and what the
// answer asks for (`BroadcastClaimPlanner.afterAnswer`) is performed, every outcome written `persistently`
// (as soon as PostgreSQL takes it). It also keeps the channels' memory (last aps.timestamp, last state sent,
// when, and the priority-10 budget), trusted only while a claim's `lastApsTimestamp` matches what this
// instance last sent, and otherwise rebuilt from the database.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Sends planned broadcasts, records their answers, and remembers the channels it sent on.
final class BroadcastSender: Sendable {
    private let pool: PostgresPool
    private let apns: any BroadcastChannelAPNs
    private let catalog: any PipelineCatalog
    private let configuration: BroadcastDispatcherConfiguration
    private let planner: BroadcastClaimPlanner
    private let parking: CredentialsParking
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let clock: any WallClock
    private let outbox: OutboxRepository
    private let recorder: BroadcastRecordBatcher
    private let deliveries: DeliveryRepository
    private let memory: Mutex<ChannelMemoryTable>
    private let databaseClock: @Sendable () -> Date?
    /// When rows this instance postponed, paced, released or saw ingested (due later) become due; the run loop
    /// waits for the earliest, woken by `wakeup` when one is set earlier.
    let dueTimes = Mutex(DueSchedule(step: BroadcastDispatcherConfiguration.dueStep))
    private let wakeup: Wakeup

    init(
        pool: PostgresPool, apns: any BroadcastChannelAPNs, catalog: any PipelineCatalog, configuration: BroadcastDispatcherConfiguration,
        planner: BroadcastClaimPlanner, parking: CredentialsParking, metrics: PipelineMetrics, logger: Logger, clock: any WallClock,
        databaseClock: @escaping @Sendable () -> Date?, wakeup: Wakeup
    ) {
        self.pool = pool
        self.apns = apns
        self.catalog = catalog
        self.configuration = configuration
        self.planner = planner
        self.parking = parking
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.databaseClock = databaseClock
        self.wakeup = wakeup
        outbox = OutboxRepository(pool: pool)
        recorder = BroadcastRecordBatcher(outbox: outbox, now: databaseClock)
        deliveries = DeliveryRepository(pool: pool)
        memory = Mutex(ChannelMemoryTable(capacity: configuration.channelMemoryCapacity))
    }

    private var databaseNow: Date? { databaseClock() }

    /// Remembers that a row becomes due `delay` seconds from now; wakes the run loop when that is earlier than it waits for.
    func noteDue(after delay: TimeInterval) {
        let time = ContinuousClock.now + .microseconds(Int64(max(0, delay) * 1_000_000))
        if dueTimes.withLock({ $0.insert(time) }) { wakeup.signal() }
    }

    /// Gives a claim back unsent, due after `delay`, and tells the run loop when.
    @discardableResult
    func postpone(_ claim: ClaimedBroadcast, by delay: TimeInterval) async throws -> Bool {
        let postponed = try await outbox.postpone(claim, by: delay, now: databaseNow)
        noteDue(after: delay)
        return postponed
    }

    /// How long from now until a channel that broadcast at `sentAt` may broadcast again.
    private func pacedDelay(sentAt: Date) -> TimeInterval {
        max(0, sentAt.addingTimeInterval(configuration.conflation.pacing).timeIntervalSince(clock.now))
    }

    /// What this instance remembers of the claim's channel, or rebuilt from the database.
    func memory(of claim: ClaimedBroadcast) async throws -> ChannelMemory {
        if let remembered = memory.withLock({ $0.entry(channelID: claim.channelID, lastApsTimestamp: claim.lastApsTimestamp) }) {
            return remembered
        }
        return try await loadMemory(claim)
    }

    /// Sends a planned broadcast and performs what its answer asks for.
    func send(_ planned: PlannedBroadcast, claim: ClaimedBroadcast, now: Date, shutdown: ShutdownSignal?) async throws -> DispatchResult {
        if planned.droppedAlert {
            metrics.alertsDropped.increment()
            logger.warning("carried alert dropped to fit the broadcast limit", ["event": .int(claim.eventID), "update": .int(claim.update.id)])
        }
        guard let app = try await catalog.app(id: claim.appID) else { throw DispatcherError.unknownApp(claim.appID) }
        let outcome: APNsExchange
        do {
            outcome = try await apns.broadcast(
                app: app, channelID: claim.apnsChannelID, payload: planned.body,
                expiration: configuration.expiration.expiration(for: claim.storagePolicy, now: now),
                priority: planned.priority)
        } catch {
            if Task.isCancelled || shutdown?.isTriggered == true {
                // Unstructured, so a cancelled task still gives the row back.
                try? await Task { [outbox] in try await outbox.release([claim]) }.value
                return .released
            }
            outcome = APNsExchange(APNsExchangeAttempt(result: APNsResult(transportFailure: .io("not sent: \(error)"))))
        }
        let label = String(planned.priority.rawValue)
        for attempt in outcome.attempts {
            metrics.apnsAnswers.increment(["broadcast", attempt.result.acceptance != nil ? "ok" : attempt.reasonText ?? "unknown"])
        }
        var attempts = outcome.attempts.isEmpty ? [APNsExchangeAttempt(result: outcome.result)] : outcome.attempts
        let last = attempts.removeLast()
        func delivery(_ attempt: APNsExchangeAttempt, number: Int) -> DeliveryDraft {
            attempt.delivery(
                appID: claim.appID, kind: .broadcast, channelID: claim.channelID, updateID: claim.update.id,
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

        switch planner.afterAnswer(outcome.verdict, retryDelay: configuration.retryBackoff.delay(attempt: claim.attempts + 1)) {
        case .record:
            let recorded: BroadcastOutcome
            do {
                // A newer update that arrived during the send is due when the pacing allows (at once if urgent).
                let record = BroadcastRecord(
                    claim: claim, delivery: final, apsTimestamp: planned.apsTimestamp,
                    nextAttemptDelay: pacedDelay(sentAt: now), sentAt: now, alertUpdateID: planned.alertUpdateID)
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
                    $0.store(
                        channelID: claim.channelID,
                        ChannelMemory(
                            lastApsTimestamp: planned.apsTimestamp, lastState: claim.update.contentState,
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
            logger.error(
                "APNs no longer knows the channel; event flagged channel_lost, broadcasting stopped",
                [
                    "event": .int(claim.eventID), "channel": .int(claim.channelID),
                    "apns_channel_id": .string(claim.apnsChannelID), "update": .int(claim.update.id),
                ])
            return await withEarlierAttempts(.channelLost)

        case .reject(let reason):
            try await persistently(claim, "rejection") {
                try await outbox.recordPermanentFailure(claim, delivery: final, channelNotRegistered: false, now: databaseNow)
            }
            metrics.broadcasts.increment([label, "rejected"])
            logger.error(
                "APNs refused the broadcast",
                [
                    "event": .int(claim.eventID), "update": .int(claim.update.id),
                    "reason": .string(outcome.failure.map { "\($0)" } ?? reason),
                ])
            return await withEarlierAttempts(.rejected(reason))

        case .parkApp(let reason):
            // The app's key or certificate, not this broadcast: the row waits with every other of the app's.
            let park = try await parking.refused(app, reason: reason)
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
            logger.warning(
                "broadcast failed; retrying after backoff",
                [
                    "event": .int(claim.eventID), "update": .int(claim.update.id),
                    "reason": .string(outcome.failure.map { "\($0)" } ?? "unknown"),
                    "retry_in_seconds": .double(delay), "attempt": .int(claim.attempts + 1),
                ])
            return await withEarlierAttempts(.retryScheduled)
        }
    }

    /// Runs a write of a claim's outcome until PostgreSQL takes it (`DurableWrite`), until the claim's lease would
    /// end (the row is anybody's then). So a broadcast sent while the database went away is recorded, or its claim
    /// given back, as soon as the database answers again, not after the lease.
    @discardableResult
    func persistently<T: Sendable>(_ claim: ClaimedBroadcast, _ write: String, _ body: () async throws -> T) async throws -> T {
        try await DurableWrite.run(
            until: ContinuousClock.now + .seconds(max(0, claim.claimedUntil.timeIntervalSince(clock.now))),
            logger: logger.with(["event": .int(claim.eventID), "write": .string(write)]), body)
    }

    /// The channel's memory rebuilt from the database (see `loadMemories`).
    private func loadMemory(_ claim: ClaimedBroadcast) async throws -> ChannelMemory {
        try await loadMemories([claim])[claim.channelID]!
    }

    /// Rebuilds the memories of a claim batch's channels that this instance lacks (after a start, every
    /// channel's first claim), so its sends find them; on failure each send loads its own when it needs it.
    func rememberChannels(of claims: [ClaimedBroadcast]) async {
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
        let sends = try await deliveries.highPrioritySends(
            channelIDs: claims.map(\.channelID),
            since: clock.now.addingTimeInterval(-configuration.highPriorityWindow))
        var memories: [Int: ChannelMemory] = [:]
        for claim in claims {
            memories[claim.channelID] = ChannelMemory(
                lastApsTimestamp: claim.lastApsTimestamp, lastState: states[claim.eventID], lastSentAt: nil,
                budget: HighPriorityBudget(
                    limit: configuration.highPriorityBudget, window: configuration.highPriorityWindow,
                    sends: sends[claim.channelID] ?? []))
        }
        return memories
    }
}
