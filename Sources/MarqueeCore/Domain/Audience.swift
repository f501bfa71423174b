// The audience's values: device tokens, OS versions, Live Activities and what APNs' invalidations decide.
// An app's backend registers these (docs/api.md#installations); the start fan-out and mirroring read them.
// Why OS versions are numbers: "17.10" must sort after "17.2", and the paths differ by version
// (docs/apns.md#device-versions).
import Foundation

/// A device token (push-to-start or per-activity update token) as text: 64 to 200 hexadecimal characters,
/// stored and sent lower-cased. The one validator of tokens, shared by the API and the APNs client.
public enum DeviceTokenText {
    /// The shortest and longest token accepted, in hexadecimal characters (32 to 100 bytes).
    public static let lengths = 64...200

    /// The lower-cased token, or why `text` is not one.
    public static func validate(_ text: String) -> Result<String, DeviceTokenError> {
        let count = text.utf8.count
        guard lengths.contains(count) else { return .failure(.length(count)) }
        var upper = false
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "F"): upper = true
            default: return .failure(.notHex)
            }
        }
        guard count % 2 == 0 else { return .failure(.oddLength) }
        return .success(upper ? text.lowercased() : text)
    }
}

/// Why a text is not a device token.
public enum DeviceTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    case length(Int)
    case notHex
    case oddLength

    public var description: String {
        switch self {
        case .length(let count):
            "\(count) characters; a token is \(DeviceTokenText.lengths.lowerBound) to \(DeviceTokenText.lengths.upperBound) hexadecimal characters"
        case .notHex: "not hexadecimal"
        case .oddLength: "an odd number of hexadecimal characters"
        }
    }
}

/// An iOS version, `major.minor.patch` (missing parts are 0), ordered by number.
public struct OSVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let major: Int
    public let minor: Int
    public let patch: Int

    public init(major: Int, minor: Int = 0, patch: Int = 0) {
        self.major = major
        self.minor = minor
        self.patch = patch
    }

    /// Parses `17`, `17.2` or `17.2.1` (each part 1 to 3 digits); nil for anything else.
    public init?(_ text: String) {
        var numbers = (0, 0, 0)
        var part = 0
        var digits = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, part < 2 else { return nil }
                part += 1
                digits = 0
                continue
            }
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte), digits < 3 else { return nil }
            digits += 1
            let digit = Int(byte - UInt8(ascii: "0"))
            switch part {
            case 0: numbers.0 = numbers.0 * 10 + digit
            case 1: numbers.1 = numbers.1 * 10 + digit
            default: numbers.2 = numbers.2 * 10 + digit
            }
        }
        guard digits > 0 else { return nil }
        self.init(major: numbers.0, minor: numbers.1, patch: numbers.2)
    }

    /// Live Activities exist from iOS 16.1.
    public static let liveActivities = OSVersion(major: 16, minor: 1)
    /// Push-to-start (`event: start`) works from iOS 17.2.
    public static let pushToStart = OSVersion(major: 17, minor: 2)
    /// `input-push-channel` and `input-push-token` work from iOS 18: a started activity can join a channel.
    public static let channels = OSVersion(major: 18)

    public static func < (lhs: OSVersion, rhs: OSVersion) -> Bool {
        (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
    }

    public var description: String { "\(major).\(minor).\(patch)" }
}

/// How a Live Activity receives its updates (`activities.push_type`).
public enum ActivityPushType: String, Sendable, Codable, CaseIterable {
    /// Its own update token: per-device pushes (mirroring).
    case token
    /// The event's broadcast channel (iOS 18 and later).
    case channel
}

/// A Live Activity's life as the app reports it (`activities.state`): active (or pending until its scheduled
/// start) until it ends or is dismissed. An ended or dismissed activity stays as a tombstone, so a late token
/// update of it changes nothing, and so a start run knows the device showed the event's activity.
public enum ActivityLifecycle {
    /// A stored activity state.
    public enum State: String, Sendable, Codable, CaseIterable {
        case active
        /// Scheduled by the app (iOS 26 `startDate`): iOS starts it at its start date.
        case pending
        case ended, dismissed
    }

    /// What the app reports.
    public enum Event: String, Sendable, CaseIterable {
        /// `PUT …/activities/{id}`: the activity runs (a new token, or the same).
        case registered
        /// `PUT …/activities/{id}` with a future `startDate`: iOS starts it then.
        case scheduled
        /// `DELETE …/activities/{id}`: `activityState` became `.ended`.
        case ended
        /// `DELETE …/activities/{id}?state=dismissed`: it left the Lock Screen.
        case dismissed
    }

