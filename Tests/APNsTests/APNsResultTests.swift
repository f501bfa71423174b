import APNs
import Foundation
import Testing

@Suite struct APNsResultTests {
    enum Kind: Equatable { case accepted, rejected, credentialsFault, retryAfterBackoff, tokenUpdatesTooFrequent, refreshTokenAndRetry, reconnect }

    func kind(_ result: APNsResult) -> Kind {
        switch result {
        case .accepted: .accepted
        case .rejected: .rejected
        case .credentialsFault: .credentialsFault
        case .retryAfterBackoff: .retryAfterBackoff
        case .tokenUpdatesTooFrequent: .tokenUpdatesTooFrequent
        case .refreshTokenAndRetry: .refreshTokenAndRetry
        case .reconnect: .reconnect
        }
    }

    func errorAnswer(_ status: Int, _ reason: String, operation: APNsOperation = .broadcast, headers: [String: String] = [:]) -> APNsResult {
        APNsResult(
            response: APNsResponse(status: status, headers: headers, body: Array(#"{"reason":"\#(reason)"}"#.utf8)),
            operation: operation)
    }

    /// Every reason of docs/apns.md#reasons-broadcast and #reasons-device with its status, and what the answer means. Anything not listed is permanent.
    static let notPermanent: [String: Kind] = [
        "ExpiredProviderToken": .refreshTokenAndRetry,
        "TooManyProviderTokenUpdates": .tokenUpdatesTooFrequent,
        "TooManyRequests": .retryAfterBackoff,
        "InternalServerError": .retryAfterBackoff,
        "ServiceUnavailable": .retryAfterBackoff,
        "IdleTimeout": .reconnect,
        "Shutdown": .reconnect,
        // A 403 other than an expired token: the app's key or certificate is wrong, whatever the request.
        "BadCertificate": .credentialsFault, "BadCertificateEnvironment": .credentialsFault, "TopicMismatch": .credentialsFault,
        "MissingProviderToken": .credentialsFault, "InvalidProviderToken": .credentialsFault, "Forbidden": .credentialsFault,
        "BadEnvironmentKeyInToken": .credentialsFault,
        // "To use this token, open a new connection."
        "UnrelatedKeyIdInToken": .reconnect,
    ]

    static let referenceReasons: [(String, Int)] = [
        ("FeatureNotEnabled", 400), ("MissingChannelId", 400), ("BadChannelId", 400), ("ChannelNotRegistered", 400),
        ("BadRequestParams", 400), ("BadRequestPayload", 400), ("PayloadEmpty", 400), ("BadMessageId", 400),
        ("MissingPushType", 400), ("InvalidPushType", 400), ("CannotCreateChannelConfig", 400), ("BadExpirationDate", 400),
        ("TopicDisallowed", 400), ("BadPriority", 400), ("BadCertificate", 403), ("BadCertificateEnvironment", 403),
        ("TopicMismatch", 403), ("MissingProviderToken", 403), ("ExpiredProviderToken", 403), ("InvalidProviderToken", 403),
        ("BadPath", 404), ("MethodNotAllowed", 405), ("PayloadTooLarge", 413), ("TooManyRequests", 429),
        ("TooManyProviderTokenUpdates", 429), ("InternalServerError", 500), ("Shutdown", 503),
        ("BadCollapseId", 400), ("BadDeviceToken", 400), ("BadTopic", 400), ("DeviceTokenNotForTopic", 400),
        ("DuplicateHeaders", 400), ("IdleTimeout", 400), ("MissingDeviceToken", 400), ("MissingTopic", 400),
        ("Forbidden", 403), ("UnrelatedKeyIdInToken", 403), ("ExpiredToken", 410), ("Unregistered", 410),
        ("ServiceUnavailable", 503), ("BadEnvironmentKeyInToken", 403),
    ]

    @Test func everyReferenceReasonIsKnownAndClassified() throws {
        for (text, status) in Self.referenceReasons {
            let reason = APNsReason(text)
            #expect(reason != .other(text), "\(text) is not a known reason")
            #expect(reason.text == text)
            #expect(reason.status == status, "\(text)")
            for operation in APNsOperation.allCases {
                let result = errorAnswer(status, text, operation: operation, headers: ["apns-request-id": "r-1"])
                #expect(kind(result) == Self.notPermanent[text] ?? .rejected, "\(status) \(text) on \(operation)")
                let failure = try #require(result.failure)
                #expect(failure.reason == reason)
                #expect(failure.status == status)
                #expect(failure.requestID == "r-1")
            }
        }
        #expect(APNsReason.documented.count == Self.referenceReasons.count)
    }

    @Test func bothServiceUnavailableSpellingsMeanRetry() {
        #expect(APNsReason("Service Unavailable") == .serviceUnavailable)
        #expect(APNsReason("ServiceUnavailable") == .serviceUnavailable)
        #expect(kind(errorAnswer(503, "Service Unavailable")) == .retryAfterBackoff)
        #expect(kind(errorAnswer(503, "ServiceUnavailable", operation: .devicePush)) == .retryAfterBackoff)
    }

    @Test func unknownReasonsFollowTheirStatus() {
        #expect(APNsReason("SomethingNew") == .other("SomethingNew"))
        #expect(APNsReason("SomethingNew").status == nil)
        #expect(kind(errorAnswer(400, "SomethingNew")) == .rejected)
        #expect(kind(errorAnswer(403, "SomethingNew")) == .credentialsFault)  // any 403 but an expired token
        #expect(kind(errorAnswer(429, "SomethingNew")) == .retryAfterBackoff)
        #expect(kind(errorAnswer(502, "SomethingNew")) == .retryAfterBackoff)
        let noBody = APNsResult(response: APNsResponse(status: 500, body: Array("oops".utf8)), operation: .broadcast)
        #expect(kind(noBody) == .retryAfterBackoff)
        #expect(noBody.failure?.reason == nil)
        #expect(kind(APNsResult(response: APNsResponse(status: 400), operation: .broadcast)) == .rejected)
    }

    @Test func unregisteredCarriesItsTimestamp() throws {
        let body = Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8)
        let result = APNsResult(response: APNsResponse(status: 410, headers: ["apns-id": "p-1"], body: body), operation: .devicePush)
        guard case .rejected(let failure) = result else {
            Issue.record("not rejected: \(result)")
            return
        }
        #expect(failure.reason == .unregistered)
        #expect(failure.timestamp == 1_700_000_000_123)
        #expect(failure.timestampDate == Date(timeIntervalSince1970: 1_700_000_000.123))
        #expect(failure.requestID == "p-1")
    }

    @Test func retryAfterHeaderIsRead() {
        let result = errorAnswer(429, "TooManyRequests", headers: ["Retry-After": "7"])
        #expect(result.failure?.retryAfterSeconds == 7)
        #expect(errorAnswer(429, "TooManyRequests").failure?.retryAfterSeconds == nil)
    }

    @Test func createAcceptsTheIdFrom201Or200() throws {
        for status in [200, 201] {
            let response = APNsResponse(status: status, headers: ["APNS-Channel-Id": "dHN0LXNyY2gtY2hubA==", "apns-request-id": "r-2"])
            let acceptance = try #require(APNsResult(response: response, operation: .createChannel).acceptance)
            #expect(acceptance.channelID?.value == "dHN0LXNyY2gtY2hubA==")
            #expect(acceptance.requestID == "r-2")
            #expect(acceptance.status == status)
        }
        let inBody = APNsResponse(status: 200, body: Array(#"{"channel-id":"YWJj"}"#.utf8))
        #expect(APNsResult(response: inBody, operation: .createChannel).acceptance?.channelID?.value == "YWJj")
        let missing = APNsResult(response: APNsResponse(status: 201), operation: .createChannel)
        guard case .rejected(let failure) = missing, case .malformedAnswer(201, _) = failure.cause else {
            Issue.record("a create without an id must not count as accepted: \(missing)")
            return
        }
    }

    @Test func readParsesTheChannelConfiguration() throws {
        let documented = APNsResponse(status: 200, body: Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8))
        let channel = try #require(APNsResult(response: documented, operation: .readChannel).acceptance?.channel)
        #expect(channel == APNsChannelConfiguration(storagePolicy: .mostRecentMessageStored, pushType: "LiveActivity"))
        let lenient = APNsResponse(status: 200, body: Array(#"{"message-storage-policy":"0","push-type":"liveactivity"}"#.utf8))
        #expect(APNsResult(response: lenient, operation: .readChannel).acceptance?.channel?.storagePolicy == .noMessageStored)
        for body in ["", "{}", #"{"message-storage-policy":3}"#, "[1]"] {
            let result = APNsResult(response: APNsResponse(status: 200, body: Array(body.utf8)), operation: .readChannel)
            #expect(kind(result) == .rejected, "\(body)")
        }
    }

    @Test func listParsesChannels() throws {
        func channels(_ body: String) -> [String]? {
            APNsResult(response: APNsResponse(status: 200, body: Array(body.utf8)), operation: .listChannels)
                .acceptance?.channels?.map(\.value)
        }
        #expect(channels(#"{"channels":["YWJj","ZGVm"]}"#) == ["YWJj", "ZGVm"])
        #expect(channels(#"{"channels":[]}"#) == [])
        #expect(channels(#"["YWJj"]"#) == ["YWJj"])
        #expect(channels("") == [])
        #expect(channels(#"{"channels":[1,2]}"#) == nil)
        #expect(channels("not json") == nil)
    }

    @Test func successHeadersAreKept() throws {
        let broadcast = APNsResponse(status: 200, headers: ["apns-request-id": "r-3", "apns-unique-id": "u-3"])
        #expect(
            APNsResult(response: broadcast, operation: .broadcast).acceptance
                == APNsAcceptance(status: 200, requestID: "r-3", uniqueID: "u-3"))
        let push = APNsResponse(status: 200, headers: ["apns-id": "p-3"])
        #expect(APNsResult(response: push, operation: .devicePush).acceptance?.apnsID == "p-3")
        #expect(kind(APNsResult(response: APNsResponse(status: 204), operation: .deleteChannel)) == .accepted)
    }

    @Test func transportFailures() {
        #expect(kind(APNsResult(transportFailure: .io("connection reset"))) == .retryAfterBackoff)
        #expect(kind(APNsResult(transportFailure: .timeout)) == .retryAfterBackoff)
        let goaway = APNsResult(goawayDebugData: Array(#"{"reason":"Shutdown"}"#.utf8))
        #expect(kind(goaway) == .reconnect)
        #expect(goaway.failure?.reason == .shutdown)
        let bare = APNsResult(goawayDebugData: Array("Maximum active streams violated for this endpoint.".utf8))
        #expect(kind(bare) == .reconnect)
        #expect(bare.failure?.reason == nil)
    }

    @Test func errorBodyRoundTrips() throws {
        let body = APNsErrorBody(reason: .unregistered, timestamp: 1_700_000_000_000)
        #expect(String(decoding: body.json, as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        #expect(APNsErrorBody(json: body.json) == body)
        #expect(String(decoding: APNsErrorBody(reason: .badPriority).json, as: UTF8.self) == #"{"reason":"BadPriority"}"#)
        #expect(APNsErrorBody(json: Array("{}".utf8)) == nil)
    }
}
