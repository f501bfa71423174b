// The values of the dispatcher's side of the outbox (OutboxRepository): a claimed broadcast with its update and
// pending ones, what a record left behind, and a claim's batch.
import Foundation
import MarqueeCore
import Postgres

/// A pending update of a claimed event, for `ConflationPolicy` (oldest first).
public struct PendingUpdate: Sendable, Equatable {
    public var id: Int
    public var priority: RequestedPriority
    public var alert: JSONValue?
    public var occurredAt: Date
}

/// The update a claimed outbox row points at (the event's newest accepted one).
public struct OutboxUpdate: Sendable, Equatable {
    public var id: Int
    public var action: UpdateAction
    /// The full content-state (a merge patch was applied at ingest).
    public var contentState: JSONValue
    public var alert: JSONValue?
    public var staleDate: Date?
    public var dismissalDate: Date?
    public var relevanceScore: Double?
    public var priority: RequestedPriority
    public var occurredAt: Date
    /// When ingest accepted it (the start of the ingest-to-APNs latency).
    public var receivedAt: Date
}

/// One event's broadcast work, claimed by this instance until `claimedUntil`.
public struct ClaimedBroadcast: Sendable, Equatable {
    public var outboxID: Int
    /// Proves ownership to the record methods.
    public var claimToken: UUID
    public var claimedUntil: Date
    /// Failed attempts so far (for the backoff of the next one).
    public var attempts: Int
    public var eventID: Int
    public var appID: Int
    /// The event's attribute type (its content-state schema says which fields are significant).
    public var attributeTypeID: Int
    public var channelID: Int
    public var apnsChannelID: String
    public var storagePolicy: MessageStoragePolicy
    public var channelState: ChannelLifecycle.State
    /// The channel's last aps.timestamp: the next must be above it (`TimestampSequencer.next(after:now:)`).
    /// It includes one fixed for an older update of this row by an earlier claim (sent, perhaps, and not recorded).
    public var lastApsTimestamp: Int64?
    /// The aps.timestamp fixed for `update` with the claim (Sql/0016), so that a send repeated after a crash
    /// before its record carries the same one; nil when a newer update took the row between the claim's
    /// two statements (then the next above `lastApsTimestamp` goes).
    public var apsTimestamp: Int64?
    /// When the last broadcast APNs accepted on the channel was sent (for the one-per-second pacing;
    /// `channels.last_broadcast_at`).
    public var lastBroadcastAt: Date?
    public var update: OutboxUpdate
    /// Every pending update of the event up to `update`, oldest first (`update` last).
    public var pending: [PendingUpdate]
    /// The event's freshness policy (stale date, relevance, dismissal at send time).
    public var freshness: FreshnessPolicy = .defaults
    /// When the channel's last broadcast with an alert was accepted (the alert boost runs from it).
    public var lastAlertAt: Date?
}

/// What a recorded broadcast left behind.
public enum BroadcastOutcome: Sendable, Equatable {
    /// The outbox row is gone: the event's newest state went out.
    case completed
    /// A newer update arrived while sending: the row stays, due after the given delay.
    case newerPending
    /// The claim had expired and another instance owns the row now; the send is recorded, the row untouched.
    case claimLost
}

/// A broadcast APNs accepted, to record (`OutboxRepository.recordBroadcasts`).
public struct BroadcastRecord: Sendable, Equatable {
    public var claim: ClaimedBroadcast
    public var delivery: DeliveryDraft
    public var apsTimestamp: Int64
    /// When the row is due again if a newer update arrived meanwhile (unless that one is urgent).
    public var nextAttemptDelay: TimeInterval
    /// When the send began (`channels.last_broadcast_at`, the pacing's reference); nil: now.
    public var sentAt: Date?
    /// The update whose alert the broadcast carried, its own or one it conflated (`deliveries.alert_update_id`,
    /// which mirroring reads; `channels.last_alert_at`, where the alert boost runs from); nil: none.
    public var alertUpdateID: Int?

    public init(
        claim: ClaimedBroadcast, delivery: DeliveryDraft, apsTimestamp: Int64, nextAttemptDelay: TimeInterval = 0,
        sentAt: Date? = nil, alertUpdateID: Int? = nil
    ) {
        self.claim = claim
        self.delivery = delivery
        self.apsTimestamp = apsTimestamp
        self.nextAttemptDelay = nextAttemptDelay
        self.sentAt = sentAt
        self.alertUpdateID = alertUpdateID
    }
}

/// One claim query's result: the rows claimed, and what became of the others it took.
public struct ClaimBatch: Sendable, Equatable {
    public var claims: [ClaimedBroadcast]
    /// Due rows the query took, claimed or paced (compare with its limit: more may be due).
    public var taken: Int
    /// The earliest time a paced (not claimed) row was made due at, if any.
    public var pacedUntil: Date?
    /// For each claim taken from another holder (its lease ran out or its heartbeat lapsed), that holder.
    public var takenOver: [String] = []
}
