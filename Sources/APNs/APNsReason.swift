// Every `reason` APNs documents (docs/apns.md#reasons-broadcast, #reasons-device), with the status Apple pairs it with.
// The client reads them; the simulator writes them. Unknown reasons are kept verbatim in `.other`.

/// The `reason` of an APNs error answer.
public enum APNsReason: Sendable, Hashable, CustomStringConvertible {
    // 400
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken, missingTopic
    case payloadEmpty, topicDisallowed
    case featureNotEnabled, missingChannelId, badChannelId, channelNotRegistered, badRequestParams, badRequestPayload
    case missingPushType, cannotCreateChannelConfig
    // 403
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken
    case missingProviderToken, unrelatedKeyIdInToken, topicMismatch
    /// Reported by client libraries for a key used in the wrong environment; not in Apple's tables (docs/apns.md#provider-tokens).
    case badEnvironmentKeyInToken
    // 404, 405
    case badPath, methodNotAllowed
    // 410
    case expiredToken, unregistered
    // 413
    case payloadTooLarge
    // 429
    case tooManyProviderTokenUpdates, tooManyRequests
    // 500, 503
    case internalServerError
    /// Read from both `ServiceUnavailable` (device API) and `Service Unavailable` (broadcast API); written without the space.
    case serviceUnavailable
    case shutdown
    /// A reason this list does not know, verbatim.
    case other(String)

    /// Every documented reason: its case, its text on the wire, and the status APNs answers with.
    public static let documented: [(reason: APNsReason, text: String, status: Int)] = [
        (.badCollapseId, "BadCollapseId", 400), (.badDeviceToken, "BadDeviceToken", 400),
        (.badExpirationDate, "BadExpirationDate", 400), (.badMessageId, "BadMessageId", 400),
        (.badPriority, "BadPriority", 400), (.badTopic, "BadTopic", 400),
        (.deviceTokenNotForTopic, "DeviceTokenNotForTopic", 400), (.duplicateHeaders, "DuplicateHeaders", 400),
        (.idleTimeout, "IdleTimeout", 400), (.invalidPushType, "InvalidPushType", 400),
        (.missingDeviceToken, "MissingDeviceToken", 400), (.missingTopic, "MissingTopic", 400),
        (.payloadEmpty, "PayloadEmpty", 400), (.topicDisallowed, "TopicDisallowed", 400),
        (.featureNotEnabled, "FeatureNotEnabled", 400), (.missingChannelId, "MissingChannelId", 400),
        (.badChannelId, "BadChannelId", 400), (.channelNotRegistered, "ChannelNotRegistered", 400),
        (.badRequestParams, "BadRequestParams", 400), (.badRequestPayload, "BadRequestPayload", 400),
        (.missingPushType, "MissingPushType", 400), (.cannotCreateChannelConfig, "CannotCreateChannelConfig", 400),
        (.badCertificate, "BadCertificate", 403), (.badCertificateEnvironment, "BadCertificateEnvironment", 403),
        (.expiredProviderToken, "ExpiredProviderToken", 403), (.forbidden, "Forbidden", 403),
        (.invalidProviderToken, "InvalidProviderToken", 403), (.missingProviderToken, "MissingProviderToken", 403),
        (.unrelatedKeyIdInToken, "UnrelatedKeyIdInToken", 403), (.topicMismatch, "TopicMismatch", 403),
        (.badEnvironmentKeyInToken, "BadEnvironmentKeyInToken", 403),
        (.badPath, "BadPath", 404), (.methodNotAllowed, "MethodNotAllowed", 405),
        (.expiredToken, "ExpiredToken", 410), (.unregistered, "Unregistered", 410),
        (.payloadTooLarge, "PayloadTooLarge", 413),
        (.tooManyProviderTokenUpdates, "TooManyProviderTokenUpdates", 429), (.tooManyRequests, "TooManyRequests", 429),
        (.internalServerError, "InternalServerError", 500),
        (.serviceUnavailable, "ServiceUnavailable", 503), (.shutdown, "Shutdown", 503),
    ]

    private static let byText: [String: APNsReason] = {
        var table = Dictionary(uniqueKeysWithValues: documented.map { ($0.text, $0.reason) })
        table["Service Unavailable"] = .serviceUnavailable
        return table
    }()
    private static let byReason = Dictionary(uniqueKeysWithValues: documented.map { ($0.reason, (text: $0.text, status: $0.status)) })

    /// Reads a reason as APNs wrote it.
    public init(_ text: String) { self = Self.byText[text] ?? .other(text) }

    /// The reason as it appears on the wire.
    public var text: String {
        if case .other(let text) = self { return text }
        return Self.byReason[self]!.text
    }

    /// The HTTP status APNs pairs with this reason; nil for `.other`.
    public var status: Int? { Self.byReason[self]?.status }

    public var description: String { text }
}
