import Foundation
import MarqueeCore

/// The push-to-start token's rules written out row by row: `PushToStartTokenSlotTests` holds the value to it, and
/// `PushToStartTokenSQLTests` runs every row through the store's SQL on a real database.
public enum PushToStartTokenTable {
    /// One rule: a slot, what happens to it, and what it becomes.
    public struct Row: Sendable {
        public var name: String
        public var before: PushToStartTokenSlot
        public var event: PushToStartTokenSlot.Event
        public var action: PushToStartTokenSlot.Action
        public var after: PushToStartTokenSlot
    }

    /// A token's stored registration, its last sighting and an event's time, in this order; all long before any
    /// test runs, so a time set from the database's clock (`now`) is never one of them.
    public static let registered = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01
    public static let seen = registered.addingTimeInterval(3600)
    public static let later = registered.addingTimeInterval(7200)
    public static let previousUntil = registered.addingTimeInterval(86400)
    /// How long a replaced token is kept.
    public static let retention: TimeInterval = 7 * 86400

    public static let tokenA = String(repeating: "a1", count: 32)
    public static let tokenB = String(repeating: "b2", count: 32)
    public static let tokenP = String(repeating: "c3", count: 32)

    public static let empty = PushToStartTokenSlot()
    public static let emptyWithPrevious = PushToStartTokenSlot(previous: tokenP, previousUntil: previousUntil)
    public static let held = PushToStartTokenSlot(
        token: tokenA, registeredAt: registered, seenAt: seen, previous: tokenP, previousUntil: previousUntil)
    public static let heldRefused = PushToStartTokenSlot(
        token: tokenA, registeredAt: registered, seenAt: seen, refusedReason: "BadDeviceToken", refusedAt: seen)

    static func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }

    /// Every rule, with `now` the database's clock when it applies.
    public static func rows(now: Date) -> [Row] {
        func slot(_ base: PushToStartTokenSlot, _ change: (inout PushToStartTokenSlot) -> Void) -> PushToStartTokenSlot {
            var slot = base
            change(&slot)
            return slot
        }
        let cleared = PushToStartTokenSlot(previous: tokenP, previousUntil: previousUntil)
        return [
            // Rotate.
            Row(
                name: "a registration without a token keeps the stored one", before: held, event: .registered(nil, at: later), action: .keep,
                after: held),
            Row(name: "a registration without a token on none", before: empty, event: .registered(nil, at: later), action: .keep, after: empty),
            Row(
                name: "the same token again is seen again", before: held, event: .registered(tokenA, at: later), action: .seenAgain,
                after: slot(held) { $0.seenAt = later }),
            Row(
                name: "the same token from an older registration keeps the later sighting", before: held,
                event: .registered(tokenA, at: registered.addingTimeInterval(-3600)), action: .seenAgain, after: held),
            Row(
                name: "the same token again keeps its refusal", before: heldRefused, event: .registered(tokenA, at: later), action: .seenAgain,
                after: slot(heldRefused) { $0.seenAt = later }),
            Row(
                name: "a new token keeps the one it replaces as previous", before: held, event: .registered(tokenB, at: later), action: .rotate,
                after: PushToStartTokenSlot(
                    token: tokenB, registeredAt: later, seenAt: later, previous: tokenA, previousUntil: now.addingTimeInterval(retention))),
            Row(
                name: "a new token starts unrefused", before: heldRefused, event: .registered(tokenB, at: later), action: .rotate,
                after: PushToStartTokenSlot(
                    token: tokenB, registeredAt: later, seenAt: later, previous: tokenA, previousUntil: now.addingTimeInterval(retention))),
            Row(
                name: "a first token", before: empty, event: .registered(tokenB, at: later), action: .rotate,
                after: PushToStartTokenSlot(token: tokenB, registeredAt: later, seenAt: later)),
            Row(
                name: "a token after a clear keeps the previous one", before: emptyWithPrevious, event: .registered(tokenB, at: later),
                action: .rotate,
                after: slot(emptyWithPrevious) {
                    $0.token = tokenB
                    $0.registeredAt = later
                    $0.seenAt = later
                }),
            // Move and clear.
            Row(name: "a token another installation registered moves there", before: held, event: .movedAway, action: .clear, after: cleared),
            Row(name: "a refused token moves too", before: heldRefused, event: .movedAway, action: .clear, after: PushToStartTokenSlot()),
            Row(name: "push-to-start turned off", before: held, event: .cleared, action: .clear, after: cleared),
            Row(name: "nothing to clear", before: emptyWithPrevious, event: .cleared, action: .keep, after: emptyWithPrevious),
            // Refuse.
            Row(
                name: "a 410 without a time invalidates", before: held,
                event: .refused(.gone(reason: "Unregistered", apnsTimestampMilliseconds: nil)),
                action: .clear, after: cleared),
            Row(
                name: "a 410 from before the last sighting keeps the token", before: held,
                event: .refused(.gone(reason: "Unregistered", apnsTimestampMilliseconds: milliseconds(registered))), action: .keep, after: held),
            Row(
                name: "a 410 from after the last sighting invalidates", before: heldRefused,
                event: .refused(.gone(reason: "ExpiredToken", apnsTimestampMilliseconds: milliseconds(later))), action: .clear,
                after: PushToStartTokenSlot()),
            Row(
                name: "a BadDeviceToken is flagged, not removed", before: held, event: .refused(.badDeviceToken), action: .flagRefused,
                after: slot(held) {
                    $0.refusedReason = "BadDeviceToken"
                    $0.refusedAt = now
                }),
            Row(
                name: "a second refusal keeps the first one's time", before: heldRefused, event: .refused(.notForTopic), action: .flagRefused,
                after: slot(heldRefused) { $0.refusedReason = "DeviceTokenNotForTopic" }),
            Row(
                name: "a refusal with no token stored changes nothing", before: emptyWithPrevious, event: .refused(.badDeviceToken), action: .keep,
                after: emptyWithPrevious),
        ]
    }
}
