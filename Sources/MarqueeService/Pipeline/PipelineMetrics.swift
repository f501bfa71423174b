import Foundation
import MarqueeStore

/// The dispatcher's and scheduler's metrics, registered once per process.
public struct PipelineMetrics: Sendable {
    /// Seconds from ingest accepted (the update's `received_at`) to APNs accepting the broadcast carrying it.
    public let ingestToAccepted: Histogram
    /// Broadcasts by `priority` (5, 10) and `result` (accepted, retryable, rejected, channel_lost).
    public let broadcasts: Counter
    /// Priority-10 broadcasts sent at 5 because the channel's hourly budget was spent.
    public let priorityDowngrades: Counter
    /// Every APNs answer (or missing answer) by `operation` and `reason` (`ok` for acceptances).
    public let apnsAnswers: Counter
    /// Broadcast and channel requests scheduled for a retry, by `operation`.
    public let retries: Counter
    /// Pending updates recorded as conflated (a newer state went instead).
    public let conflated: Counter
    /// Outbox claims taken from another holder whose heartbeat (or, without one, lease) had lapsed.
    public let claimsTakenOver: Counter
    /// Carried alerts dropped because the payload would exceed 5,120 bytes.
    public let alertsDropped: Counter
    /// Outbox rows waiting, sampled from the database.
    public let outboxBacklog: Gauge
    /// Age of the oldest outbox row in seconds, sampled.
    public let outboxOldestAge: Gauge
    /// Channels by `app` (bundle id/environment) and `state`, sampled.
    public let channelsByState: Gauge
    /// Events whose channel APNs no longer knows, sampled.
    public let lostChannels: Gauge
    /// Channel creates refused by the quota (local count or APNs' CannotCreateChannelConfig), by `app`.
    public let quotaRefusals: Counter
    /// Unknown channels in Apple's lists at the last reconcile, by `app`.
    public let unknownChannels: Gauge
    /// Scheduler actions by `action` (create, open, end, delete, lost, ...).
    public let schedulerActions: Counter
    /// 1 while APNs refuses the app's credentials and its work is parked.
    public let credentialsParked: Gauge
    /// Installations by app and state.
    public let installationsByState: Gauge
    /// Recorded token invalidations by app, reason and outcome.
    public let tokenInvalidations: Gauge
    /// Windows of an app's park that ended in a refusal of its credentials.
    public let credentialsRefusals: Counter
    /// 1 while this instance holds the scheduler's lease.
    public let schedulerLeader: Gauge
    /// Channels counting against the quota, by `app`, sampled; and the quota itself (`--channel-quota`).
    public let quotaInUse: Gauge
    public let quotaLimit: Gauge
    /// Start runs in their first pass, sampled.
    public let startRunsInFirstPass: Gauge
    /// Age of the oldest running mirroring pass in seconds (0 when none runs), sampled.
    public let oldestMirrorPassAge: Gauge

