// The `aps` dictionary of a Live Activity push, built the way Apple's samples show it: `sound` inside
// `alert`, dates as integer epoch seconds, `attributes-type` and `attributes` only on start. The same
// body travels as a broadcast (5,120-byte limit) or a device push (4,096), so Marquee checks updates
// against the smaller limit at ingest.

import Foundation

/// What a Live Activity push asks the device to do.
public enum LiveActivityEvent: String, Sendable, Codable, CaseIterable {
    case start
    case update
    case end
}

/// An alert title or body: plain text, or a key into the app's Localizable strings with arguments.
public enum AlertText: Sendable, Equatable {
    case plain(String)
    case localized(key: String, arguments: [String] = [])

    /// A string, or `{"loc-key": ..., "loc-args": [...]}`.
    public var json: JSONValue {
        switch self {
        case .plain(let text): .string(text)
        case .localized(let key, let arguments): ["loc-key": .string(key), "loc-args": .array(arguments.map(JSONValue.string))]
        }
    }
}

/// The alert of a Live Activity push. `sound` sits inside `alert`, as in Apple's Live Activity samples.
public struct LiveActivityAlert: Sendable, Equatable {
    public var title: AlertText
    public var body: AlertText
    /// `"default"` or a sound file name in the app bundle; nil for no sound.
    public var sound: String?

    public init(title: AlertText, body: AlertText, sound: String? = nil) {
        self.title = title
        self.body = body
        self.sound = sound
    }

    /// `{"title": ..., "body": ..., "sound": ...}` as it appears inside `aps`.
    public var json: JSONValue {
        var object: JSONObject = ["title": title.json, "body": body.json]
        if let sound { object["sound"] = .string(sound) }
        return .object(object)
    }
}

extension LiveActivityAlert {
    /// Reads an alert as an ingester sends it, in the same shape as `json`: `title` and `body` are
    /// strings or `{"locKey": string, "locArgs": [string]}` (`locArgs` optional; APNs' spelling `loc-key` and
    /// `loc-args` is taken too); `sound` is optional.
    public init(json: JSONValue, at path: JSONPath = ["alert"]) throws(ValidationError) {
        guard case .object(let object) = json else {
            throw ValidationError(.wrongType(expected: "object", found: json.typeName), at: path)
        }
        try Self.refuseUnknownKeys(object, allowed: ["title", "body", "sound"], at: path)
        let title = try Self.text(object["title"], at: path.appending(key: "title"))
        let body = try Self.text(object["body"], at: path.appending(key: "body"))
        var sound: String?
        switch object["sound"] {
        case nil, .null?: sound = nil
        case .string(let name)?: sound = name
        case let other?: throw ValidationError(.wrongType(expected: "string", found: other.typeName), at: path.appending(key: "sound"))
        }
        self.init(title: title, body: body, sound: sound)
    }

    private static func text(_ value: JSONValue?, at path: JSONPath) throws(ValidationError) -> AlertText {
        switch value {
        case nil: throw ValidationError(.missingField, at: path)
        case .string(let text)?: return .plain(text)
        case .object(var object)?:
            // The API's one spelling is `locKey` and `locArgs`; APNs' `loc-key` and `loc-args` are taken too.
            for (camel, apns) in [("locKey", "loc-key"), ("locArgs", "loc-args")] {
                guard let value = object.removeValue(forKey: camel) else { continue }
                guard object[apns] == nil else { throw ValidationError(.unknownField, at: path.appending(key: camel)) }
                object[apns] = value
            }
            try refuseUnknownKeys(object, allowed: ["loc-key", "loc-args"], at: path)
            guard let keyValue = object["loc-key"] else { throw ValidationError(.missingField, at: path.appending(key: "loc-key")) }
            guard case .string(let key) = keyValue else {
                throw ValidationError(.wrongType(expected: "string", found: keyValue.typeName), at: path.appending(key: "loc-key"))
            }
            var arguments: [String] = []
            if let argumentsValue = object["loc-args"] {
                guard case .array(let elements) = argumentsValue else {
                    throw ValidationError(.wrongType(expected: "array", found: argumentsValue.typeName), at: path.appending(key: "loc-args"))
                }
                for (index, element) in elements.enumerated() {
                    guard case .string(let argument) = element else {
                        throw ValidationError(
                            .wrongType(expected: "string", found: element.typeName), at: path.appending(key: "loc-args").appending(index: index))
                    }
                    arguments.append(argument)
                }
            }
            return .localized(key: key, arguments: arguments)
        case let other?:
            throw ValidationError(.wrongType(expected: "string or {\"loc-key\", \"loc-args\"}", found: other.typeName), at: path)
        }
    }

    private static func refuseUnknownKeys(_ object: JSONObject, allowed: Set<String>, at path: JSONPath) throws(ValidationError) {
        for key in object.keys where !allowed.contains(key) {
            throw ValidationError(.unknownField, at: path.appending(key: key))
        }
    }
}

/// How a push-to-started activity receives later updates (iOS 18+).
public enum StartSubscription: Sendable, Equatable {
    /// `input-push-channel`: the activity listens on this broadcast channel.
    case channel(String)
    /// `input-push-token: 1`: the system issues an update token for the activity.
    case pushToken
}

