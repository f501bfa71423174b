// Conflation: a channel carries state, not a log, so when updates arrive faster than Marquee should
// broadcast (about one per second per channel) only the newest pending state is sent and the older
// ones are recorded as conflated. An urgent update (explicit high priority or an alert) may go at once.

import Foundation

/// One accepted update waiting to be broadcast on a channel.
public struct PendingBroadcast<ID: Hashable & Sendable>: Sendable, Hashable {
    public var id: ID
    /// The ingester asked for `high` priority.
    public var isHighPriority: Bool
    public var hasAlert: Bool

    public init(id: ID, isHighPriority: Bool = false, hasAlert: Bool = false) {
        self.id = id
        self.isHighPriority = isHighPriority
        self.hasAlert = hasAlert
    }

    var isUrgent: Bool { isHighPriority || hasAlert }
}

/// What to broadcast now on a channel.
public struct BroadcastPlan<ID: Hashable & Sendable>: Sendable, Hashable {
    /// The newest pending update: its state is the one sent.
    public var send: ID
    /// Older pending updates superseded by `send`, oldest first: record them as conflated.
    public var conflated: [ID]
    /// The newest pending update with an alert, when that is not `send` itself: carry its alert along
    /// with the newest state so the user still hears about it.
    public var alertFrom: ID?
    /// Some pending update asked for `high` priority.
    public var wantsHighPriority: Bool
}

/// The conflation decision for one channel.
public enum ConflationDecision<ID: Hashable & Sendable>: Sendable, Hashable {
    /// Nothing is pending.
    case idle
    /// Send now.
    case send(BroadcastPlan<ID>)
    /// Too soon after the last broadcast; decide again at this time.
    case wait(until: Date)
}

/// Per channel: only the newest pending state is sent, at most one broadcast per `minimumInterval`,
/// except that an urgent update goes at once.
///
/// `tolerance` lets a broadcast go that much early: a sender that wakes a little after each due time
/// (its timer's granularity, a claim's round trip) would otherwise push every broadcast of a channel
/// updated once per interval a little later than the last, and its updates would wait longer and longer.
/// With it, broadcasts keep to the interval on average and are never closer than `pacing`.
public struct ConflationPolicy: Sendable, Equatable {
    public var minimumInterval: TimeInterval
    public var tolerance: TimeInterval

    public init(minimumInterval: TimeInterval = 1, tolerance: TimeInterval = 0) {
        self.minimumInterval = minimumInterval
        self.tolerance = tolerance
    }

    /// The shortest time between two broadcasts of a channel (the interval less the tolerance).
    public var pacing: TimeInterval { max(0, minimumInterval - tolerance) }

    /// Decides for a channel given its pending updates in arrival order (oldest first).
    public func decide<ID>(pending: [PendingBroadcast<ID>], lastSentAt: Date?, now: Date) -> ConflationDecision<ID> {
        // Closures, not key paths: a key path into the generic PendingBroadcast<ID> is instantiated at run
        // time on every call (`_swift_getKeyPath`: 2% of serve's CPU under Scripts/bench service).
        guard let newest = pending.last else { return .idle }
        if let lastSentAt, now < lastSentAt.addingTimeInterval(pacing), !pending.contains(where: { $0.isUrgent }) {
            return .wait(until: lastSentAt.addingTimeInterval(pacing))
        }
        let alertSource = pending.last(where: { $0.hasAlert })
        return .send(
            BroadcastPlan(
                send: newest.id,
                conflated: pending.dropLast().map { $0.id },
                alertFrom: alertSource.flatMap { $0.id == newest.id ? nil : $0.id },
                wantsHighPriority: pending.contains(where: { $0.isHighPriority })))
    }
}
