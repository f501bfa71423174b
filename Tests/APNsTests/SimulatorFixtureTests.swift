@testable import APNs
@testable import APNsSimulator
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

// Shared by the Simulator*Tests suites.

/// An engine with one trusted key, a manual clock and a captured log, plus one connection to talk through.
final class SimulatorFixture: @unchecked Sendable {
    static let bundleID = "com.example.live"
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let deviceToken = String(repeating: "ab", count: 32)

    let clock = ManualWallClock(Date(timeIntervalSince1970: 1_800_000_000))
    let signingKey: APNsSigningKey
    let engine: SimulatorEngine
    let log = SimulatorLogCapture()
    var connection: SimulatorConnectionState
    var token: ProviderToken

    init(configure: (inout SimulatorConfiguration) -> Void = { _ in }) throws {
        signingKey = try APNsSigningKey(keyID: Self.keyID, teamID: Self.teamID, key: P256.SigningKey.generate())
        var configuration = SimulatorConfiguration()
        configuration.bundleIDs = [Self.bundleID, "com.example.other"]
        configure(&configuration)
        let log = self.log
        engine = SimulatorEngine(
            configuration: configuration,
            trustedKeys: [SimulatorTrustedKey(keyID: Self.keyID, teamID: Self.teamID, key: signingKey.key.publicKey)],
            clock: clock, logger: Logger(format: .json, clock: clock) { line in log.lines.withLock { $0.append(line) } })
        connection = engine.makeConnectionState()
        token = try ProviderToken(signingKey: signingKey, issuedAt: clock.now)
    }

    /// The `authorization` header to send.
    enum Authorization: ExpressibleByStringInterpolation {
        case current, absent, value(String)
        init(stringLiteral value: String) { self = .value(value) }
    }

    /// Sends a built request with the current token (or `authorization` as given) and reads the answer as a client would.
    @discardableResult
    func send(_ request: APNsRequest, authorization: Authorization = .current, extraHeaders: [(String, String)] = []) -> (APNsResult, SimulatorReply) {
        var headers = HTTPHeaders(request.headers.sorted { $0.key < $1.key }.map { HTTPField(name: $0.key, value: $0.value) })
        switch authorization {
        case .current: headers.add(APNsHeader.authorization, token.authorization)
        case .value(let value): headers.add(APNsHeader.authorization, value)
        case .absent: break
        }
        for (name, value) in extraHeaders { headers.add(name, value) }
        let reply = sendRaw(
            HTTPRequest(method: request.method.rawValue, path: request.path, headers: headers, body: request.body),
            on: request.hostKind == .push ? .push : .management, authorize: false)
        return (Self.result(reply, operation: request.operation), reply)
    }

    /// Sends a raw request, with the current token unless `headers` has `authorization` or `authorize` is false.
    func sendRaw(_ request: HTTPRequest, on listener: SimulatorListener, authorize: Bool = true) -> SimulatorReply {
        var request = request
        if authorize, request.headers[APNsHeader.authorization] == nil { request.headers.add(APNsHeader.authorization, token.authorization) }
        return engine.handle(request, on: listener, connection: &connection)
    }

    static func result(_ reply: SimulatorReply, operation: APNsOperation) -> APNsResult {
        var headers: [String: String] = [:]
        for field in reply.response.headers { headers[field.name] = field.value }
        return APNsResult(response: APNsResponse(status: reply.response.status, headers: headers, body: reply.response.body), operation: operation)
    }

    /// Creates a channel and returns its id.
    func createChannel(_ policy: APNsMessageStoragePolicy = .mostRecentMessageStored, bundleID: String = bundleID) throws -> APNsChannelID {
        let (result, _) = send(try .createChannel(bundleID: bundleID, storagePolicy: policy))
        guard case .accepted(let acceptance) = result, let id = acceptance.channelID else {
            throw SimulatorConfigurationError("create failed: \(result)")
        }
        return id
    }

    static func payload(_ event: String = "update", timestamp: Int = 1_800_000_000, padTo size: Int? = nil) -> [UInt8] {
        let base = #"{"aps":{"timestamp":\#(timestamp),"event":"\#(event)","content-state":{"score":"1-0"}},"pad":""}"#
        guard let size else { return Array(base.utf8) }
        return Array((base.dropLast(2) + String(repeating: "x", count: size - base.utf8.count) + "\"}").utf8)
    }

    func broadcast(_ channel: APNsChannelID, payload: [UInt8] = payload(), expiration: Int = 0, priority: APNsPriority = .powerConsidered)
        throws -> APNsRequest
    {
        try .broadcast(bundleID: Self.bundleID, channelID: channel, payload: payload, expiration: expiration, priority: priority)
    }

    func devicePush(token: String = deviceToken, payload: [UInt8] = payload()) throws -> APNsRequest {
        try .devicePush(bundleID: Self.bundleID, deviceToken: APNsDeviceToken(hex: token), payload: payload, priority: .immediate)
    }
}

/// Log lines captured from a logger sink.
final class SimulatorLogCapture: Sendable {
    let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
}

// Named apart from `APNsResult.failure`/`acceptance`, which the APNs client branch adds, so both can meet in one target.
extension APNsResult {
    /// The failure, whatever its class.
    var failedAnswer: APNsFailure? {
        switch self {
        case .accepted: nil
        case .rejected(let failure), .credentialsFault(let failure), .retryAfterBackoff(let failure), .tokenUpdatesTooFrequent(let failure),
             .refreshTokenAndRetry(let failure), .reconnect(let failure): failure
        }
    }

    /// The acceptance, if accepted.
    var acceptedAnswer: APNsAcceptance? { if case .accepted(let acceptance) = self { acceptance } else { nil } }
}