/// The size limits APNs enforces on a request body.
public enum PayloadLimit: Int, Sendable, Equatable {
    /// Device-token pushes (update, end, push-to-start): 4,096 bytes.
    case device = 4096
    /// Broadcasts on a channel: 5,120 bytes.
    case broadcast = 5120

    /// What Marquee enforces at ingest, so every update can travel either way.
    public static let ingest = PayloadLimit.device
}

/// A payload larger than its limit; make the content state or alert smaller.
public struct PayloadTooLarge: Error, Equatable, CustomStringConvertible {
    public var size: Int
    public var limit: Int

    public var description: String {
        "payload is \(size) bytes, over the \(limit)-byte limit by \(size - limit); shorten the content state or alert"
    }
}

/// The body of a Live Activity push: `{"aps": {...}}`.
public struct LiveActivityPayload: Sendable, Equatable {
    /// `aps.timestamp`, Unix seconds; strictly increasing per channel (see `TimestampSequencer`).
    public var timestamp: Int64
    public var event: LiveActivityEvent
    /// App-form content state (see `ActivityType.encodeContentState`); optional on end.
    public var contentState: JSONValue?
    public var staleDate: Date?
    /// End only: when the ended activity leaves the Lock Screen (a past date dismisses at once).
    public var dismissalDate: Date?
    public var relevanceScore: Double?
    public var alert: LiveActivityAlert?
    /// Start only.
    public var attributesType: String?
    /// Start only: app-form attributes.
    public var attributes: JSONValue?
    /// Start only.
    public var subscription: StartSubscription?

    /// An `update` push.
    public static func update(
        timestamp: Int64, contentState: JSONValue, staleDate: Date? = nil, relevanceScore: Double? = nil,
        alert: LiveActivityAlert? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            timestamp: timestamp, event: .update, contentState: contentState, staleDate: staleDate,
            relevanceScore: relevanceScore, alert: alert)
    }

    /// An `end` push; the final content state is optional but recommended.
    public static func end(
        timestamp: Int64, contentState: JSONValue? = nil, dismissalDate: Date? = nil, staleDate: Date? = nil,
        relevanceScore: Double? = nil, alert: LiveActivityAlert? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            timestamp: timestamp, event: .end, contentState: contentState, staleDate: staleDate,
            dismissalDate: dismissalDate, relevanceScore: relevanceScore, alert: alert)
    }

    /// A push-to-start push (device token only; channels cannot start activities). Apple requires an alert.
    public static func start(
        timestamp: Int64, attributesType: String, attributes: JSONValue, contentState: JSONValue,
        alert: LiveActivityAlert, subscription: StartSubscription? = nil, staleDate: Date? = nil,
        relevanceScore: Double? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            timestamp: timestamp, event: .start, contentState: contentState, staleDate: staleDate,
            relevanceScore: relevanceScore, alert: alert, attributesType: attributesType, attributes: attributes,
            subscription: subscription)
    }

    /// `{"aps": {...}}` with keys in a fixed order.
    public var json: JSONValue {
        var aps: JSONObject = ["timestamp": .int(timestamp), "event": .string(event.rawValue)]
        if let contentState { aps["content-state"] = contentState }
        if let staleDate { aps["stale-date"] = .int(Self.epochSeconds(staleDate)) }
        if let dismissalDate { aps["dismissal-date"] = .int(Self.epochSeconds(dismissalDate)) }
        if let relevanceScore {
            aps["relevance-score"] = Int64(exactly: relevanceScore).map(JSONValue.int) ?? .double(relevanceScore)
        }
        if let alert { aps["alert"] = alert.json }
        if let attributesType { aps["attributes-type"] = .string(attributesType) }
        if let attributes { aps["attributes"] = attributes }
        switch subscription {
        case .channel(let id)?: aps["input-push-channel"] = .string(id)
        case .pushToken?: aps["input-push-token"] = 1
        case nil: break
        }
        return ["aps": .object(aps)]
    }

    /// The request body.
    public var bytes: [UInt8] { json.jsonBytes }

    /// The request body, or `PayloadTooLarge` when it exceeds `limit`.
    public func body(within limit: PayloadLimit) throws(PayloadTooLarge) -> [UInt8] {
        let body = bytes
        guard body.count <= limit.rawValue else { throw PayloadTooLarge(size: body.count, limit: limit.rawValue) }
        return body
    }

    private static func epochSeconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }
}

extension LiveActivityPayload {
    /// The push of an update or an end with its send-time fields (an end with an empty state goes without one).
    public init(action: UpdateAction, timestamp: Int64, contentState: JSONValue, fields: SendTimeFields, alert: LiveActivityAlert?) {
        switch action {
        case .update:
            self = .update(
                timestamp: timestamp, contentState: contentState, staleDate: fields.staleDate, relevanceScore: fields.relevanceScore,
                alert: alert)
        case .end:
            self = .end(
                timestamp: timestamp, contentState: contentState == [:] ? nil : contentState, dismissalDate: fields.dismissalDate,
                staleDate: fields.staleDate, relevanceScore: fields.relevanceScore, alert: alert)
        }
    }
}
