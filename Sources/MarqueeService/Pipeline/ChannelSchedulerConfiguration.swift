// The channel scheduler's settings, what a sweep reports, and why the scheduler could not act.
import Foundation
import MarqueeCore

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
    /// Prune push-to-start tokens not sent again within this, in the hourly pass (`--token-max-age`).
    public var tokenMaxAge: TimeInterval = AudienceSettings().tokenMaxAge
    /// How often the leader samples the registry's gauges (installations, invalidations).
    public var audienceSampleInterval: TimeInterval = 60
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
