// APNs answers turned into what to do next. A rejection is an answer (permanent); a failure to get an
// answer, a throttle or a server error is retryable; an expired provider token means refresh and retry once;
// GOAWAY, IdleTimeout and Shutdown mean reconnect (house style, "Errors are typed and say what to do").
import Foundation

/// An HTTP/2 answer from APNs, as the client received it.
public struct APNsResponse: Sendable, Hashable {
    public var status: Int
    /// Header names in lowercase.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }) { first, _ in first }
        self.body = body
    }
}

/// What APNs returned for an accepted request.
public struct APNsAcceptance: Sendable, Hashable {
    public var status: Int
    /// `apns-request-id` (management and broadcast answers).
    public var requestID: String?
    /// `apns-unique-id` (broadcasts; device pushes in development): quote it to Apple support.
    public var uniqueID: String?
    /// `apns-id` (device pushes).
    public var apnsID: String?
    /// The new channel (create).
    public var channelID: APNsChannelID?
    /// The channel's configuration (read).
    public var channel: APNsChannelConfiguration?
    /// All channels of the app (list).
    public var channels: [APNsChannelID]?

    public init(
        status: Int, requestID: String? = nil, uniqueID: String? = nil, apnsID: String? = nil,
        channelID: APNsChannelID? = nil, channel: APNsChannelConfiguration? = nil, channels: [APNsChannelID]? = nil
    ) {
        self.status = status
        self.requestID = requestID
        self.uniqueID = uniqueID
        self.apnsID = apnsID
        self.channelID = channelID
        self.channel = channel
        self.channels = channels
    }
}

/// A channel as the read operation describes it.
public struct APNsChannelConfiguration: Sendable, Hashable {
    public var storagePolicy: APNsMessageStoragePolicy
    /// `LiveActivity` as documented; kept verbatim.
    public var pushType: String

    public init(storagePolicy: APNsMessageStoragePolicy, pushType: String) {
        self.storagePolicy = storagePolicy
        self.pushType = pushType
    }
}

/// A request APNs did not accept, or that got no answer; `APNsResult` says what to do about it.
public struct APNsFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// Why the request was not accepted.
    public enum Cause: Sendable, Hashable {
        /// APNs answered with an error status and (usually) a reason.
        case answer(status: Int, reason: APNsReason?)
        /// The connection was closed by GOAWAY before this request was processed; the reason is GOAWAY's JSON, if any.
        case goaway(reason: APNsReason?)
        /// Connection, TLS or stream error.
        case io(String)
        /// No answer in time; a create may still have made a channel.
        case timeout
        /// A success status with an answer this module cannot read (e.g. a create without a channel id).
        case malformedAnswer(status: Int, detail: String)
    }

    public var cause: Cause
    /// For 410: when APNs confirmed the token was no longer valid, epoch milliseconds as Apple sends it.
    public var timestamp: Int64?
    /// `apns-request-id` or `apns-id` of the answer, for logs and support.
    public var requestID: String?
    /// A `retry-after` header in seconds (undocumented; honoured when present).
    public var retryAfterSeconds: Int?

    public init(cause: Cause, timestamp: Int64? = nil, requestID: String? = nil, retryAfterSeconds: Int? = nil) {
        self.cause = cause
        self.timestamp = timestamp
        self.requestID = requestID
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// APNs' reason, from the answer body or the GOAWAY payload.
    public var reason: APNsReason? {
        switch cause {
        case .answer(_, let reason), .goaway(let reason): reason
        case .io, .timeout, .malformedAnswer: nil
        }
    }

    /// The HTTP status, when APNs answered.
    public var status: Int? {
        switch cause {
        case .answer(let status, _), .malformedAnswer(let status, _): status
        case .goaway, .io, .timeout: nil
        }
    }

    /// The 410 timestamp as a date.
    public var timestampDate: Date? { timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) } }

    public var description: String {
        switch cause {
        case .answer(let status, let reason): "APNs answered \(status) \(reason?.text ?? "(no reason)")"
        case .goaway(let reason): "APNs closed the connection (GOAWAY \(reason?.text ?? "without reason"))"
        case .io(let detail): "APNs connection failed: \(detail)"
        case .timeout: "APNs did not answer in time"
        case .malformedAnswer(let status, let detail): "APNs answered \(status) but \(detail)"
        }
    }
}

/// The outcome of one APNs request, by what to do next.
public enum APNsResult: Sendable, Hashable {
    /// Done.
    case accepted(APNsAcceptance)
    /// Permanent: never retry; fix the data or the configuration (the reason says which).
    case rejected(APNsFailure)
    /// Transient: 429 `TooManyRequests`, 500, 503, I/O, timeout. Wait with jittered backoff, then retry.
    case retryAfterBackoff(APNsFailure)
    /// 429 `TooManyProviderTokenUpdates`: the token changed too often on a connection, a token-management bug.
    /// Back off and retry with the same token; do NOT refresh.
    case tokenUpdatesTooFrequent(APNsFailure)
    /// 403 other than `ExpiredProviderToken` and `UnrelatedKeyIdInToken` (`InvalidProviderToken`, `BadCertificate…`,
    /// `TopicMismatch`, `MissingProviderToken`, `Forbidden`…): the app's credentials are at fault, not
    /// this request. Do not retry it; park the app's work until an operator fixes its key (or a later try succeeds).
    case credentialsFault(APNsFailure)
    /// 403 `ExpiredProviderToken`: refresh the token (once per request), then retry.
    case refreshTokenAndRetry(APNsFailure)
    /// GOAWAY, `IdleTimeout`, `Shutdown`, `UnrelatedKeyIdInToken`: open a new connection, then retry.
    case reconnect(APNsFailure)

