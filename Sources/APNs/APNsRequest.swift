// APNs requests as values: each knows its host kind, method, path, headers and body, exactly as the
// docs/apns.md#channel-management, #broadcast and #device-push give them. The client adds only `authorization` (the current provider token).
import Foundation
import MarqueeCore

/// What an APNs request does; decides how its answer is read.
public enum APNsOperation: String, Sendable, Hashable, CaseIterable {
    case createChannel
    case readChannel
    case deleteChannel
    case listChannels
    case broadcast
    case devicePush

    /// The service that handles the operation.
    public var hostKind: APNsHostKind {
        switch self {
        case .createChannel, .readChannel, .deleteChannel, .listChannels: .management
        case .broadcast, .devicePush: .push
        }
    }
}

/// One APNs HTTP/2 request, ready to send once `authorization` is added.
public struct APNsRequest: Sendable, Hashable, CustomStringConvertible {
    /// The HTTP methods APNs uses.
    public enum Method: String, Sendable, Hashable {
        case get = "GET"
        case post = "POST"
        case delete = "DELETE"
    }

    public let operation: APNsOperation
    public let method: Method
    /// The `:path`, starting with `/`.
    public let path: String
    /// Lowercase header names to values; no `authorization`.
    public let headers: [String: String]
    public let body: [UInt8]

    /// The service to send it to.
    public var hostKind: APNsHostKind { operation.hostKind }

    /// Whether sending it again does no harm when the first send's fate is unknown (written, and its answer
    /// lost). A channel create is not (a second channel, holding quota), nor a push-to-start (a second Live
    /// Activity on the device, which is worse than none): those are sent again only after an answer that
    /// proves APNs did not act (`APNsClient`). A broadcast or an update carries the same `aps.timestamp` again
    /// (the device ignores it), a delete of a deleted channel answers ChannelNotRegistered, a read or a list
    /// changes nothing.
    public var isSafeToRepeat: Bool {
        switch operation {
        case .createChannel: false
        case .devicePush: (try? JSONValue(parsing: body))?["aps"]?["event"] != "start"
        case .readChannel, .deleteChannel, .listChannels, .broadcast: true
        }
    }

    /// `METHOD path` for logs, with a device token cut to its first 8 characters.
    public var description: String {
        let prefix = "/3/device/"
        let shown = operation == .devicePush && path.hasPrefix(prefix) ? prefix + path.dropFirst(prefix.count).prefix(8) + "…" : path
        return "\(method.rawValue) \(shown)"
    }

    /// The headers to send: these plus `authorization: bearer <jwt>`.
    public func headers(authorizedBy token: ProviderToken) -> [String: String] {
        headers.merging([APNsHeader.authorization: token.authorization]) { _, new in new }
    }

    /// `POST /1/apps/{bundle}/channels` with `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`.
    public static func createChannel(
        bundleID: String, storagePolicy: APNsMessageStoragePolicy, requestID: APNsRequestID? = nil
    ) throws(APNsRequestError) -> APNsRequest {
        let body = #"{"message-storage-policy":\#(storagePolicy.rawValue),"push-type":"\#(APNsProtocol.channelPushType)"}"#
        return APNsRequest(
            operation: .createChannel, method: .post, path: try channelsPath(bundleID),
            headers: optional(APNsHeader.requestID, requestID?.value), body: Array(body.utf8))
    }

    /// `GET /1/apps/{bundle}/channels` with the id in `apns-channel-id`.
    public static func readChannel(
        bundleID: String, channelID: APNsChannelID, requestID: APNsRequestID? = nil
    ) throws(APNsRequestError) -> APNsRequest {
        APNsRequest(
            operation: .readChannel, method: .get, path: try channelsPath(bundleID),
            headers: [APNsHeader.channelID: channelID.value].merging(optional(APNsHeader.requestID, requestID?.value)) { a, _ in a },
            body: [])
    }

    /// `DELETE /1/apps/{bundle}/channels` with the id in `apns-channel-id`.
    public static func deleteChannel(
        bundleID: String, channelID: APNsChannelID, requestID: APNsRequestID? = nil
    ) throws(APNsRequestError) -> APNsRequest {
        APNsRequest(
            operation: .deleteChannel, method: .delete, path: try channelsPath(bundleID),
            headers: [APNsHeader.channelID: channelID.value].merging(optional(APNsHeader.requestID, requestID?.value)) { a, _ in a },
            body: [])
    }

