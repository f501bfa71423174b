// The dispatcher's settings and what it reports of each claim.
import Foundation
import MarqueeCore

/// Settings of the dispatcher, with their defaults.
public struct BroadcastDispatcherConfiguration: Sendable {
    /// Names this instance in outbox claims (`claimed_by`); unique per process.
    public var instance: String
    /// Broadcasts in flight at once (different channels); default 64.
    public var maxConcurrentSends: Int = 64
    /// Outbox rows claimed per query at most; default 100.
    public var claimBatch: Int = 100
    /// Polling interval covering lost notifications and due retries; default 500 ms.
    public var pollInterval: Duration = .milliseconds(500)
    /// Claims follow one another at least this far apart (unless the last one took a full batch), so a
    /// burst of urgent updates (every match scoring at once) is claimed a few at a time, not one claim per
    /// update; default 5 ms (nil: none).
    public var claimSpacing: Duration? = .milliseconds(5)
    /// How long a claim is held; longer than the APNs client's timeout with its retries. Default 120 s.
    public var claimLease: TimeInterval = 120
    /// At most one broadcast per channel per `minimumInterval` (default 1 s), urgent ones excepted
    /// (`conflation(interval:)`).
    public var conflation = BroadcastDispatcherConfiguration.conflation(interval: 1)
    /// The dispatcher wakes for due times gathered into steps this wide (`DueSchedule`).
    public static let dueStep: Duration = .milliseconds(20)
    /// The conflation tolerance a dispatcher needs: a due step and the claim after it.
    public static let pacingTolerance: TimeInterval = 0.025

    /// One broadcast per channel per `interval`, with a tolerance of `pacingTolerance` (the loop wakes up
    /// to a due step after a due time), at most a tenth of the interval.
    public static func conflation(interval: TimeInterval) -> ConflationPolicy {
        ConflationPolicy(minimumInterval: interval, tolerance: min(pacingTolerance, interval / 10))
    }
    /// `apns-expiration` for most-recent storage: TTL capped at 8 h (default 4 h); 0 for `none`.
    public var expiration = ExpirationPolicy(timeToLive: 4 * 3600)
    /// Priority-10 broadcasts per channel per `highPriorityWindow`; default 30 per hour.
    public var highPriorityBudget: Int = 30
    public var highPriorityWindow: TimeInterval = 3600
    /// Backoff of retryable failures (429, 5xx, timeouts): default 1 s doubling up to 300 s, jittered.
    public var retryBackoff = RetryBackoff(base: 1, maximum: 300)
    /// How often the outbox backlog and channel gauges are sampled; default 5 s (nil: never).
    public var statusSampleInterval: Duration? = .seconds(5)
    /// Pass the injected clock's time to the database instead of its `now()` (tests with a manual clock).
    public var clockDrivesDatabase: Bool = false
    /// Channels remembered in process; default 100,000.
    public var channelMemoryCapacity: Int = 100_000

    public init(instance: String) { self.instance = instance }
}

/// What became of one claim (for tests and logs).
public enum DispatchResult: Sendable, Equatable {
    /// APNs accepted the broadcast of `updateID` at this priority and aps.timestamp.
    case sent(updateID: Int, priority: PushPriority, apsTimestamp: Int64)
    /// Too soon after the last broadcast (conflation): given back, due later.
    case postponed
    /// A transient failure: recorded, retried after backoff.
    case retryScheduled
    /// APNs refuses the app's credentials: nothing of the app is sent before `until` (`CredentialsParking`).
    case parked(until: Date)
    /// APNs refused the payload (or it could not be made to fit): recorded, not retried.
    case rejected(String)
    /// ChannelNotRegistered: the channel is lost, the event flagged, broadcasting stopped.
    case channelLost
    /// Given back unsent (shutdown, or the channel is already being sent by this instance).
    case released
    /// Another instance owns the row now, or the outcome could not be written even once the database
    /// answered again; the claim was given back (or is freed before this instance's next claim).
    case abandoned
}

/// A dispatcher failure that is not APNs' answer.
public enum DispatcherError: Error, Equatable, CustomStringConvertible {
    /// The claim names an app the catalog does not know (deleted meanwhile?).
    case unknownApp(Int)

    public var description: String {
        switch self {
        case .unknownApp(let id): "app \(id) not found; was it removed while it had events?"
        }
    }
}
