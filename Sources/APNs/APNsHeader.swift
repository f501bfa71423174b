// Names and fixed values of the APNs HTTP/2 API, shared by the client and the simulator,
// so both sides spell the protocol the same way (docs/apns.md: what Apple documents, with its pages).

/// Header names APNs reads and writes (HTTP/2 header names are lowercase).
public enum APNsHeader {
    public static let authorization = "authorization"
    public static let requestID = "apns-request-id"
    public static let uniqueID = "apns-unique-id"
    public static let channelID = "apns-channel-id"
    public static let pushType = "apns-push-type"
    public static let expiration = "apns-expiration"
    public static let priority = "apns-priority"
    public static let topic = "apns-topic"
    public static let id = "apns-id"
    public static let collapseID = "apns-collapse-id"
    public static let contentType = "content-type"
    /// Not documented by Apple; honoured when present on a 429.
    public static let retryAfter = "retry-after"
}

/// Fixed protocol values Marquee sends.
public enum APNsProtocol {
    /// `apns-push-type` for broadcasts and Live Activity device pushes (Apple's samples; casing undocumented, docs/apns.md#push-type-casing).
    public static let liveActivityPushType = "liveactivity"
    /// `push-type` in a channel-create body (Apple's documented value).
    public static let channelPushType = "LiveActivity"
    /// Suffix of `apns-topic` for Live Activity device pushes: `<bundle id>.push-type.liveactivity`.
    public static let liveActivityTopicSuffix = ".push-type.liveactivity"
    /// `authorization` value prefix for provider tokens.
    public static let bearerPrefix = "bearer "
}

/// Largest payloads APNs accepts, checked before sending.
public enum APNsPayloadLimit {
    /// Broadcast bodies: 5 KB.
    public static let broadcast = 5_120
    /// Device-token pushes (update, end, push-to-start): 4 KB.
    public static let devicePush = 4_096
}