    public init(registry: MetricsRegistry) {
        ingestToAccepted = registry.histogram(
            "marquee_broadcast_latency_seconds", help: "Seconds from ingest accepted to APNs accepting a broadcast carrying the update",
            buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 5, 10, 30, 60])
        broadcasts = registry.counter("marquee_broadcasts_total", help: "Broadcasts by priority and result", labels: ["priority", "result"])
        priorityDowngrades = registry.counter(
            "marquee_priority_downgrades_total", help: "Broadcasts sent at priority 5 because the channel's priority-10 budget was spent")
        apnsAnswers = registry.counter("marquee_apns_answers_total", help: "APNs answers by operation and reason", labels: ["operation", "reason"])
        retries = registry.counter(
            "marquee_apns_retries_total", help: "Requests scheduled for a retry after a transient failure", labels: ["operation"])
        conflated = registry.counter("marquee_updates_conflated_total", help: "Pending updates recorded as conflated")
        claimsTakenOver = registry.counter(
            "marquee_claims_taken_over_total", help: "Outbox claims taken from a holder whose heartbeat or lease had lapsed")
        alertsDropped = registry.counter("marquee_carried_alerts_dropped_total", help: "Carried alerts dropped to fit the 5,120-byte broadcast limit")
        outboxBacklog = registry.gauge("marquee_outbox_backlog", help: "Outbox rows waiting to be broadcast")
        outboxOldestAge = registry.gauge("marquee_outbox_oldest_age_seconds", help: "Age of the oldest outbox row")
        channelsByState = registry.gauge("marquee_channels", help: "Channels by app and state", labels: ["app", "state"])
        lostChannels = registry.gauge("marquee_channels_lost", help: "Events whose channel APNs no longer knows")
        quotaRefusals = registry.counter("marquee_channel_quota_refusals_total", help: "Channel creates refused by the quota", labels: ["app"])
        unknownChannels = registry.gauge("marquee_channels_unknown", help: "Channels in Apple's list Marquee did not make", labels: ["app"])
        schedulerActions = registry.counter("marquee_scheduler_actions_total", help: "Channel scheduler actions", labels: ["action"])
        credentialsParked = registry.gauge(
            "marquee_app_credentials_parked",
            help: "1 while APNs refuses the app's credentials and its work waits", labels: ["app"])
        installationsByState = registry.gauge(
            "marquee_installations", help: "Registered installations by app id and state (sampled by the leader)",
            labels: ["app", "state"])
        tokenInvalidations = registry.gauge(
            "marquee_token_invalidations",
            help: "Recorded APNs refusals of device tokens by app id, reason and outcome (sampled by the leader)",
            labels: ["app", "reason", "outcome"])
        credentialsRefusals = registry.counter(
            "marquee_app_credentials_refusals_total",
            help: "Refusals of an app's credentials that parked (or parked again) its work", labels: ["app"])
        schedulerLeader = registry.gauge("marquee_scheduler_leader", help: "1 while this instance holds the channel scheduler's lease")
        quotaInUse = registry.gauge(
            "marquee_channel_quota_in_use", help: "Channels counting against Apple's quota, by app id", labels: ["app"])
        quotaLimit = registry.gauge("marquee_channel_quota", help: "Channels allowed per app and environment (--channel-quota)")
        startRunsInFirstPass = registry.gauge(
            "marquee_start_runs_in_progress", help: "Start runs in their first pass over the audience (sampled)")
        oldestMirrorPassAge = registry.gauge(
            "marquee_mirror_oldest_pass_age_seconds", help: "Age of the oldest running mirroring pass, from its broadcast's ingest (sampled)")
    }

    /// Sets the registry's gauges: installations by app and state (`disabled`, `no_token`, `refused`,
    /// `startable`), and recorded token invalidations by app, reason and outcome.
    func record(_ stats: AudienceStats) {
        var installations: [LabelValues: Double] = [:]
        for group in stats.installations {
            let state = !group.enabled ? "disabled" : group.token == "none" ? "no_token" : group.token == "refused" ? "refused" : "startable"
            installations[["\(group.appID)", state], default: 0] += Double(group.count)
        }
        installationsByState.replaceAll(installations)
        var invalidations: [LabelValues: Double] = [:]
        for group in stats.invalidations {
            invalidations[["\(group.appID)", group.reason, group.outcome.rawValue], default: 0] += Double(group.count)
        }
        tokenInvalidations.replaceAll(invalidations)
    }

    /// The values of the `app` label for one app. Its id is the one form of every series (as routes and commands
    /// take an app); the series that named an app `bundle/environment` keep that old series too, for one release
    /// (docs/operations.md, Metrics), so a dashboard can move over.
    static func appLabels(id: Int, bundleID: String, environment: String) -> [String] { [String(id), "\(bundleID)/\(environment)"] }

    static func appLabels(_ app: PipelineApp) -> [String] { appLabels(id: app.id, bundleID: app.bundleID, environment: app.environment) }

    /// Sets the sampled gauges from a status snapshot.
    func record(_ status: PipelineStatus) {
        outboxBacklog.set(Double(status.outboxBacklog))
        outboxOldestAge.set(status.oldestOutboxAge ?? 0)
        lostChannels.set(Double(status.lostChannels.count))
        startRunsInFirstPass.set(Double(status.startRunsInFirstPass))
        oldestMirrorPassAge.set(status.oldestMirrorPassAge ?? 0)
        var byState: [LabelValues: Double] = [:]
        var parked: [LabelValues: Double] = [:]
        var inUse: [LabelValues: Double] = [:]
        for app in status.apps {
            inUse[[String(app.appID)]] = Double(app.quotaInUse)
            for label in Self.appLabels(id: app.appID, bundleID: app.bundleID, environment: app.environment) {
                for (state, count) in app.channelsByState { byState[[label, state]] = Double(count) }
                parked[[label]] = app.credentialsPark == nil ? 0 : 1
            }
        }
        channelsByState.replaceAll(byState)
        credentialsParked.replaceAll(parked)
        quotaInUse.replaceAll(inUse)
    }
}
