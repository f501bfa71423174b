// The channel scheduler's requests to APNs (create, delete, list) and what their answers change: each answer
// is read into a `CreateAnswer` or `DeleteAnswer`, the lifecycle decides the step, and `perform` writes it
// and does what its action asks for. Every request is a delivery row; every write is guarded by the state
// read (and, in a sweep, by the scheduler's lease), so a stale writer changes nothing. Operators' requests
// (`fence` nil) go at once; a sweep's wait while APNs refuses the app's credentials (`CredentialsParking`).
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres

/// Creates, deletes and reconciles channels at APNs for the scheduler and its operator actions.
final class ChannelRequests: Sendable {
    /// A channel's last error while its app is parked: APNs' 403 and its reason.
    static func parkedError(_ reason: String) -> String { "APNs answered 403 \(reason)" }

    let configuration: ChannelSchedulerConfiguration
    private let pool: PostgresPool
    let apns: any BroadcastChannelAPNs
    let catalog: any PipelineCatalog
    let metrics: PipelineMetrics
    let logger: Logger
    let clock: any WallClock
    let channels: ChannelRepository
    private let deliveries: DeliveryRepository
    let parking: CredentialsParking

    init(
        configuration: ChannelSchedulerConfiguration, pool: PostgresPool, apns: any BroadcastChannelAPNs, catalog: any PipelineCatalog,
        metrics: PipelineMetrics, logger: Logger, clock: any WallClock, parking: CredentialsParking
    ) {
        self.configuration = configuration
        self.pool = pool
        self.apns = apns
        self.catalog = catalog
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        channels = ChannelRepository(pool: pool)
        deliveries = DeliveryRepository(pool: pool)
        self.parking = parking
    }

    var databaseNow: Date? { configuration.clockDrivesDatabase ? clock.now : nil }

    // MARK: one place performs a step

