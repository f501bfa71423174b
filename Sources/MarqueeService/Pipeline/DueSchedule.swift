// When outbox rows this dispatcher knows of come due: rows it postponed, paced or released, and rows
// ingested in this process that the pacing holds back. The run loop sleeps until the earliest, then
// claims. Times are gathered into steps (rounded up to a step's end), so one claim takes what comes due
// within a step rather than one claim per row; a row is never woken for before it is due.
import Foundation

/// Due times, ascending, one per step.
struct DueSchedule: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// The width of a step.
    let step: Duration
    /// At most this many steps are kept; farther ones are dropped (polling finds their rows).
    let capacity: Int
    private let origin: Instant
    private var times: [Instant] = []

    init(step: Duration, capacity: Int = 16_384, origin: Instant = .now) {
        self.step = step
        self.capacity = max(1, capacity)
        self.origin = origin
    }

    /// The earliest due time, if any.
    var earliest: Instant? { times.first }

    var count: Int { times.count }

    /// Adds a due time, rounded up to the end of its step; returns whether it is now the earliest.
    @discardableResult
    mutating func insert(_ time: Instant) -> Bool {
        let steps = max(0, ((time - origin) / step).rounded(.up))
        let rounded = origin + step * steps
        var low = 0
        var high = times.count
        while low < high {
            let middle = (low + high) / 2
            if times[middle] < rounded { low = middle + 1 } else { high = middle }
        }
        if low < times.count && times[low] == rounded { return false }
        if times.count >= capacity {
            guard low < times.count else { return false }
            times.removeLast()
        }
        times.insert(rounded, at: low)
        return low == 0
    }

    /// Forgets the due times up to `now` (a claim is about to take their rows).
    mutating func removeDue(by now: Instant) {
        let due = times.prefix { $0 <= now }.count
        times.removeFirst(due)
    }
}
