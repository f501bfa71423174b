import Crypto
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Synchronization
import Testing

@testable import APNs

/// A transport that answers from a script and records what it was asked to send.
final class ScriptedTransport: APNsTransport {
    struct Sent: Sendable {
        var request: HTTPRequest
        var endpoint: APNsEndpoint
        var key: String
    }

    private struct State {
        var sent: [Sent] = []
        var running = 0
        var maxRunning = 0
    }

    private let state = Mutex(State())
    private let answer: @Sendable (_ index: Int, _ request: HTTPRequest) -> Result<HTTPResponse, NetworkError>
    private let delay: Duration
    /// While true, the first request is held on the wire (`release()` lets it answer).
    private let holdingFirst = Mutex(false)

    /// Holds the first request until `release()`, however slowly the test's tasks are scheduled.
    func holdFirst() { holdingFirst.withLock { $0 = true } }
    func release() { holdingFirst.withLock { $0 = false } }

    init(delay: Duration = .zero, answer: @escaping @Sendable (_ index: Int, _ request: HTTPRequest) -> Result<HTTPResponse, NetworkError>) {
        self.delay = delay
        self.answer = answer
    }

    /// Answers from a fixed list, the last one repeating.
    convenience init(_ answers: [Result<HTTPResponse, NetworkError>]) {
        self.init { index, _ in answers[min(index, answers.count - 1)] }
    }

    var sent: [Sent] { state.withLock { $0.sent } }
    var maxRunning: Int { state.withLock { $0.maxRunning } }

    func send(_ request: HTTPRequest, to endpoint: APNsEndpoint, key: String, timeout: Duration) async throws(NetworkError) -> HTTPResponse {
        let index = state.withLock { state in
            state.sent.append(Sent(request: request, endpoint: endpoint, key: key))
            state.running += 1
            state.maxRunning = max(state.maxRunning, state.running)
            return state.sent.count - 1
        }
        // A slow APNs when a test asks for one: the delay is the behaviour under test.
        if delay > .zero { try? await Task.sleep(for: delay) }
        // The first request is held until the test releases it.
        if index == 0 { _ = try? await eventually(within: .seconds(600), every: .milliseconds(1)) { !holdingFirst.withLock { $0 } } }
        state.withLock { $0.running -= 1 }
        return try answer(index, request).get()
    }

    static func ok(_ status: Int = 200, _ headers: HTTPHeaders = [:], body: String = "") -> Result<HTTPResponse, NetworkError> {
        .success(HTTPResponse(status: status, headers: headers, body: Array(body.utf8)))
    }

