// The enumerations the store persists besides the lifecycles' states. Raw values are the stored text.

/// What an event is about (`events.kind`).
public enum EventKind: String, Sendable, Codable, CaseIterable {
    case match, flight, other
}

/// What an update asks for (`updates.action`): an `update` broadcast, or the `end` one.
public enum UpdateAction: String, Sendable, Codable, CaseIterable {
    case update, end
}

/// What became of an accepted update (`updates.disposition`).
public enum UpdateDisposition: String, Sendable, Codable, CaseIterable {
    /// Waiting for the dispatcher.
    case pending
    /// Sent to APNs and accepted.
    case broadcast
    /// A newer state was broadcast instead.
    case conflated
    /// It arrived older than the event's latest state; never sent.
    case superseded
    /// The event ended while no channel could carry it (never opened, refused, or lost); never sent.
    case unsent
}

/// A channel's state as stored: a `ChannelLifecycle.State`, or `unknown` (found only in Apple's list).
public enum StoredChannelState: RawRepresentable, CaseIterable, Sendable, Hashable, CustomStringConvertible {
    case lifecycle(ChannelLifecycle.State)
    case unknown

    public static var allCases: [StoredChannelState] { ChannelLifecycle.State.allCases.map(Self.lifecycle) + [.unknown] }

    public init?(rawValue: String) {
        if rawValue == "unknown" {
            self = .unknown
        } else if let state = ChannelLifecycle.State(rawValue: rawValue) {
            self = .lifecycle(state)
        } else {
            return nil
        }
    }

    /// The stored text.
    public var rawValue: String {
        switch self {
        case .lifecycle(let state): state.rawValue
        case .unknown: "unknown"
        }
    }

    public var description: String { rawValue }

    /// Counts against the 10,000-channel quota: lifecycle states that may exist at APNs, and unknown ones.
    public var countsAgainstQuota: Bool {
        switch self {
        case .lifecycle(let state): state.countsAgainstQuota
        case .unknown: true
        }
    }

    /// Every stored state counting against the quota.
    public static let quotaStates: [StoredChannelState] = allCases.filter(\.countsAgainstQuota)
}
