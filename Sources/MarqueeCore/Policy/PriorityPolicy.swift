// Priority: 10 is delivered at once but charged to a per-device budget Apple does not publish; 5 is
// free. Under `auto`, an update is 10 only when the user should notice it now (an alert, or a change of a
// field the schema marks significant). A per-channel sliding-window budget of priority-10 sends keeps a
// busy channel from burning its subscribers' budget; the rest are downgraded to 5.

import Foundation

/// The priority an ingester asks for.
public enum RequestedPriority: String, Sendable, Codable, CaseIterable {
    case auto
    case high
    case low
}

/// The `apns-priority` header value.
public enum PushPriority: Int, Sendable, Codable, Comparable {
    /// Power-aware delivery, not charged to the budget.
    case low = 5
    /// Immediate delivery, charged to the budget.
    case high = 10

    public static func < (lhs: PushPriority, rhs: PushPriority) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The priority an update wants before the budget is applied.
    public static func wanted(for requested: RequestedPriority, hasAlert: Bool, changesSignificantField: Bool) -> PushPriority {
        switch requested {
        case .high: .high
        case .low: .low
        case .auto: hasAlert || changesSignificantField ? .high : .low
        }
    }
}

/// The priority to send with, and whether the budget lowered it.
public struct PriorityDecision: Sendable, Equatable {
    public var priority: PushPriority
    /// True when priority 10 was wanted but the channel's budget was spent.
    public var downgraded: Bool
}

/// A channel's budget of priority-10 sends in a sliding window (by default 30 per hour).
public struct HighPriorityBudget: Sendable, Equatable, Codable {
    public var limit: Int
    public var window: TimeInterval
    /// Times of the priority-10 sends still inside the window, oldest first.
    public private(set) var sends: [Date]

    public init(limit: Int = 30, window: TimeInterval = 3600, sends: [Date] = []) {
        self.limit = limit
        self.window = window
        self.sends = sends.sorted()
    }

    /// Priority-10 sends left in the window at `now`.
    public func remaining(now: Date) -> Int {
        max(0, limit - sends.count { $0 > now.addingTimeInterval(-window) })
    }

    /// Decides the priority for a send at `now`, recording it when it goes at 10.
    public mutating func admit(_ wanted: PushPriority, now: Date) -> PriorityDecision {
        sends.removeAll { $0 <= now.addingTimeInterval(-window) }
        guard wanted == .high else { return PriorityDecision(priority: .low, downgraded: false) }
        guard sends.count < limit else { return PriorityDecision(priority: .low, downgraded: true) }
        sends.append(now)
        return PriorityDecision(priority: .high, downgraded: false)
    }
}