    static func error(_ status: Int, _ reason: String) -> Result<HTTPResponse, NetworkError> {
        .success(HTTPResponse(status: status, headers: ["content-type": "application/json"], body: Array(#"{"reason":"\#(reason)"}"#.utf8)))
    }
}

@Suite struct APNsClientRetryTests {
    static let bundle = "com.example.scores"
    static let fastRetries = RetryPolicy(maxAttempts: 4, baseDelay: .milliseconds(1), maxDelay: .milliseconds(4))
    static let endpoints = APNsEndpoints(push: APNsEndpoint(host: "127.0.0.1", port: 4431), management: APNsEndpoint(host: "127.0.0.1", port: 4432))

    func client(_ transport: ScriptedTransport, maxInFlight: Int = 100, clock: ManualWallClock = ManualWallClock()) throws -> APNsClient {
        let key = try APNsSigningKey(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", key: P256.SigningKey.generate())
        return APNsClient(
            signingKey: key, endpoints: Self.endpoints, transport: transport, signer: ProviderTokenSigner(clock: clock),
            configuration: .init(maxInFlight: maxInFlight, retryPolicy: Self.fastRetries))
    }

    func broadcast() throws -> APNsRequest {
        try .broadcast(
            bundleID: Self.bundle, channelID: APNsChannelID("dHN0LXNyY2gtY2hubA=="), payload: Array(#"{"aps":{}}"#.utf8),
            expiration: 0, priority: .immediate)
    }

    @Test func acceptedAtOnceIsSignedKeyedByTheSigningKeyAndRoutedByHost() async throws {
        let transport = ScriptedTransport([ScriptedTransport.ok(200, ["apns-unique-id": "u-1"])])
        let client = try client(transport)
        let outcome = try await client.send(try broadcast())
        #expect(outcome.acceptance?.status == 200)
        #expect(outcome.attempts.count == 1)
        let sent = try #require(transport.sent.first)
        #expect(sent.key == "DEF123GHIJ/ABC123DEFG")
        #expect(sent.endpoint == Self.endpoints.push)
        #expect(sent.request.method == "POST" && sent.request.path == "/4/broadcasts/apps/\(Self.bundle)")
        #expect(sent.request.headers["authorization"]?.hasPrefix("bearer ") == true)
        #expect(sent.request.headers["content-type"] == "application/json")
        let requestID = try #require(sent.request.headers["apns-request-id"])
        #expect((try? APNsRequestID(requestID)) != nil)
        #expect(outcome.attempts[0].requestID == requestID)
        #expect(outcome.attempts[0].uniqueID == "u-1")

        _ = try await client.send(try .listChannels(bundleID: Self.bundle))
        #expect(transport.sent.last?.endpoint == Self.endpoints.management)
    }

    @Test func transientFailuresAreRetriedWithOneRequestIDUntilAccepted() async throws {
        let transport = ScriptedTransport([
            ScriptedTransport.error(503, "ServiceUnavailable"), ScriptedTransport.error(429, "TooManyRequests"),
            ScriptedTransport.error(500, "InternalServerError"), ScriptedTransport.ok(),
        ])
        let outcome = try await client(transport).send(try broadcast())
        #expect(outcome.acceptance != nil)
        #expect(outcome.attempts.map(\.status) == [503, 429, 500, 200])
        #expect(outcome.attempts.map(\.reason) == [.serviceUnavailable, .tooManyRequests, .internalServerError, nil])
        #expect(Set(transport.sent.map { $0.request.headers["apns-request-id"] }).count == 1)
    }

    @Test func retriesStopAtTheAttemptBound() async throws {
        let transport = ScriptedTransport([ScriptedTransport.error(429, "TooManyRequests")])
        let outcome = try await client(transport).send(try broadcast())
        #expect(transport.sent.count == Self.fastRetries.maxAttempts)
        guard case .retryAfterBackoff(let failure) = outcome.result else {
            Issue.record("\(outcome.result)")
            return
        }
        #expect(failure.reason == .tooManyRequests)
    }

    @Test(arguments: [
        (400, "BadChannelId"), (400, "ChannelNotRegistered"), (403, "InvalidProviderToken"), (413, "PayloadTooLarge"),
        (404, "BadPath"), (410, "Unregistered"), (403, "TopicMismatch"),
    ])
    func permanentRejectionsAreNeverRetried(status: Int, reason: String) async throws {
        let transport = ScriptedTransport([ScriptedTransport.error(status, reason), ScriptedTransport.ok()])
        let outcome = try await client(transport).send(try broadcast())
        #expect(transport.sent.count == 1)
        // A 403 is the app's credentials (its work is parked by the pipeline); the others the request's.
        switch outcome.result {
        case .rejected(let failure) where status != 403, .credentialsFault(let failure) where status == 403:
            #expect(failure.reason == APNsReason(reason))
        default:
            Issue.record("\(outcome.result)")
        }
        #expect(outcome.attempts.first?.status == status)
    }

    @Test func expiredTokenIsRefreshedOnceThenRetried() async throws {
        let transport = ScriptedTransport([ScriptedTransport.error(403, "ExpiredProviderToken"), ScriptedTransport.ok()])
        let outcome = try await client(transport).send(try broadcast())
        #expect(outcome.acceptance != nil)
        let tokens = transport.sent.map { $0.request.headers["authorization"] }
        #expect(tokens.count == 2 && tokens[0] != tokens[1])

        // Expired again with the new token: no second refresh.
        let always = ScriptedTransport([ScriptedTransport.error(403, "ExpiredProviderToken")])
        let twice = try await client(always).send(try broadcast())
        #expect(always.sent.count == 2)
        guard case .refreshTokenAndRetry = twice.result else {
            Issue.record("\(twice.result)")
            return
        }
    }

    @Test func tooFrequentTokenUpdatesBackOffWithTheSameToken() async throws {
        let transport = ScriptedTransport([ScriptedTransport.error(429, "TooManyProviderTokenUpdates"), ScriptedTransport.ok()])
        let outcome = try await client(transport).send(try broadcast())
        #expect(outcome.acceptance != nil)
        #expect(outcome.attempts.first?.reason == .tooManyProviderTokenUpdates)
        let tokens = transport.sent.map { $0.request.headers["authorization"] }
        #expect(tokens.count == 2 && tokens[0] == tokens[1])
    }

    @Test func shutdownReleasesWaitingCallersAndRefusesNewOnes() async throws {
        let transport = ScriptedTransport { _, _ in ScriptedTransport.ok() }
        transport.holdFirst()
        let client = try client(transport, maxInFlight: 1)
        let request = try broadcast()
        let first = Task { try await client.send(request) }
        try #require(try await eventually(every: .milliseconds(1)) { !transport.sent.isEmpty })
        let waiting = Task { try await client.send(request) }
        try #require(try await eventually(every: .milliseconds(1)) { client.waitingCallers > 0 })
        let shutdown = Task { await client.shutdown() }
        await #expect(throws: APNsClientError.shutdown) { try await waiting.value }
        transport.release()
        await shutdown.value
        await #expect(throws: APNsClientError.shutdown) { try await client.send(request) }
        #expect(try await first.value.acceptance != nil)
    }

    @Test func goawayAndShutdownReconnectAndRetry() async throws {
        let transport = ScriptedTransport([
            .failure(.goAway(errorCode: 0, debugData: #"{"reason":"Shutdown"}"#)), ScriptedTransport.error(503, "Shutdown"),
            ScriptedTransport.error(400, "IdleTimeout"), ScriptedTransport.ok(),
        ])
        let outcome = try await client(transport).send(try broadcast())
        #expect(outcome.acceptance != nil)
        #expect(outcome.attempts.count == 4)
        guard case .reconnect(let failure) = outcome.attempts[0].result else {
            Issue.record("\(outcome.attempts[0].result)")
            return
        }
        #expect(failure.reason == .shutdown)
        #expect(outcome.attempts[0].transportError != nil && outcome.attempts[0].status == nil)
    }

    /// A create that never left (its connection closed while it was queued) is sent again; a timed-out one is not
    /// (`anUnsafeRequestWrittenAndUnansweredIsNotSentAgain`).
    @Test func aCreateNeverSentIsRetriedAndEveryAttemptIsKept() async throws {
        let transport = ScriptedTransport([
            .failure(.requestNotSent("the connection closed")),
            ScriptedTransport.ok(201, ["apns-channel-id": "Y2huMQ==", "apns-request-id": "r"]),
        ])
        let client = try client(transport)
        let id = try await client.createChannel(bundleID: Self.bundle, storagePolicy: .noMessageStored)
        #expect(id.value == "Y2huMQ==")
        #expect(transport.sent.count == 2)
        #expect(String(decoding: transport.sent[0].request.body, as: UTF8.self) == #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
    }

    @Test func connectionsThatCannotBeTrustedAreNotRetried() async throws {
        let transport = ScriptedTransport([.failure(.certificateRejected("unknown CA")), ScriptedTransport.ok()])
        let outcome = try await client(transport).send(try broadcast())
        #expect(transport.sent.count == 1)
        #expect(outcome.acceptance == nil)
        #expect(outcome.transportError == .certificateRejected("unknown CA"))
    }

    @Test func conveniencesThrowTheWholeOutcome() async throws {
        let transport = ScriptedTransport([ScriptedTransport.error(400, "ChannelNotRegistered")])
        let client = try client(transport)
        do {
            try await client.deleteChannel(bundleID: Self.bundle, channelID: APNsChannelID("Y2huMQ=="))
            Issue.record("expected a failure")
        } catch let failure as APNsRequestFailure {
            #expect(failure.outcome.result.failure?.reason == .channelNotRegistered)
            #expect(failure.outcome.attempts.count == 1)
        }
        let listing = ScriptedTransport([ScriptedTransport.ok(200, body: #"{"channels":["YQ==","Yg=="]}"#)])
        #expect(try await self.client(listing).listChannels(bundleID: Self.bundle).map(\.value) == ["YQ==", "Yg=="])
    }

    @Test func inFlightRequestsAreBoundedAndCallersWait() async throws {
        let transport = ScriptedTransport(delay: .milliseconds(20)) { _, _ in ScriptedTransport.ok() }
        let client = try client(transport, maxInFlight: 3)
        let request = try broadcast()
        let accepted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<12 { group.addTask { try await client.send(request).acceptance != nil } }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 12)
        #expect(transport.maxRunning == 3)
        #expect(client.inFlight == 0)
    }

    @Test func aCallerCancelledWhileWaitingLeavesWithoutSending() async throws {
        let transport = ScriptedTransport { _, _ in ScriptedTransport.ok() }
        transport.holdFirst()
        let client = try client(transport, maxInFlight: 1)
        let request = try broadcast()
        let first = Task { try await client.send(request) }
        try #require(try await eventually(every: .milliseconds(1)) { !transport.sent.isEmpty })
        let waiting = Task { try await client.send(request) }
        try #require(try await eventually(every: .milliseconds(1)) { client.waitingCallers > 0 })
        waiting.cancel()
        await #expect(throws: APNsClientError.cancelled) { try await waiting.value }
        #expect(client.waitingCallers == 0)
        transport.release()
        #expect(try await first.value.acceptance != nil)
        #expect(transport.sent.count == 1)
    }
}

/// A request that is not safe to repeat (a channel create, a push-to-start) is sent again only after an answer that
/// proves APNs did not act on it; one whose fate is unknown ends there, marked `outcomeUnknown`.
extension APNsClientRetryTests {
    static let token = String(repeating: "ab", count: 32)

    func create() throws -> APNsRequest { try .createChannel(bundleID: Self.bundle, storagePolicy: .noMessageStored) }

    func push(event: String) throws -> APNsRequest {
        try .devicePush(
            bundleID: Self.bundle, deviceToken: APNsDeviceToken(hex: Self.token),
            payload: Array(#"{"aps": {"event": "\#(event)", "timestamp": 1, "content-state": {}}}"#.utf8), priority: .immediate)
    }

    static let created = ScriptedTransport.ok(201, ["apns-channel-id": "dHN0LXNyY2gtY2hubA==", "apns-request-id": UUID().uuidString])

    @Test(arguments: [NetworkError.timedOut, .connectionClosed, .streamReset(errorCode: 2)])
    func anUnsafeRequestWrittenAndUnansweredIsNotSentAgain(failure: NetworkError) async throws {
        for request in [try create(), try push(event: "start")] {
            #expect(!request.isSafeToRepeat)
            let transport = ScriptedTransport([.failure(failure), Self.created])
            let outcome = try await client(transport).send(request)
            #expect(transport.sent.count == 1, "\(request) after \(failure)")
            #expect(outcome.acceptance == nil && outcome.attempts.last?.outcomeUnknown == true)
        }
        // The same failure on a request that is safe to repeat is retried as before.
        for request in [try broadcast(), try push(event: "update")] {
            #expect(request.isSafeToRepeat)
            let transport = ScriptedTransport([.failure(failure), ScriptedTransport.ok()])
            let outcome = try await client(transport).send(request)
            #expect(transport.sent.count == 2 && outcome.acceptance != nil, "\(request) after \(failure)")
        }
    }

    @Test(arguments: [502, 504, 599])
    func anUnsafeRequestAnsweredWithAnotherServerErrorIsNotSentAgain(status: Int) async throws {
        // Only 429, 500 and 503 prove that APNs did nothing; a proxy's 502 or 504 leaves the doubt of a timeout.
        for request in [try create(), try push(event: "start")] {
            let transport = ScriptedTransport([ScriptedTransport.error(status, "BadGateway"), Self.created])
            let outcome = try await client(transport).send(request)
            #expect(transport.sent.count == 1, "\(request) after \(status)")
            #expect(outcome.acceptance == nil && outcome.attempts.last?.outcomeUnknown == true)
        }
        let transport = ScriptedTransport([ScriptedTransport.error(status, "BadGateway"), ScriptedTransport.ok()])
        let outcome = try await client(transport).send(try broadcast())
        #expect(transport.sent.count == 2 && outcome.acceptance != nil, "a broadcast is safe to repeat")
    }

    @Test(arguments: [
        Result<HTTPResponse, NetworkError>.failure(.requestNotSent("queued when the connection closed")),
        .failure(.goAway(errorCode: 0, debugData: "")), .failure(.connectFailed("refused")),
        ScriptedTransport.error(503, "ServiceUnavailable"), ScriptedTransport.error(429, "TooManyRequests"),
        ScriptedTransport.error(500, "InternalServerError"),
    ])
    func anUnsafeRequestIsSentAgainWhenTheAnswerProvesAPNsDidNotAct(first: Result<HTTPResponse, NetworkError>) async throws {
        let transport = ScriptedTransport([first, Self.created])
        let outcome = try await client(transport).send(try create())
        #expect(transport.sent.count == 2)
        #expect(outcome.acceptance?.channelID?.value == "dHN0LXNyY2gtY2hubA==")
        #expect(outcome.attempts.first?.outcomeUnknown == false)
    }
}
