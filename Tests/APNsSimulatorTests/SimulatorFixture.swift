import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

@testable import APNsSimulator

// Shared by the Simulator*Tests suites. Requests are written here as Apple's pages show them, tokens are signed
// here, and answers are read here: nothing comes from Marquee's APNs client, so these tests hold the simulator to
// Apple's documents alone.

/// A signed provider token, as Apple's token page describes it: `{alg: ES256, kid}.{iss, iat}`.
struct SimulatorTestToken {
    var jwt: String
    var authorization: String { "bearer " + jwt }

    init(key: P256.SigningKey, keyID: String, teamID: String, issuedAt: Date, alg: String = "ES256") throws {
        let header = Base64URL.encode(#"{"alg":"\#(alg)","kid":"\#(keyID)"}"#.utf8)
        let claims = Base64URL.encode(#"{"iss":"\#(teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970.rounded(.down)))}"#.utf8)
        jwt = header + "." + claims + "." + Base64URL.encode(try key.signature(for: (header + "." + claims).utf8))
    }
}

/// A request for one of the simulator's listeners.
struct SimulatorTestRequest {
    var request: HTTPRequest
    var listener: SimulatorListener

    static let liveActivityTopic = SimulatorFixture.bundleID + ".push-type.liveactivity"

    private static func make(_ method: String, _ path: String, _ headers: [(String, String)], _ body: [UInt8], _ listener: SimulatorListener)
        -> SimulatorTestRequest
    {
        SimulatorTestRequest(
            request: HTTPRequest(method: method, path: path, headers: HTTPHeaders(headers.map { HTTPField(name: $0.0, value: $0.1) }), body: body),
            listener: listener)
    }

    static func create(
        _ policy: SimulatorStoragePolicy = .mostRecentMessageStored, bundleID: String = SimulatorFixture.bundleID,
        requestID: String? = nil
    ) -> SimulatorTestRequest {
        make(
            "POST", "/1/apps/\(bundleID)/channels", requestID.map { [("apns-request-id", $0)] } ?? [],
            Array(#"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#.utf8), .management)
    }

    static func read(_ channel: String, bundleID: String = SimulatorFixture.bundleID) -> SimulatorTestRequest {
        make("GET", "/1/apps/\(bundleID)/channels", [("apns-channel-id", channel)], [], .management)
    }

    static func delete(_ channel: String, bundleID: String = SimulatorFixture.bundleID) -> SimulatorTestRequest {
        make("DELETE", "/1/apps/\(bundleID)/channels", [("apns-channel-id", channel)], [], .management)
    }

    static func list(bundleID: String = SimulatorFixture.bundleID) -> SimulatorTestRequest {
        make("GET", "/1/apps/\(bundleID)/all-channels", [], [], .management)
    }

    static func broadcast(
        _ channel: String, payload: [UInt8] = SimulatorFixture.payload(), expiration: Int = 0, priority: Int = 5,
        requestID: String? = nil
    ) -> SimulatorTestRequest {
        var headers = [
            ("apns-channel-id", channel), ("apns-push-type", "liveactivity"), ("apns-expiration", String(expiration)),
            ("apns-priority", String(priority)),
        ]
        if let requestID { headers.append(("apns-request-id", requestID)) }
        return make("POST", "/4/broadcasts/apps/\(SimulatorFixture.bundleID)", headers, payload, .push)
    }

    static func devicePush(
        token: String = SimulatorFixture.deviceToken, payload: [UInt8] = SimulatorFixture.payload(), priority: Int? = 10,
        extra: [(String, String)] = []
    ) -> SimulatorTestRequest {
        var headers = [("apns-topic", liveActivityTopic), ("apns-push-type", "liveactivity")]
        if let priority { headers.append(("apns-priority", String(priority))) }
        return make("POST", "/3/device/\(token)", headers + extra, payload, .push)
    }
}

/// An answer read as a provider would read it from the wire.
struct SimulatorTestAnswer {
    var status: Int
    var headers: [String: String]
    var body: [UInt8]

    init(_ reply: SimulatorReply) {
        status = reply.response.status
        var headers: [String: String] = [:]
        for field in reply.response.headers where headers[field.name] == nil { headers[field.name] = field.value }
        self.headers = headers
        body = reply.response.body
    }

    var accepted: Bool { (200..<300).contains(status) }
    var json: JSONValue? { try? JSONValue(parsing: body) }
    /// The error body's `reason`.
    var reason: String? { accepted ? nil : json?["reason"]?.stringValue }
    /// The error body's `timestamp` (410 only).
    var timestamp: Int64? { json?["timestamp"]?.intValue }
    var requestID: String? { headers["apns-request-id"] }
    var apnsID: String? { headers["apns-id"] }
    var uniqueID: String? { headers["apns-unique-id"] }
    var channelID: String? { headers["apns-channel-id"] }
    /// The list answer's `channels`.
    var channels: [String]? { json?["channels"]?.arrayValue?.compactMap(\.stringValue) }
}

/// An engine with one trusted key, a manual clock and a captured log, plus one connection to talk through.
final class SimulatorFixture: @unchecked Sendable {
    static let bundleID = "com.example.live"
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let deviceToken = String(repeating: "ab", count: 32)

    let clock = ManualWallClock(Date(timeIntervalSince1970: 1_800_000_000))
    let signingKey: P256.SigningKey
    let engine: SimulatorEngine
    let log = SimulatorLogCapture()
    var connection: SimulatorConnectionState
    var token: SimulatorTestToken

    init(configure: (inout SimulatorConfiguration) -> Void = { _ in }) throws {
        signingKey = try P256.SigningKey.generate()
        var configuration = SimulatorConfiguration()
        configuration.bundleIDs = [Self.bundleID, "com.example.other"]
        configure(&configuration)
        let log = self.log
        engine = SimulatorEngine(
            configuration: configuration,
            trustedKeys: [SimulatorTrustedKey(keyID: Self.keyID, teamID: Self.teamID, key: signingKey.publicKey)],
            clock: clock, logger: Logger(format: .json, clock: clock) { line in log.lines.withLock { $0.append(line) } })
        connection = engine.makeConnectionState()
        token = try SimulatorTestToken(key: signingKey, keyID: Self.keyID, teamID: Self.teamID, issuedAt: clock.now)
    }

    /// A token of the trusted key issued at `issuedAt` (default: now).
    func sign(issuedAt: Date? = nil) throws -> SimulatorTestToken {
        try SimulatorTestToken(key: signingKey, keyID: Self.keyID, teamID: Self.teamID, issuedAt: issuedAt ?? clock.now)
    }

    /// The `authorization` header to send.
    enum Authorization: ExpressibleByStringInterpolation {
        case current, absent
        case value(String)
        init(stringLiteral value: String) { self = .value(value) }
    }

    /// Sends a request with the current token (or `authorization` as given).
    @discardableResult
    func send(_ request: SimulatorTestRequest, authorization: Authorization = .current) -> (SimulatorTestAnswer, SimulatorReply) {
        var http = request.request
        switch authorization {
        case .current: http.headers.add("authorization", token.authorization)
        case .value(let value): http.headers.add("authorization", value)
        case .absent: break
        }
        let reply = engine.handle(http, on: request.listener, connection: &connection)
        return (SimulatorTestAnswer(reply), reply)
    }

    /// Sends a raw request, with the current token unless `headers` has `authorization` or `authorize` is false.
    func sendRaw(_ request: HTTPRequest, on listener: SimulatorListener, authorize: Bool = true) -> SimulatorReply {
        var request = request
        if authorize, request.headers["authorization"] == nil { request.headers.add("authorization", token.authorization) }
        return engine.handle(request, on: listener, connection: &connection)
    }

    /// Creates a channel and returns its id.
    func createChannel(_ policy: SimulatorStoragePolicy = .mostRecentMessageStored, bundleID: String = bundleID) throws -> String {
        let (answer, _) = send(.create(policy, bundleID: bundleID))
        guard answer.status == 201, let id = answer.channelID else {
            throw SimulatorConfigurationError("create failed: \(answer.status) \(answer.reason ?? "")")
        }
        return id
    }

    static func payload(_ event: String = "update", timestamp: Int = 1_800_000_000, padTo size: Int? = nil) -> [UInt8] {
        let base = #"{"aps":{"timestamp":\#(timestamp),"event":"\#(event)","content-state":{"score":"1-0"}},"pad":""}"#
        guard let size else { return Array(base.utf8) }
        return Array((base.dropLast(2) + String(repeating: "x", count: size - base.utf8.count) + "\"}").utf8)
    }

    /// A canonical lowercase UUID.
    static func uuid() -> String { UUID().uuidString.lowercased() }

    static func isCanonicalUUID(_ text: String?) -> Bool {
        guard let text else { return false }
        return text.range(of: #"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"#, options: .regularExpression) != nil
    }
}

/// Log lines captured from a logger sink.
final class SimulatorLogCapture: Sendable {
    let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
}