    /// What performing an event does to a stored activity.
    public enum Action: Sendable, Equatable {
        /// Store the activity in `to` (insert or update).
        case store(State)
        /// Leave it as it is (a repeated end, a dismissal of a dismissed one).
        case keep
        /// Refuse: a registration of an activity that ended (409 `activity_ended`).
        case refuseEnded
    }

    /// The action for `event` on an activity stored in `state` (nil: none stored yet).
    public static func transition(from state: State?, on event: Event) -> Action {
        switch (state, event) {
        case (nil, .registered), (.active, .registered), (.pending, .registered): .store(.active)
        case (nil, .scheduled), (.pending, .scheduled): .store(.pending)
        // Started already: a repeated registration with its old start date changes nothing but its token.
        case (.active, .scheduled): .store(.active)
        case (.ended, .registered), (.dismissed, .registered), (.ended, .scheduled), (.dismissed, .scheduled): .refuseEnded
        case (nil, .ended), (.active, .ended), (.pending, .ended): .store(.ended)
        case (nil, .dismissed), (.active, .dismissed), (.pending, .dismissed), (.ended, .dismissed): .store(.dismissed)
        case (.ended, .ended), (.dismissed, .ended), (.dismissed, .dismissed): .keep
        }
    }

    /// The states that get updates: mirroring sends to active and pending `token` activities (a pending one from
    /// its start date on).
    public static let mirroredStates: [State] = [.active, .pending]
    /// Tombstones: the states no registration leaves.
    public static let finalStates: [State] = State.allCases.filter { transition(from: $0, on: .registered) == .refuseEnded }

    /// Whether a dismissal is the user's choice, which holds back every later start of the event: the activity was
    /// still running (active or pending: not ended by the app), and the dismissal was recorded while the activity's
    /// audience round was the event's current one and the event still took starts (before Marquee's end of that
    /// round went out). A dismissal of an ended activity, or after that end, is iOS clearing it.
    public static func dismissalIsTheUsers(activityRunning: Bool, activityRound: Int, eventRound: Int, eventTakesStarts: Bool) -> Bool {
        activityRunning && activityRound == eventRound && eventTakesStarts
    }
}

/// Which token APNs refused (`token_invalidations.token_kind`).
public enum TokenKind: String, Sendable, Codable, CaseIterable {
    case pushToStart = "push_to_start"
    case activity
}

/// What Marquee did with a refusal of a token (`token_invalidations.outcome`).
public enum InvalidationOutcome: String, Sendable, Codable, CaseIterable {
    /// The token was removed.
    case invalidated
    /// The token was registered again after APNs' time, so it is kept.
    case kept
    /// The token is flagged, not removed (BadDeviceToken, DeviceTokenNotForTopic).
    case refused
    /// No stored token had it (already rotated away or erased).
    case unmatched
}

/// APNs' refusals of a device token and what each decides (docs/apns.md#token-refusals).
public enum TokenRefusal: Sendable, Equatable {
    /// 410 `Unregistered` or `ExpiredToken`, with APNs' timestamp in milliseconds since 1970: the token is
    /// invalid only when it was not registered again after that time.
    case gone(reason: String, apnsTimestampMilliseconds: Int64?)
    /// 400 `BadDeviceToken`: not a token of this app's environment. Flagged and counted, not deleted.
    case badDeviceToken
    /// 400 `DeviceTokenNotForTopic`: the installation registered a token of another app.
    case notForTopic

    /// The reason as APNs names it.
    public var reason: String {
        switch self {
        case .gone(let reason, _): reason
        case .badDeviceToken: "BadDeviceToken"
        case .notForTopic: "DeviceTokenNotForTopic"
        }
    }

    /// What to do with a stored token that was last sent by the app at `seenAt` (nil: no stored token has it).
    public func outcome(tokenSeenAt seenAt: Date?) -> InvalidationOutcome {
        guard let seenAt else { return .unmatched }
        switch self {
        case .gone(_, let milliseconds):
            // Without a timestamp, APNs says the token is gone now.
            guard let milliseconds else { return .invalidated }
            return seenAt.timeIntervalSince1970 * 1000 > Double(milliseconds) ? .kept : .invalidated
        case .badDeviceToken, .notForTopic:
            return .refused
        }
    }
}
