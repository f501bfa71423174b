import Foundation

/// Produces `aps.timestamp` values that strictly increase per channel: the device shows the newest
/// timestamp and ignores an equal or older one, and APNs may reorder broadcasts.
public struct TimestampSequencer: Sendable, Equatable, Codable {
    /// The last timestamp sent on the channel (Unix seconds), if any.
    public private(set) var last: Int64?

    public init(last: Int64? = nil) { self.last = last }

    /// The timestamp for the next send: `max(now, last + 1)` in whole Unix seconds.
    public static func next(after last: Int64?, now: Date) -> Int64 {
        let seconds = Int64(now.timeIntervalSince1970.rounded(.down))
        guard let last else { return seconds }
        return max(seconds, last + 1)
    }

    /// Takes the next timestamp and remembers it.
    public mutating func next(now: Date) -> Int64 {
        let timestamp = Self.next(after: last, now: now)
        last = timestamp
        return timestamp
    }
}