    /// Classifies APNs' answer to a request of `operation`.
    public init(response: APNsResponse, operation: APNsOperation) {
        let requestID = response.headers[APNsHeader.requestID] ?? response.headers[APNsHeader.id]
        guard (200..<300).contains(response.status) else {
            let body = APNsErrorBody(json: response.body)
            let failure = APNsFailure(
                cause: .answer(status: response.status, reason: body?.reason), timestamp: body?.timestamp,
                requestID: requestID, retryAfterSeconds: response.headers[APNsHeader.retryAfter].flatMap { Int($0) })
            self = Self.classify(failure)
            return
        }
        var acceptance = APNsAcceptance(
            status: response.status, requestID: response.headers[APNsHeader.requestID],
            uniqueID: response.headers[APNsHeader.uniqueID], apnsID: response.headers[APNsHeader.id])
        func malformed(_ detail: String) -> APNsResult {
            .rejected(APNsFailure(cause: .malformedAnswer(status: response.status, detail: detail), requestID: requestID))
        }
        switch operation {
        case .createChannel:
            // Apple documents 201 with the id in a header; a 200 with the id in the body has been reported (docs/apns.md#create-answer).
            let fromBody = (Self.json(response.body) as? [String: Any]).flatMap { $0["channel-id"] ?? $0["channelId"] } as? String
            guard let id = response.headers[APNsHeader.channelID] ?? fromBody, !id.isEmpty else {
                self = malformed("the create answer carries no apns-channel-id")
                return
            }
            acceptance.channelID = APNsChannelID(received: id)
        case .readChannel:
            guard let object = Self.json(response.body) as? [String: Any],
                let policy = Self.integer(object["message-storage-policy"]).flatMap({ APNsMessageStoragePolicy(rawValue: Int($0)) })
            else {
                self = malformed("the read answer has no message-storage-policy 0 or 1")
                return
            }
            acceptance.channel = APNsChannelConfiguration(storagePolicy: policy, pushType: object["push-type"] as? String ?? "")
        case .listChannels:
            // Documented as {"channels": [...]}; a bare array has been reported too (docs/apns.md#create-answer). An empty body means none.
            let value = response.body.isEmpty ? [String: Any]() : Self.json(response.body)
            let list = (value as? [String: Any]).map { $0["channels"] ?? [Any]() } ?? value
            guard let ids = list as? [String] else {
                self = malformed("the list answer has no channels array of strings")
                return
            }
            acceptance.channels = ids.map(APNsChannelID.init(received:))
        case .deleteChannel, .broadcast, .devicePush:
            break
        }
        self = .accepted(acceptance)
    }

    /// Classifies a request that got no answer.
    public init(transportFailure cause: APNsFailure.Cause) {
        self = Self.classify(APNsFailure(cause: cause))
    }

    /// Classifies a GOAWAY that ended the connection before this request was processed; `debugData` is its payload.
    public init(goawayDebugData debugData: [UInt8]) {
        self.init(transportFailure: .goaway(reason: APNsErrorBody(json: debugData)?.reason))
    }

    static func classify(_ failure: APNsFailure) -> APNsResult {
        switch failure.cause {
        case .goaway: return .reconnect(failure)
        case .io, .timeout: return .retryAfterBackoff(failure)
        case .malformedAnswer: return .rejected(failure)
        case .answer(let status, let reason):
            switch reason {
            case .expiredProviderToken: return .refreshTokenAndRetry(failure)
            case .tooManyProviderTokenUpdates: return .tokenUpdatesTooFrequent(failure)
            // UnrelatedKeyIdInToken: "To use this token, open a new connection" (the connection is bound to the
            // key of its first push; a rotated key needs a connection of its own).
            case .idleTimeout, .shutdown, .unrelatedKeyIdInToken: return .reconnect(failure)
            default:
                if status == 403 { return .credentialsFault(failure) }
                return status == 429 || status >= 500 ? .retryAfterBackoff(failure) : .rejected(failure)
            }
        }
    }

    /// The acceptance, if accepted.
    public var acceptance: APNsAcceptance? {
        if case .accepted(let acceptance) = self { return acceptance }
        return nil
    }

    /// The failure, if not accepted.
    public var failure: APNsFailure? {
        switch self {
        case .accepted: nil
        case .rejected(let failure), .retryAfterBackoff(let failure), .tokenUpdatesTooFrequent(let failure),
            .credentialsFault(let failure), .refreshTokenAndRetry(let failure), .reconnect(let failure):
            failure
        }
    }

    static func json(_ bytes: [UInt8]) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
    }

    /// An integer sent as a JSON number or a numeric string (node-apn sends strings, docs/apns.md#storage-policy-type).
    static func integer(_ value: Any?) -> Int64? {
        switch value {
        case let number as NSNumber: number.int64Value
        case let text as String: Int64(text)
        default: nil
        }
    }
}

/// The JSON body of an APNs error answer or GOAWAY: `{"reason": "...", "timestamp": <epoch ms, 410 only>}`.
public struct APNsErrorBody: Sendable, Hashable {
    public var reason: APNsReason
    public var timestamp: Int64?

    public init(reason: APNsReason, timestamp: Int64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    /// Reads an error body; nil when it is not JSON with a string `reason`.
    public init?(json bytes: [UInt8]) {
        guard let object = APNsResult.json(bytes) as? [String: Any], let reason = object["reason"] as? String else {
            return nil
        }
        self.init(reason: APNsReason(reason), timestamp: APNsResult.integer(object["timestamp"]))
    }

    /// The body as APNs writes it (for the simulator).
    public var json: [UInt8] {
        var object: [String: Any] = ["reason": reason.text]
        object["timestamp"] = timestamp
        return [UInt8]((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }
}
