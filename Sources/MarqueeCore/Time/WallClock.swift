import Foundation
import Synchronization

/// A source of the current wall-clock time, injected so that code and tests agree on "now".
public protocol WallClock: Sendable {
    var now: Date { get }
}

/// The system's wall clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public var now: Date { Date() }
}

/// A clock that moves only when told to, for tests.
public final class ManualWallClock: WallClock {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    public var now: Date { current.withLock { $0 } }

    public func set(to date: Date) { current.withLock { $0 = date } }

    public func advance(by interval: TimeInterval) { current.withLock { $0 += interval } }
}
