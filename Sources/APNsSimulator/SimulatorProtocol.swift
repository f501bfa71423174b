// The simulator's own reading of Apple's documents: the three APIs it plays, the reasons (with their status
// and their spelling) that Apple lists for each, the header names and the limits. It is written from Apple's
// pages and never from Marquee's APNs client, so a wrong status or rule on the client side is caught by the
// simulator instead of being repeated by it (pushy's mock server keeps its own rejection table the same way).
//   Broadcasts and channel management:
//     https://developer.apple.com/documentation/usernotifications/handling-error-responses-from-apns
//   Device pushes (/3/device/<token>):
//     https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
// The two tables differ: broadcasts and channel management spell the 503 reason `Service Unavailable`, device
// pushes `ServiceUnavailable`; only device pushes document 410, `DuplicateHeaders`, `IdleTimeout`, `Forbidden`,
// `UnrelatedKeyIdInToken` and the topic and token reasons; only the broadcast table documents the channel reasons.

import MarqueeCore

/// One of the APIs the simulator plays; each has its own table of error reasons.
public enum SimulatorAPI: String, Sendable, Hashable, CaseIterable {
    /// `/1/apps/<bundle id>/channels` and `/all-channels` on the management host.
    case channelManagement
    /// `POST /4/broadcasts/apps/<bundle id>` on the push host.
    case broadcast
    /// `POST /3/device/<token>` on the push host (Live Activity updates, ends and push-to-starts).
    case devicePush
}

/// Why the simulator refuses a request. The text on the wire and the status depend on the API: `SimulatorAPI.answer(for:)`.
public enum SimulatorReason: Sendable, Hashable, CaseIterable {
    // 400
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic, deviceTokenNotForTopic
    case duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken, missingTopic, payloadEmpty, topicDisallowed
    case featureNotEnabled, missingChannelId, badChannelId, channelNotRegistered, badRequestParams, badRequestPayload
    case missingPushType, cannotCreateChannelConfig
    // 403
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken
    case missingProviderToken, unrelatedKeyIdInToken, topicMismatch
    // 404, 405
    case badPath, methodNotAllowed
    // 410
    case expiredToken, unregistered
    // 413
    case payloadTooLarge
    // 429
    case tooManyProviderTokenUpdates, tooManyRequests
    // 500, 503
    case internalServerError, serviceUnavailable, shutdown
}

/// What a rejection looks like on the wire: the status and the `reason` text.
public struct SimulatorAnswer: Sendable, Hashable, CustomStringConvertible {
    public var status: Int
    public var text: String

    public var description: String { "\(status) \(text)" }
}

extension SimulatorAPI {
    /// The status and text Apple documents for `reason` on this API; nil when this API's table does not list it.
    public func answer(for reason: SimulatorReason) -> SimulatorAnswer? {
        let table = self == .devicePush ? SimulatorReasonTables.devicePush : SimulatorReasonTables.broadcastAndManagement
        return table[reason]
    }

    /// Every reason of this API's table.
    public var documentedReasons: [SimulatorReason] {
        SimulatorReason.allCases.filter { answer(for: $0) != nil }
    }
}

/// Apple's two tables, transcribed as the simulator reads them.
enum SimulatorReasonTables {
    /// https://developer.apple.com/documentation/usernotifications/handling-error-responses-from-apns
    /// ("possible error codes included in the reason key"), which the broadcast and channel-management pages point to.
    static let broadcastAndManagement: [SimulatorReason: SimulatorAnswer] = table([
        (.featureNotEnabled, 400, "FeatureNotEnabled"), (.missingChannelId, 400, "MissingChannelId"),
        (.badChannelId, 400, "BadChannelId"), (.channelNotRegistered, 400, "ChannelNotRegistered"),
        (.badRequestParams, 400, "BadRequestParams"), (.badRequestPayload, 400, "BadRequestPayload"),
        (.payloadEmpty, 400, "PayloadEmpty"), (.badMessageId, 400, "BadMessageId"),
        (.missingPushType, 400, "MissingPushType"), (.invalidPushType, 400, "InvalidPushType"),
        (.cannotCreateChannelConfig, 400, "CannotCreateChannelConfig"), (.badExpirationDate, 400, "BadExpirationDate"),
        (.topicDisallowed, 400, "TopicDisallowed"), (.badPriority, 400, "BadPriority"),
        (.badCertificate, 403, "BadCertificate"), (.badCertificateEnvironment, 403, "BadCertificateEnvironment"),
        (.topicMismatch, 403, "TopicMismatch"), (.missingProviderToken, 403, "MissingProviderToken"),
        (.expiredProviderToken, 403, "ExpiredProviderToken"), (.invalidProviderToken, 403, "InvalidProviderToken"),
        (.badPath, 404, "BadPath"), (.methodNotAllowed, 405, "MethodNotAllowed"),
        (.payloadTooLarge, 413, "PayloadTooLarge"),
        (.tooManyRequests, 429, "TooManyRequests"), (.tooManyProviderTokenUpdates, 429, "TooManyProviderTokenUpdates"),
        (.internalServerError, 500, "InternalServerError"),
        // Sic: with a space, on this page only.
        (.serviceUnavailable, 503, "Service Unavailable"), (.shutdown, 503, "Shutdown"),
    ])

