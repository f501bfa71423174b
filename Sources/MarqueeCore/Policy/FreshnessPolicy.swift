// What an event's pushes carry besides their state, decided at send time (docs/api.md, "Freshness policies").
// ActivityKit shows a Live Activity past its `stale-date` as out of date, ranks activities by their
// `relevance-score`, and removes an ended one at its `dismissal-date` (at most 4 hours after the end). So:
// - `staleAfter`: every update goes with stale-date = its send time + staleAfter; a feed that falls silent shows
//   as stale instead of leaving an old score looking current. An end's state is final and goes without one.
// - relevance: `relevanceScore` (default 50), raised by `alertBoost` (default 50) from an alert's broadcast for
//   `alertBoostSeconds` (default 300); an end goes with 0.
// - `dismissAfter`: an end without a dismissal date of its own is dismissed that long after it is sent.
// Values an update sets itself win. An event's members win over its attribute type's, and those over the defaults.
import Foundation

/// A freshness policy as stored: the members an attribute type or an event sets (nil: not set there).
public struct FreshnessSettings: Sendable, Equatable {
    public var staleAfter: Int?
    public var relevanceScore: Double?
    public var alertBoost: Double?
    public var alertBoostSeconds: Int?
    public var dismissAfter: Int?

    public init(
        staleAfter: Int? = nil, relevanceScore: Double? = nil, alertBoost: Double? = nil, alertBoostSeconds: Int? = nil,
        dismissAfter: Int? = nil
    ) {
        self.staleAfter = staleAfter
        self.relevanceScore = relevanceScore
        self.alertBoost = alertBoost
        self.alertBoostSeconds = alertBoostSeconds
        self.dismissAfter = dismissAfter
    }

    /// The members' names, as the API and the stored documents spell them.
    public static let fields: Set<String> = ["staleAfter", "relevanceScore", "alertBoost", "alertBoostSeconds", "dismissAfter"]

    /// Reads `{"staleAfter": 120, ...}` (every member optional; `null` is unset); `path` prefixes the field a
    /// refusal names (`"freshness."` inside an event).
    public init(json: JSONValue, path: String = "") throws(FreshnessSettingsError) {
        guard case .object(let object) = json else {
            throw FreshnessSettingsError(field: path.isEmpty ? nil : String(path.dropLast()), "must be an object")
        }
        if let unknown = object.keys.sorted().first(where: { !Self.fields.contains($0) }) {
            let members = Self.fields.sorted().joined(separator: ", ")
            throw FreshnessSettingsError(field: path + unknown, "is not a policy member; the members are \(members)")
        }
        func seconds(_ name: String, in range: ClosedRange<Int>, _ rule: String) throws(FreshnessSettingsError) -> Int? {
            guard let value = object[name], !value.isNull else { return nil }
            guard let number = value.intValue, let int = Int(exactly: number) else {
                throw FreshnessSettingsError(field: path + name, "must be a whole number of seconds")
            }
            guard range.contains(int) else { throw FreshnessSettingsError(field: path + name, rule) }
            return int
        }
        func score(_ name: String) throws(FreshnessSettingsError) -> Double? {
            guard let value = object[name], !value.isNull else { return nil }
            guard let number = value.doubleValue, number.isFinite else { throw FreshnessSettingsError(field: path + name, "must be a number") }
            guard Self.scoreRange.contains(number) else { throw FreshnessSettingsError(field: path + name, Self.scoreRule) }
            return number
        }
        staleAfter = try seconds("staleAfter", in: 1...Self.maximumStaleAfter, "must be between 1 and \(Self.maximumStaleAfter) seconds (8 hours)")
        relevanceScore = try score("relevanceScore")
        alertBoost = try score("alertBoost")
        alertBoostSeconds = try seconds(
            "alertBoostSeconds", in: 0...Self.maximumStaleAfter, "must be between 0 and \(Self.maximumStaleAfter) seconds (8 hours)")
        dismissAfter = try seconds(
            "dismissAfter", in: 0...Int(DismissalPolicy.maximumAfterEnd),
            "must be between 0 and \(Int(DismissalPolicy.maximumAfterEnd)) seconds: an ended Live Activity stays at most 4 hours")
    }

    /// The set members only.
    public var json: JSONValue {
        var object = JSONObject()
        if let staleAfter { object["staleAfter"] = .int(Int64(staleAfter)) }
        if let relevanceScore { object["relevanceScore"] = FreshnessPolicy.number(relevanceScore) }
        if let alertBoost { object["alertBoost"] = FreshnessPolicy.number(alertBoost) }
        if let alertBoostSeconds { object["alertBoostSeconds"] = .int(Int64(alertBoostSeconds)) }
        if let dismissAfter { object["dismissAfter"] = .int(Int64(dismissAfter)) }
        return .object(object)
    }

    /// A Live Activity lasts at most 8 hours: a stale date or a boost further out never shows.
    public static let maximumStaleAfter = 8 * 3600
    public static let maximumScore: Double = 1_000_000
    /// The one scale of a relevance score (a policy's, an update's, the CLI's `--relevance-score`): the default is 50.
    public static let scoreRange: ClosedRange<Double> = 0...maximumScore
    /// What a score outside `scoreRange` is told.
    public static let scoreRule = "must be between 0 and \(Int(maximumScore)) (the default score is 50)"
}

