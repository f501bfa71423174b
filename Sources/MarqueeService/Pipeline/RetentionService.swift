// Retention: what Marquee keeps only for a while is deleted here, in bounded statements. Every tick, the
// delivery rows (one per APNs exchange) that fell out of `deliveryRetention` since the last, so the deletes
// are spread evenly; every hour, idempotency keys past their 24 hours, the updates of events ended past
// `updateRetention` (their counts by disposition kept), the heartbeats of instances gone for a day,
// push-to-start tokens no app sent again within `tokenMaxAge`, and recorded token refusals and the start runs
// of events over (their starts) older than `deliveryRetention`. Every minute, it samples the audience
// registry's gauges (installations by app and state, recorded token invalidations).
// It runs on the instance that leads the channel scheduler, so instances do not delete the same rows.
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres

/// Deletes rows past their retention while this instance leads the scheduler.
public final class RetentionService: Service {
    public let name = "retention"
    private let pool: PostgresPool
    private let configuration: ChannelSchedulerConfiguration
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let clock: any WallClock
    private let leads: @Sendable () -> Bool

    /// `leads` says whether this instance leads the scheduler now.
    public init(
        pool: PostgresPool, configuration: ChannelSchedulerConfiguration, metrics: PipelineMetrics, logger: Logger, clock: any WallClock,
        leads: @escaping @Sendable () -> Bool
    ) {
        self.pool = pool
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger.with(["service": "retention"])
        self.clock = clock
        self.leads = leads
    }

    public func run(until shutdown: ShutdownSignal) async throws {
        let wakeup = Wakeup()
        let bridge = Task {
            await shutdown.wait()
            wakeup.signal()
        }
        defer { bridge.cancel() }
        var lastHourly: Date?
        var lastSample: Date?
        while !shutdown.isTriggered && !Task.isCancelled {
            if leads() {
                let hourly = lastHourly.map { clock.now.timeIntervalSince($0) >= configuration.reconcileInterval } ?? true
                await purge(hourly: hourly)
                if hourly { lastHourly = clock.now }
                if lastSample.map({ clock.now.timeIntervalSince($0) >= configuration.audienceSampleInterval }) ?? true {
                    await sampleAudience()
                    lastSample = clock.now
                }
            }
            await wakeup.wait(upTo: configuration.tickInterval)
        }
    }

    /// One pass: the delivery rows, and with `hourly` the rest. A failure of one purge is logged; the others go on.
    public func purge(hourly: Bool) async {
        let databaseNow = configuration.clockDrivesDatabase ? clock.now : nil
        if let retention = configuration.deliveryRetention {
            await purge("delivery rows past their retention", action: "purge_deliveries", level: .debug) {
                try await DeliveryRepository(pool: pool).purge(sentBefore: clock.now.addingTimeInterval(-retention), statements: 5)
            }
        }
        guard hourly else { return }
        await purge("expired idempotency keys", action: nil, level: .info) {
            try await IngestRepository(pool: pool).purgeExpiredIdempotencyKeys(now: databaseNow)
        }
        await purge("heartbeats of instances gone for a day", action: nil, level: .debug) {
            try await InstanceHeartbeatRepository().purge(lapsedFor: 86400, pool: pool)
        }
        await purge("push-to-start tokens not seen within --token-max-age", action: "prune_tokens", level: .info) {
            try await TokenHygieneRepository(pool: pool).prune(notSeenFor: configuration.tokenMaxAge)
        }
        if let retention = configuration.deliveryRetention {
            // The refusals of device tokens are APNs' answers too: they follow the delivery rows' retention.
            await purge("token refusals past the delivery retention", action: "purge_token_refusals", level: .debug) {
                try await TokenHygieneRepository(pool: pool).purgeInvalidations(recordedBefore: clock.now.addingTimeInterval(-retention))
            }
            // So are the starts: one row per push-to-start, kept while their run is shown.
            await purge("start runs of events over past the delivery retention", action: "purge_starts", level: .info) {
                try await StartRepository(pool: pool).purge(finishedBefore: clock.now.addingTimeInterval(-retention))
            }
        }
        await purge("mirroring passes finished a day ago", action: nil, level: .debug) {
            try await MirrorRepository(pool: pool).purge(finishedBefore: clock.now.addingTimeInterval(-86400))
        }
        if let retention = configuration.updateRetention {
            await purge("updates of events ended past their retention", action: "purge_updates", level: .info) {
                try await EventRepository(pool: pool).purgeUpdates(endedBefore: clock.now.addingTimeInterval(-retention), statements: 50)
            }
        }
    }

    /// Sets the registry's gauges from its counts.
    public func sampleAudience() async {
        do {
            metrics.record(try await AudienceRepository(pool: pool).stats(appID: nil, forGauges: true))
        } catch {
            logger.warning("audience sample failed", ["error": .string("\(error)")])
        }
    }

    /// One purge (`body` returns how many rows went); the rows are counted under `action` in the scheduler's
    /// metric, when it has one, and logged at `level`.
    private func purge(_ what: String, action: String?, level: Logger.Level, _ body: () async throws -> Int) async {
        do {
            let purged = try await body()
            guard purged > 0 else { return }
            if let action { metrics.schedulerActions.increment([action], by: Double(purged)) }
            logger.log(level, "\(what) purged", ["count": .int(purged)])
        } catch {
            logger.error("purge \(what) failed", ["error": .string("\(error)")])
        }
    }
}