    /// https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
    /// ("Response error strings"), for requests to /3/device/<token>.
    static let devicePush: [SimulatorReason: SimulatorAnswer] = table([
        (.badCollapseId, 400, "BadCollapseId"), (.badDeviceToken, 400, "BadDeviceToken"),
        (.badExpirationDate, 400, "BadExpirationDate"), (.badMessageId, 400, "BadMessageId"),
        (.badPriority, 400, "BadPriority"), (.badTopic, 400, "BadTopic"),
        (.deviceTokenNotForTopic, 400, "DeviceTokenNotForTopic"), (.duplicateHeaders, 400, "DuplicateHeaders"),
        (.idleTimeout, 400, "IdleTimeout"), (.invalidPushType, 400, "InvalidPushType"),
        (.missingDeviceToken, 400, "MissingDeviceToken"), (.missingTopic, 400, "MissingTopic"),
        (.payloadEmpty, 400, "PayloadEmpty"), (.topicDisallowed, 400, "TopicDisallowed"),
        (.badCertificate, 403, "BadCertificate"), (.badCertificateEnvironment, 403, "BadCertificateEnvironment"),
        (.expiredProviderToken, 403, "ExpiredProviderToken"), (.forbidden, 403, "Forbidden"),
        (.invalidProviderToken, 403, "InvalidProviderToken"), (.missingProviderToken, 403, "MissingProviderToken"),
        (.unrelatedKeyIdInToken, 403, "UnrelatedKeyIdInToken"),
        (.badPath, 404, "BadPath"), (.methodNotAllowed, 405, "MethodNotAllowed"),
        (.expiredToken, 410, "ExpiredToken"), (.unregistered, 410, "Unregistered"),
        (.payloadTooLarge, 413, "PayloadTooLarge"),
        (.tooManyProviderTokenUpdates, 429, "TooManyProviderTokenUpdates"), (.tooManyRequests, 429, "TooManyRequests"),
        (.internalServerError, 500, "InternalServerError"),
        (.serviceUnavailable, 503, "ServiceUnavailable"), (.shutdown, 503, "Shutdown"),
    ])

    private static func table(_ rows: [(SimulatorReason, Int, String)]) -> [SimulatorReason: SimulatorAnswer] {
        Dictionary(uniqueKeysWithValues: rows.map { ($0.0, SimulatorAnswer(status: $0.1, text: $0.2)) })
    }
}

/// Header names the simulator reads and writes (HTTP/2 names are lowercase), as Apple's request and response tables
/// spell them.
public enum SimulatorHeader {
    public static let authorization = "authorization"
    /// Request and answer id of broadcasts and channel management.
    public static let requestID = "apns-request-id"
    /// Request and answer id of device pushes.
    public static let id = "apns-id"
    /// Answers to broadcasts (and to device pushes in development).
    public static let uniqueID = "apns-unique-id"
    public static let channelID = "apns-channel-id"
    public static let pushType = "apns-push-type"
    public static let expiration = "apns-expiration"
    public static let priority = "apns-priority"
    public static let topic = "apns-topic"
    public static let collapseID = "apns-collapse-id"
    public static let contentType = "content-type"
}

/// Fixed values and limits from Apple's pages.
public enum SimulatorLimits {
    /// "the payload is limited to a maximum size of 5 KB (5,120 bytes)" (sending-broadcast-push-notification-requests-to-apns).
    public static let broadcastPayload = 5_120
    /// "limited to a maximum size of 4 KB (4096 bytes)" for non-VoIP pushes (sending-notification-requests-to-apns).
    public static let devicePushPayload = 4_096
    /// "The value of this key must not exceed 64 bytes" (`apns-collapse-id`).
    public static let collapseID = 64
    /// `apns-priority` values Apple documents, on both the broadcast and the device-push page: 10, 5 and 1.
    public static let priorities: Set<Int> = [10, 5, 1]
    /// The `push-type` value of a channel-create body and the `apns-push-type` of broadcasts and Live Activity pushes,
    /// compared without case: Apple writes it `LiveActivity`, `Liveactivity` and `liveactivity` on different pages.
    public static let liveActivityPushType = "liveactivity"
    /// `apns-topic` of a Live Activity device push: `<bundle id>.push-type.liveactivity` (ActivityKit push page);
    /// broadcast and channel paths take the plain bundle id (`TopicDisallowed`).
    public static let liveActivityTopicSuffix = ".push-type.liveactivity"
    /// "APNs rejects any request whose token contains a timestamp that's more than one hour old".
    public static let providerTokenLifetime: Double = 60 * 60
    /// "APNs report an error if you use a new token more than once every 20 minutes on the same connection".
    public static let providerTokenChangeInterval: Double = 20 * 60
    /// "you can maintain up to 10,000 channels for your app in the development and production environment, respectively".
    public static let channelsPerApp = 10_000
}

/// The environment a simulator plays (Apple's development/sandbox or production hosts).
public enum SimulatorEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    /// `apns-unique-id` is on device-push answers "only available in the Development environment".
    case development
    case production

    /// Parses `development`, `sandbox` or `production`, in any case.
    public init?(parsing text: String) {
        switch text.lowercased() {
        case "development", "sandbox": self = .development
        case "production": self = .production
        default: return nil
        }
    }
}

/// A channel's `message-storage-policy`, fixed at creation: 0 No Message Stored, 1 Most Recent Message Stored.
public enum SimulatorStoragePolicy: Int, Sendable, Hashable, CaseIterable, Codable {
    /// Broadcasts on it take only `apns-expiration: 0` (`BadExpirationDate` otherwise).
    case noMessageStored = 0
    /// The most recent message is kept for offline devices, up to 8 hours.
    case mostRecentMessageStored = 1
}

/// The JSON body of an error answer or a GOAWAY: `{"reason": ..., "timestamp": <epoch ms, 410 only>}`.
enum SimulatorErrorBody {
    static func json(reason text: String, timestamp: Int64? = nil) -> [UInt8] {
        var object: JSONObject = ["reason": .string(text)]
        if let timestamp { object["timestamp"] = .int(timestamp) }
        return JSONValue.object(object).jsonBytes
    }
}