    /// `GET /1/apps/{bundle}/all-channels`.
    public static func listChannels(bundleID: String, requestID: APNsRequestID? = nil) throws(APNsRequestError) -> APNsRequest {
        APNsRequest(
            operation: .listChannels, method: .get, path: "/1/apps/\(try validBundleID(bundleID))/all-channels",
            headers: optional(APNsHeader.requestID, requestID?.value), body: [])
    }

    /// `POST /4/broadcasts/apps/{bundle}`; `expiration` is epoch seconds, 0 for "try once, do not store"
    /// (the only value a no-storage channel accepts). The payload must be 1 to 5,120 bytes.
    public static func broadcast(
        bundleID: String, channelID: APNsChannelID, payload: [UInt8], expiration: Int, priority: APNsPriority,
        requestID: APNsRequestID? = nil
    ) throws(APNsRequestError) -> APNsRequest {
        try checkPayload(payload, limit: APNsPayloadLimit.broadcast)
        guard expiration >= 0 else { throw .invalidExpiration(expiration) }
        var headers = [
            APNsHeader.channelID: channelID.value,
            APNsHeader.pushType: APNsProtocol.liveActivityPushType,
            APNsHeader.expiration: String(expiration),
            APNsHeader.priority: String(priority.rawValue),
        ]
        headers[APNsHeader.requestID] = requestID?.value
        return APNsRequest(
            operation: .broadcast, method: .post, path: "/4/broadcasts/apps/\(try validBundleID(bundleID))",
            headers: headers, body: payload)
    }

    /// `POST /3/device/{token}` for a Live Activity update, end or push-to-start; priority 10 or 5.
    /// `collapseID` is 1 to 64 bytes; the payload 1 to 4,096 bytes.
    public static func devicePush(
        bundleID: String, deviceToken: APNsDeviceToken, payload: [UInt8], priority: APNsPriority,
        expiration: Int? = nil, apnsID: APNsRequestID? = nil, collapseID: String? = nil
    ) throws(APNsRequestError) -> APNsRequest {
        try checkPayload(payload, limit: APNsPayloadLimit.devicePush)
        guard priority != .low else { throw .invalidPriority(priority.rawValue) }
        if let expiration, expiration < 0 { throw .invalidExpiration(expiration) }
        if let collapseID, !(1...64).contains(collapseID.utf8.count) { throw .invalidCollapseID(collapseID) }
        var headers = [
            APNsHeader.topic: try validBundleID(bundleID) + APNsProtocol.liveActivityTopicSuffix,
            APNsHeader.pushType: APNsProtocol.liveActivityPushType,
            APNsHeader.priority: String(priority.rawValue),
        ]
        headers[APNsHeader.expiration] = expiration.map(String.init)
        headers[APNsHeader.id] = apnsID?.value
        headers[APNsHeader.collapseID] = collapseID
        return APNsRequest(
            operation: .devicePush, method: .post, path: "/3/device/\(deviceToken.hex)", headers: headers, body: payload)
    }

    private static func channelsPath(_ bundleID: String) throws(APNsRequestError) -> String {
        "/1/apps/\(try validBundleID(bundleID))/channels"
    }

    private static func optional(_ name: String, _ value: String?) -> [String: String] {
        value.map { [name: $0] } ?? [:]
    }

    private static func checkPayload(_ payload: [UInt8], limit: Int) throws(APNsRequestError) {
        guard !payload.isEmpty else { throw .emptyPayload }
        guard payload.count <= limit else { throw .payloadTooLarge(size: payload.count, limit: limit) }
    }

    private static let bundleIDBytes = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-.".utf8)

    /// A reverse-DNS bundle id; the `.push-type.liveactivity` suffix belongs only in a device push's topic.
    static func validBundleID(_ bundleID: String) throws(APNsRequestError) -> String {
        guard bundleID.utf8.allSatisfy(bundleIDBytes.contains), !bundleID.isEmpty, bundleID.utf8.count <= 255, !bundleID.hasPrefix("."),
            !bundleID.hasSuffix("."),
            !bundleID.hasSuffix(APNsProtocol.liveActivityTopicSuffix)
        else {
            throw .invalidBundleID(bundleID)
        }
        return bundleID
    }
}
