// How late an ended Live Activity may stay: ActivityKit keeps an ended activity on the Lock Screen for at most
// 4 hours after its end, whatever dismissal date the push asks for. A later date is refused at ingest, where the
// feed can still correct it, instead of being cut short on the device without a word.
import Foundation

/// The limit of an end's `dismissal-date`.
public enum DismissalPolicy {
    /// At most this long after the end.
    public static let maximumAfterEnd: TimeInterval = 4 * 3600

    /// When an end's dismissal date may be at the latest: 4 hours after the end goes out, which is `now` or,
    /// for an end held until `at`, that instant.
    public static func latest(sentAt now: Date, notBefore at: Date?) -> Date {
        max(now, at ?? now).addingTimeInterval(maximumAfterEnd)
    }

    /// Whether `dismissalDate` is within the limit of an end sent at `now` (or held until `at`).
    public static func allows(_ dismissalDate: Date, sentAt now: Date, notBefore at: Date?) -> Bool {
        dismissalDate <= latest(sentAt: now, notBefore: at)
    }
}