    /// Writes a lifecycle step (`error` and `nextAttemptAt` with it) and does what its action asks: a request
    /// for `createChannel` and `deleteChannel` (which write their own step as they send), the operator's flags.
    /// A step into `lost` or `open` stops or resumes the event's broadcasts with it (`ChannelLifecycle.broadcasts`).
    /// `.scheduleRetry` needs `nextAttemptAt`; `.reconcile` is the create's unknown outcome.
    func perform(
        _ step: ChannelStep, apnsChannelID: String? = nil, error: String? = nil, nextAttemptAt: Date? = nil,
        fence: LeaseGrant?, report: inout SweepReport
    ) async throws {
        let channel = step.channel
        switch step.action {
        case .createChannel(let attempt):
            try await create(step, attempt: attempt, fence: fence, report: &report)
            return
        case .deleteChannel:
            try await delete(step, fence: fence, report: &report)
            return
        default:
            break
        }
        try await channels.transition(
            channelID: channel.id, from: step.before, to: step.after, nextAttemptAt: nextAttemptAt,
            apnsChannelID: apnsChannelID, error: error, fence: fence, now: databaseNow,
            broadcasts: ChannelLifecycle.broadcasts(from: step.before.state, to: step.after.state))
        switch step.action {
        case .flagLost:
            report.lost.append(channel.id)
            metrics.schedulerActions.increment(["lost"])
            logger.error(
                "APNs no longer knows the channel; event flagged channel_lost",
                [
                    "channel": .int(channel.id), "event": .int(channel.eventID ?? 0), "apns_channel_id": .string(channel.apnsChannelID ?? ""),
                    "reason": .string(error ?? ""),
                ])
        case .flagCreateFailed:
            report.createsFailed.append(channel.id)
            metrics.schedulerActions.increment(["create_failed"])
            logger.error(
                "APNs refused to create the channel; an operator must act (marquee channel recreate)",
                ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0), "reason": .string(error ?? "")])
        case .reconcile:
            report.createsUnknown.append(channel.id)
            metrics.schedulerActions.increment(["create_unknown"])
            logger.warning("channel create unanswered; reconcile will settle it", ["channel": .int(channel.id)])
        case .scheduleRetry, .sendEndBroadcast, .nothing, .createChannel, .deleteChannel:
            // A retry's time is in `nextAttemptAt`; the end broadcast is queued in the outbox by the ingest.
            break
        }
    }

    /// Advances `channel` by `event` from the lifecycle read with it and performs the step.
    func advance(
        _ channel: ChannelRecord, from before: ChannelLifecycle, by event: (inout ChannelLifecycle) throws -> ChannelLifecycle.Action,
        error: String? = nil, fence: LeaseGrant?, report: inout SweepReport
    ) async throws {
        var after = before
        let action = try event(&after)
        try await perform(ChannelStep(channel: channel, before: before, after: after, action: action), error: error, fence: fence, report: &report)
    }

    // MARK: creates

    /// Creates the channel at APNs (after the quota check) and records the lifecycle step it leads to.
    private func create(_ step: ChannelStep, attempt: Int, fence: LeaseGrant?, report: inout SweepReport) async throws {
        guard let admission = try await admitCreate(step, attempt: attempt, fence: fence, report: &report) else { return }
        try await send(admission, fence: fence, report: &report)
    }

    /// A create that passed the quota and is recorded as in flight (`creating`), ready to go to APNs.
    struct AdmittedCreate: Sendable {
        var channel: ChannelRecord
        var app: PipelineApp
        var creating: ChannelLifecycle
        var attempt: Int
        /// Channels counted against the quota besides this one when it was admitted.
        var inUse: Int
    }

    /// Weighs a create against the app's quota (refusing it past the quota) and moves the channel to
    /// `creating`, which counts it; nil when refused, parked, or when another writer moved the channel first.
    func admitCreate(_ step: ChannelStep, attempt: Int, fence: LeaseGrant?, report: inout SweepReport) async throws -> AdmittedCreate? {
        let (channel, before) = (step.channel, step.before)
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
            try await refuseForQuota(channel, state: before, app: app, error: error.description, fence: fence, report: &report)
            return nil
        }
        guard
            try await channels.transition(
                channelID: channel.id, from: before, to: step.after, inFlightTimeout: configuration.inFlightTimeout,
                fence: fence, now: databaseNow)
        else { return nil }
        return AdmittedCreate(channel: channel, app: app, creating: step.after, attempt: attempt, inUse: inUse)
    }

    /// Sends admitted creates, `createConcurrency` at a time; returns what they did. A lost lease or
    /// cancellation ends it and cancels the creates in flight (a channel left `creating` is retried after
    /// `inFlightTimeout`); any other failure of one is logged.
    func sendCreates(_ admitted: [AdmittedCreate], fence: LeaseGrant?) async throws -> SweepReport {
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

    /// Asks APNs to create an admitted channel and performs the step its answer leads to.
    private func send(_ admission: AdmittedCreate, fence: LeaseGrant?, report: inout SweepReport) async throws {
        let (channel, app, creating) = (admission.channel, admission.app, admission.creating)
        let outcome = await call("channel_create") { try await apns.createChannel(app: app, storagePolicy: channel.storagePolicy) }
        try await record(outcome, kind: .channelCreate, appID: channel.appID, channelID: channel.id, firstAttempt: admission.attempt)
        var next = creating
        switch CreateAnswer(outcome, backoff: configuration.retryBackoff.delay(attempt: creating.attempt)) {
        case .opened(let id):
            let action = try next.createSucceeded()
            try await perform(
                ChannelStep(channel: channel, before: creating, after: next, action: action), apnsChannelID: id, fence: fence,
                report: &report)
            await parking.succeeded(app)
            report.opened.append(channel.id)
            metrics.schedulerActions.increment(["open"])
            logger.info("channel opened", ["channel": .int(channel.id), "event": .int(channel.eventID ?? 0), "apns_channel_id": .string(id)])
        case .quotaExhausted:
            try await refuseForQuota(
                channel, state: creating, app: app,
                error: "channel quota exhausted: APNs refused to create a channel (CannotCreateChannelConfig) "
                    + "with \(admission.inUse) of \(configuration.quota.limit) channels counted here; "
                    + "delete ended channels or reconcile unknown ones before creating more",
                fence: fence, report: &report)
        case .refusedForGood(let failure):
            let action = try next.createFailedPermanently()
            try await perform(
                ChannelStep(channel: channel, before: creating, after: next, action: action), error: failure, fence: fence,
                report: &report)
        case .parkApp(let reason):
            // The app's key, not this create: it waits with the app's other work, and stays a retry.
            let park = try await parking.refused(app, reason: reason)
            let action = try next.createFailedRetryable()
            try await perform(
                ChannelStep(channel: channel, before: creating, after: next, action: action), error: Self.parkedError(reason),
                nextAttemptAt: park.retryAt, fence: fence, report: &report)
            report.parked.append(channel.id)
        case .unknown(let failure):
            // Written and unanswered: APNs may have made the channel, so it is not created again before a reconcile tells.
            let action = try next.createTimedOut()
            try await perform(
                ChannelStep(channel: channel, before: creating, after: next, action: action),
                error: "create unanswered: \(failure)", fence: fence, report: &report)
        case .retry(let failure, let delay):
            let action = try next.createFailedRetryable()
            try await perform(
                ChannelStep(channel: channel, before: creating, after: next, action: action), error: failure,
                nextAttemptAt: clock.now.addingTimeInterval(delay), fence: fence, report: &report)
            report.createRetries.append(channel.id)
            metrics.retries.increment(["channel_create"])
            logger.warning(
                "channel create failed; retrying after backoff",
                ["channel": .int(channel.id), "reason": .string(failure), "retry_in_seconds": .double(delay)])
        }
    }

    /// Leaves the channel where it was (planned, or creating waiting for a retry) with the quota error.
    private func refuseForQuota(
        _ channel: ChannelRecord, state: ChannelLifecycle, app: PipelineApp, error: String, fence: LeaseGrant?,
        report: inout SweepReport
    ) async throws {
        let retryAt: Date? = state.state == .creating ? clock.now.addingTimeInterval(configuration.quotaRetryDelay) : nil
        try await channels.transition(
            channelID: channel.id, from: state, to: state, nextAttemptAt: retryAt, error: error,
            fence: fence, now: databaseNow)
        report.quotaRefused.append(channel.id)
        for label in PipelineMetrics.appLabels(app) { metrics.quotaRefusals.increment([label]) }
        if channel.lastError != error {
            logger.error(
                "channel not created: quota",
                [
                    "channel": .int(channel.id), "event": .int(channel.eventID ?? 0),
                    "app": .string("\(app.bundleID)/\(app.environment)"), "error": .string(error),
                ])
        }
    }

    // MARK: deletes

    /// Deletes the channel at APNs and performs the step its answer leads to (deleted, or a retry).
    private func delete(_ step: ChannelStep, fence: LeaseGrant?, report: inout SweepReport) async throws {
        let (channel, before, deleting) = (step.channel, step.before, step.after)
        guard let app = try await catalog.app(id: channel.appID), let apnsID = channel.apnsChannelID else { return }
        if fence != nil, let until = await parking.heldUntil(appID: app.id) {
            // A sweep's delete waits for the app's credentials (an operator's goes now).
            try await channels.transition(channelID: channel.id, from: before, to: deleting, nextAttemptAt: until, fence: fence, now: databaseNow)
            report.parked.append(channel.id)
            return
        }
        guard
            try await channels.transition(
                channelID: channel.id, from: before, to: deleting, inFlightTimeout: configuration.inFlightTimeout,
                fence: fence, now: databaseNow)
        else { return }
        let outcome = await call("channel_delete") { try await apns.deleteChannel(app: app, channelID: apnsID) }
        try await record(outcome, kind: .channelDelete, appID: channel.appID, channelID: channel.id, firstAttempt: deleting.attempt)
        var next = deleting
        let gone: ChannelLifecycle.Action
        switch DeleteAnswer(outcome, backoff: configuration.retryBackoff.delay(attempt: deleting.attempt)) {
        case .deleted:
            gone = try next.deleteSucceeded()
            await parking.succeeded(app)
        case .notRegistered:
            gone = try next.channelNotRegistered()
        case .parkApp(let reason):
            let park = try await parking.refused(app, reason: reason)
            let action = try next.deleteFailed()
            try await perform(
                ChannelStep(channel: channel, before: deleting, after: next, action: action), error: Self.parkedError(reason),
                nextAttemptAt: park.retryAt, fence: fence, report: &report)
            report.parked.append(channel.id)
            return
        case .retry(let failure, let delay):
            let action = try next.deleteFailed()
            try await perform(
                ChannelStep(channel: channel, before: deleting, after: next, action: action), error: failure,
                nextAttemptAt: clock.now.addingTimeInterval(delay), fence: fence, report: &report)
            metrics.retries.increment(["channel_delete"])
            logger.warning(
                "channel delete failed; retrying after backoff",
                ["channel": .int(channel.id), "reason": .string(failure), "retry_in_seconds": .double(delay)])
            return
        }
        try await perform(ChannelStep(channel: channel, before: deleting, after: next, action: gone), fence: fence, report: &report)
        report.deleted.append(channel.id)
        metrics.schedulerActions.increment(["delete"])
        logger.info("channel deleted", ["channel": .int(channel.id), "apns_channel_id": .string(apnsID)])
    }

    /// Starts deleting an unknown channel (in Apple's list, never made here): it is driven from `deleting`
    /// with attempt 1 from then on.
    func deleteUnknown(_ channel: ChannelRecord, fence: LeaseGrant?, report: inout SweepReport) async throws -> Bool {
        guard
            try await channels.beginDeletingUnknown(
                channelID: channel.id, inFlightTimeout: configuration.inFlightTimeout,
                fence: fence, now: databaseNow)
        else { return false }
        let deleting = ChannelLifecycle(state: .deleting, attempt: 1)
        try await delete(
            ChannelStep(channel: channel, before: deleting, after: deleting, action: .deleteChannel(attempt: 1)),
            fence: fence, report: &report)
        return true
    }

    // MARK: helpers

    /// Runs an APNs call; a call that could not be made at all becomes a transient I/O failure.
    func call(_ operation: String, _ body: () async throws -> APNsExchange) async -> APNsExchange {
        let outcome: APNsExchange
        do {
            outcome = try await body()
        } catch {
            outcome = APNsExchange(APNsExchangeAttempt(result: APNsResult(transportFailure: .io("not sent: \(error)"))))
        }
        for attempt in outcome.attempts {
            metrics.apnsAnswers.increment([operation, attempt.result.acceptance != nil ? "ok" : attempt.reasonText ?? "unknown"])
        }
        return outcome
    }

    /// One delivery row per attempt.
    func record(_ outcome: APNsExchange, kind: DeliveryKind, appID: Int, channelID: Int?, firstAttempt: Int) async throws {
        let attempts = outcome.attempts.isEmpty ? [APNsExchangeAttempt(result: outcome.result)] : outcome.attempts
        for (index, attempt) in attempts.enumerated() {
            try await deliveries.insert(
                attempt.delivery(
                    appID: appID, kind: kind, channelID: channelID,
                    attempt: max(1, firstAttempt) + index))
        }
    }

    /// Runs one item of a sweep: a lost lease or cancellation ends the sweep, anything else is logged.
    func isolated(_ what: String, _ id: Int, _ body: () async throws -> Void) async throws {
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
}