/// A policy member that cannot be stored, with the field to name.
public struct FreshnessSettingsError: Error, Equatable, CustomStringConvertible {
    public var field: String?
    public var message: String

    public init(field: String?, _ message: String) {
        self.field = field
        self.message = message
    }

    public var description: String { field.map { "\($0) \(message)" } ?? message }
}

/// The policy in force for an event: its own members over its type's over the defaults.
public struct FreshnessPolicy: Sendable, Equatable {
    /// Nil: updates go without a stale date unless they set one.
    public var staleAfter: TimeInterval?
    public var relevanceScore: Double
    public var alertBoost: Double
    public var alertBoostSeconds: TimeInterval
    /// Nil: an end without a dismissal date of its own goes without one (ActivityKit's default, up to 4 hours).
    public var dismissAfter: TimeInterval?

    public static let defaults = FreshnessPolicy(
        staleAfter: nil, relevanceScore: 50, alertBoost: 50, alertBoostSeconds: 300, dismissAfter: nil)

    public init(staleAfter: TimeInterval?, relevanceScore: Double, alertBoost: Double, alertBoostSeconds: TimeInterval, dismissAfter: TimeInterval?) {
        self.staleAfter = staleAfter
        self.relevanceScore = relevanceScore
        self.alertBoost = alertBoost
        self.alertBoostSeconds = alertBoostSeconds
        self.dismissAfter = dismissAfter
    }

    /// The event's members over its attribute type's over `defaults`.
    public init(event: FreshnessSettings?, type: FreshnessSettings?) {
        let defaults = Self.defaults
        staleAfter = (event?.staleAfter ?? type?.staleAfter).map(TimeInterval.init) ?? defaults.staleAfter
        relevanceScore = event?.relevanceScore ?? type?.relevanceScore ?? defaults.relevanceScore
        alertBoost = event?.alertBoost ?? type?.alertBoost ?? defaults.alertBoost
        alertBoostSeconds = (event?.alertBoostSeconds ?? type?.alertBoostSeconds).map(TimeInterval.init) ?? defaults.alertBoostSeconds
        dismissAfter = (event?.dismissAfter ?? type?.dismissAfter).map(TimeInterval.init) ?? defaults.dismissAfter
    }

    /// The fields of a push sent at `sentAt`: what the update set itself, else what the policy gives.
    /// `carriesAlert`: this push has an alert (its broadcast starts the boost); `lastAlertAt`: when the
    /// channel's last broadcast with an alert was accepted.
    public func fields(for action: UpdateAction, explicit: SendTimeFields, carriesAlert: Bool, lastAlertAt: Date?, sentAt: Date)
        -> SendTimeFields
    {
        switch action {
        case .update:
            let boosted = carriesAlert || lastAlertAt.map { sentAt.timeIntervalSince($0) < alertBoostSeconds } == true
            return SendTimeFields(
                staleDate: explicit.staleDate ?? staleAfter.map { sentAt.addingTimeInterval($0) },
                relevanceScore: explicit.relevanceScore ?? relevanceScore + (boosted ? alertBoost : 0), dismissalDate: nil)
        case .end:
            return SendTimeFields(
                staleDate: explicit.staleDate, relevanceScore: explicit.relevanceScore ?? 0,
                dismissalDate: explicit.dismissalDate ?? dismissAfter.map { sentAt.addingTimeInterval($0) })
        }
    }

    /// What the policy in force is, every member set.
    public var json: JSONValue {
        [
            "staleAfter": staleAfter.map { .int(Int64($0)) } ?? .null, "relevanceScore": Self.number(relevanceScore),
            "alertBoost": Self.number(alertBoost), "alertBoostSeconds": .int(Int64(alertBoostSeconds)),
            "dismissAfter": dismissAfter.map { .int(Int64($0)) } ?? .null,
        ]
    }

    static func number(_ value: Double) -> JSONValue { Int64(exactly: value).map(JSONValue.int) ?? .double(value) }
}

/// The fields of a push that depend on when it is sent.
public struct SendTimeFields: Sendable, Equatable {
    public var staleDate: Date?
    public var relevanceScore: Double?
    public var dismissalDate: Date?

    public init(staleDate: Date? = nil, relevanceScore: Double? = nil, dismissalDate: Date? = nil) {
        self.staleDate = staleDate
        self.relevanceScore = relevanceScore
        self.dismissalDate = dismissalDate
    }

    /// The widest fields the send may add to what an update sets (for the size check at ingest, before the
    /// send time and the policy then in force are known): a 10-digit stale and dismissal date, and the longest
    /// number a relevance score can print as.
    public func widestAtSend(for action: UpdateAction) -> SendTimeFields {
        let farDate = Date(timeIntervalSince1970: 9_999_999_999)
        return SendTimeFields(
            staleDate: staleDate ?? (action == .update ? farDate : nil),
            relevanceScore: relevanceScore ?? -Double.greatestFiniteMagnitude,
            dismissalDate: action == .end ? dismissalDate ?? farDate : nil)
    }
}
