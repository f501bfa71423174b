// The APNs client: sends `APNsRequest`s through an HTTP/2 connection pool keyed by host and signing key
// (connections are never shared between keys, and one provider token per key serves all of them), bounds the
// requests in flight (callers wait: back-pressure), and follows `RetryState` for every answer. Each exchange
// with APNs is kept as an `APNsAttempt`, so a caller can record one delivery row per attempt.
// The retry loop talks to an `APNsTransport`; the pool implements it, tests substitute a fake.
import Foundation
import MarqueeCore
import Network
import Synchronization

/// Sends one HTTP/2 request to an APNs host. `HTTP2ConnectionPool` is the real one.
public protocol APNsTransport: Sendable {
    /// Sends `request` on a connection to `endpoint` reserved for `key` (a signing key's identity).
    func send(_ request: HTTPRequest, to endpoint: APNsEndpoint, key: String, timeout: Duration) async throws(NetworkError) -> HTTPResponse
}

extension HTTP2ConnectionPool: APNsTransport {
    public func send(_ request: HTTPRequest, to endpoint: APNsEndpoint, key: String, timeout: Duration) async throws(NetworkError) -> HTTPResponse {
        try await send(request, to: HTTP2Origin(host: endpoint.host, port: endpoint.port), key: key, timeout: timeout)
    }
}

/// The client could not run a request at all (no attempt reached the network).
public enum APNsClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The calling task was cancelled while waiting for room or between attempts.
    case cancelled
    /// The provider token could not be signed: check the key file and its key and team ids.
    case signing(ProviderTokenError)
    /// The client was shut down.
    case shutdown

    public var description: String {
        switch self {
        case .cancelled: "cancelled"
        case .signing(let error): "\(error)"
        case .shutdown: "the APNs client was shut down"
        }
    }
}

/// One exchange with APNs (or a failed try to have one), as a delivery row records it.
public struct APNsAttempt: Sendable {
    /// 1 for the first send.
    public var number: Int
    public var result: APNsResult
    /// The network error when APNs did not answer.
    public var transportError: NetworkError?
    /// From handing the request to the transport to its answer or failure.
    public var latency: Duration
    /// When the attempt started.
    public var startedAt: Date
    /// The `apns-request-id` (or `apns-id` for device pushes) sent, echoed back when APNs answers.
    public var requestID: String
    /// `apns-unique-id` from the answer, if any.
    public var uniqueID: String?

    /// True when APNs may have acted on the request without this side knowing: it was written and no answer
    /// came (a timeout, a connection lost or a stream reset while in flight). A create or push-to-start
    /// with this outcome is not sent again; its effect is `unknown` until a reconcile tells.
    /// An answer proves that APNs did nothing only as 429, 500 or 503 (docs/apns.md#errors); another 5xx (a
    /// proxy's 502 or 504, or one Apple does not document) leaves the same doubt as no answer.
    public var outcomeUnknown: Bool {
        if let transportError { return !APNsClient.provesNotActedOn(transportError) }
        guard let status = result.failure?.status, status >= 500 else { return false }
        return status != 500 && status != 503
    }

    /// The HTTP status, when APNs answered.
    public var status: Int? { result.acceptance?.status ?? result.failure?.status }
    /// APNs' reason, when it gave one.
    public var reason: APNsReason? { result.failure?.reason }
}

/// Everything that happened to one request: the final result and every attempt, in order.
public struct APNsOutcome: Sendable {
    public var request: APNsRequest
    public var result: APNsResult
    public var attempts: [APNsAttempt]

    /// The acceptance, if the request finally succeeded.
    public var acceptance: APNsAcceptance? { result.acceptance }
    /// The last attempt's network error, when the request ended without an answer from APNs.
    public var transportError: NetworkError? { attempts.last?.transportError }
}

/// A request that did not succeed, for the per-operation conveniences.
public struct APNsRequestFailure: Error, Sendable, CustomStringConvertible {
    public var outcome: APNsOutcome
    public var description: String {
        let tries = outcome.attempts.count == 1 ? "1 attempt" : "\(outcome.attempts.count) attempts"
        return "\(outcome.request): \(outcome.result.failure.map { "\($0)" } ?? "failed") after \(tries)"
    }
}

/// Sends APNs requests for one signing key with bounded concurrency, shared provider tokens and retries.
public final class APNsClient: Sendable {
    /// Limits and policies of a client.
    public struct Configuration: Sendable {
        /// Requests in flight at once (including their retries); further callers wait.
        public var maxInFlight: Int
        /// Per attempt: waiting for a connection slot, the wire and the answer.
        public var attemptTimeout: Duration
        public var retryPolicy: RetryPolicy

        public init(maxInFlight: Int = 1_000, attemptTimeout: Duration = .seconds(30), retryPolicy: RetryPolicy = RetryPolicy()) {
            self.maxInFlight = max(1, maxInFlight)
            self.attemptTimeout = attemptTimeout
            self.retryPolicy = retryPolicy
        }
    }

    public let signingKey: APNsSigningKey
    public let endpoints: APNsEndpoints
    public let configuration: Configuration
    public let signer: ProviderTokenSigner
    private let transport: any APNsTransport
    private let gate: InFlightGate
    private let owned: (group: EventLoopGroup, pool: HTTP2ConnectionPool)?

    /// A client over a transport the caller owns (a shared pool, or a fake in tests).
    public init(
        signingKey: APNsSigningKey, endpoints: APNsEndpoints, transport: any APNsTransport,
        signer: ProviderTokenSigner = ProviderTokenSigner(), configuration: Configuration = Configuration()
    ) {
        self.signingKey = signingKey
        self.endpoints = endpoints
        self.transport = transport
        self.signer = signer
        self.configuration = configuration
        gate = InFlightGate(limit: configuration.maxInFlight)
        owned = nil
    }

    /// A client with its own event loops and connection pool, trusting `endpoints.extraTrustedCAFile`
    /// besides the system CAs. Call `shutdown()` when done.
    public convenience init(
        signingKey: APNsSigningKey, endpoints: APNsEndpoints, signer: ProviderTokenSigner = ProviderTokenSigner(),
        configuration: Configuration = Configuration(),
        pool poolConfiguration: HTTP2ConnectionPool.Configuration = .init(), loopCount: Int = 1
    ) throws(NetworkError) {
        let tls = try TLSClientContext(configuration: TLSClientConfiguration(extraCAFile: endpoints.extraTrustedCAFile))
        let group = EventLoopGroup(loopCount: loopCount, name: "apns-client")
        let pool = HTTP2ConnectionPool(group: group, tls: tls, configuration: poolConfiguration)
        self.init(
            signingKey: signingKey, endpoints: endpoints, transport: pool, signer: signer, configuration: configuration,
            owned: (group, pool))
    }

    private init(
        signingKey: APNsSigningKey, endpoints: APNsEndpoints, transport: any APNsTransport, signer: ProviderTokenSigner,
        configuration: Configuration, owned: (group: EventLoopGroup, pool: HTTP2ConnectionPool)
    ) {
        self.signingKey = signingKey
        self.endpoints = endpoints
        self.transport = transport
        self.signer = signer
        self.configuration = configuration
        gate = InFlightGate(limit: configuration.maxInFlight)
        self.owned = owned
    }

    /// The pool key: the signing key's identity, so no connection ever carries two keys.
    public var poolKey: String { "\(signingKey.identity)" }

    /// Requests currently holding one of the `maxInFlight` places.
    public var inFlight: Int { gate.inFlight }

    /// Callers waiting for one of those places.
    public var waitingCallers: Int { gate.waiting }

    /// Fails waiting callers, closes the connections this client opened and stops its loops.
    public func shutdown() async {
        gate.shutdown()
        guard let owned else { return }
        await owned.pool.shutdown()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                owned.group.shutdown()
                done.resume()
            }
        }
    }

    /// Sends `request`, retrying as `retryPolicy` (default `configuration.retryPolicy`) says, and returns every
    /// attempt and the final result. Waits first while `maxInFlight` requests are running.
    public func send(_ request: APNsRequest, retryPolicy: RetryPolicy? = nil) async throws(APNsClientError) -> APNsOutcome {
        try await gate.enter()
        defer { gate.leave() }
        let endpoint = endpoints[request.hostKind]
        let idHeader = request.operation == .devicePush ? APNsHeader.id : APNsHeader.requestID
        // One id for every attempt, so APNs' logs and ours name the request the same way.
        let requestID = request.headers[idHeader] ?? APNsRequestID.random().value
        var retry = RetryState(policy: retryPolicy ?? configuration.retryPolicy)
        var attempts: [APNsAttempt] = []
        let deadline = APNsDeadline.current
        while true {
            let token: ProviderToken
            do { token = try signer.token(for: signingKey) } catch { throw .signing(error) }
            var headers = HTTPHeaders()
            for (name, value) in request.headers(authorizedBy: token) { headers.add(name, value) }
            headers.set(idHeader, requestID)
            if !request.body.isEmpty { headers.set(APNsHeader.contentType, "application/json") }
            let http = HTTPRequest(method: request.method.rawValue, path: request.path, headers: headers, body: request.body)

            let startedAt = Date()
            let started = ContinuousClock.now
            let result: APNsResult
            var transportError: NetworkError?
            // A caller's deadline cuts the attempt's timeout to what is left of it (1 ms at least).
            let timeout = deadline.map { min(configuration.attemptTimeout, max(.milliseconds(1), $0.remaining)) } ?? configuration.attemptTimeout
            do {
                let response = try await transport.send(http, to: endpoint, key: poolKey, timeout: timeout)
                var fields: [String: String] = [:]
                for field in response.headers where fields[field.name] == nil { fields[field.name] = field.value }
                result = APNsResult(
                    response: APNsResponse(status: response.status, headers: fields, body: response.body),
                    operation: request.operation)
            } catch {
                transportError = error
                result = Self.result(of: error)
            }
            let latency = ContinuousClock.now - started
            attempts.append(
                APNsAttempt(
                    number: attempts.count + 1, result: result, transportError: transportError, latency: latency, startedAt: startedAt,
                    requestID: result.acceptance?.requestID ?? result.acceptance?.apnsID ?? result.failure?.requestID ?? requestID,
                    uniqueID: result.acceptance?.uniqueID))
            let outcome = APNsOutcome(request: request, result: result, attempts: attempts)

            // A connection that cannot be made securely (wrong CA, no h2) or a pool shut down will not heal by retrying.
            if let transportError, !transportError.isRetryable { return outcome }
            // A request that is not safe to repeat goes again only when the failure proves APNs did not act on it.
            // (`isSafeToRepeat` reads a device push's body, so it is asked only of an attempt without such proof.)
            if attempts[attempts.count - 1].outcomeUnknown, !request.isSafeToRepeat { return outcome }
            let action = retry.next(after: result)
            if let deadline, result.acceptance == nil {
                // A retry that would start past the caller's deadline is not made; an attempt that ran into it
                // had no answer in time either way.
                let wait: Duration? =
                    switch action {
                    case .retry(let delay), .reconnectAndRetry(let delay): delay
                    case .refreshTokenAndRetry: .zero
                    case .done, .giveUp: nil
                    }
                if deadline.remaining <= (wait ?? .zero) && (wait != nil || result.failure?.status == nil) {
                    deadline.markCutShort()
                    return outcome
                }
            }
            switch action {
            case .done, .giveUp:
                return outcome
            case .refreshTokenAndRetry:
                do { _ = try signer.tokenAfterExpiry(of: token, for: signingKey) } catch { throw .signing(error) }
            case .retry(let delay), .reconnectAndRetry(let delay):
                // The pool replaces connections closed by GOAWAY; the wait spreads the reconnects.
                do { try await Task.sleep(for: delay) } catch { throw .cancelled }
            }
            if Task.isCancelled { throw .cancelled }
        }
    }

    /// Whether a network failure proves that APNs did not act on the request: it never left this process, no
    /// connection ever carried it, the peer refused its stream, or a GOAWAY said its stream was not processed.
    /// A timeout, a lost connection or another reset after it was written prove nothing.
    public static func provesNotActedOn(_ error: NetworkError) -> Bool {
        switch error {
        // The connection never carried a request: refused, or its TLS handshake failed (the server's certificate
        // rejected, no h2 through ALPN, any other handshake error: the HTTP/2 client reports these only while
        // connecting).
        case .connectFailed, .tls, .certificateRejected, .alpnRefused: true
        default: error.wasNotSent
        }
    }

    /// What a network failure means for the request: GOAWAY before processing means reconnect; the rest is transient.
    static func result(of error: NetworkError) -> APNsResult {
        switch error {
        case .goAway(_, let debugData): APNsResult(goawayDebugData: Array(debugData.utf8))
        case .timedOut: APNsResult(transportFailure: .timeout)
        default: APNsResult(transportFailure: .io("\(error)"))
        }
    }

    // MARK: One call per operation

    /// Creates a channel and returns its id. A failure after a timeout may still have created one: reconcile with `listChannels`.
    public func createChannel(bundleID: String, storagePolicy: APNsMessageStoragePolicy) async throws -> APNsChannelID {
        let outcome = try await accepted(.createChannel(bundleID: bundleID, storagePolicy: storagePolicy))
        guard let id = outcome.acceptance?.channelID else { throw APNsRequestFailure(outcome: outcome) }
        return id
    }

    /// Reads a channel's configuration.
    public func readChannel(bundleID: String, channelID: APNsChannelID) async throws -> APNsChannelConfiguration {
        let outcome = try await accepted(.readChannel(bundleID: bundleID, channelID: channelID))
        guard let channel = outcome.acceptance?.channel else { throw APNsRequestFailure(outcome: outcome) }
        return channel
    }

    /// Deletes a channel.
    public func deleteChannel(bundleID: String, channelID: APNsChannelID) async throws {
        _ = try await accepted(.deleteChannel(bundleID: bundleID, channelID: channelID))
    }

    /// Every channel of the app in this environment.
    public func listChannels(bundleID: String) async throws -> [APNsChannelID] {
        try await accepted(.listChannels(bundleID: bundleID)).acceptance?.channels ?? []
    }

    /// Broadcasts a payload on a channel; returns the acceptance (`requestID`, `uniqueID`).
    public func broadcast(
        bundleID: String, channelID: APNsChannelID, payload: [UInt8], expiration: Int = 0,
        priority: APNsPriority = .immediate
    ) async throws -> APNsAcceptance {
        let outcome = try await accepted(
            .broadcast(bundleID: bundleID, channelID: channelID, payload: payload, expiration: expiration, priority: priority))
        return outcome.acceptance!
    }

    /// Pushes to one device token (update, end or push-to-start); returns the acceptance (`apnsID`).
    public func push(
        bundleID: String, deviceToken: APNsDeviceToken, payload: [UInt8], priority: APNsPriority = .immediate,
        expiration: Int? = nil
    ) async throws -> APNsAcceptance {
        let outcome = try await accepted(
            .devicePush(bundleID: bundleID, deviceToken: deviceToken, payload: payload, priority: priority, expiration: expiration))
        return outcome.acceptance!
    }

    /// Sends and returns the outcome when accepted; otherwise throws `APNsRequestFailure` with the whole outcome.
    private func accepted(_ request: @autoclosure () throws -> APNsRequest) async throws -> APNsOutcome {
        let outcome = try await send(try request())
        guard outcome.acceptance != nil else { throw APNsRequestFailure(outcome: outcome) }
        return outcome
    }
}

/// At most `limit` requests at once; the rest wait in arrival order. Waiting honours task cancellation.
final class InFlightGate: Sendable {
    private struct State {
        var inFlight = 0
        var isShutDown = false
        var nextWaiter = 0
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    var inFlight: Int { state.withLock { $0.inFlight } }
    var waiting: Int { state.withLock { $0.waiters.count } }

    func enter() async throws(APNsClientError) {
        enum Entry {
            case entered
            case wait(Int)
            case failed(APNsClientError)
        }
        let entry = state.withLock { state -> Entry in
            if state.isShutDown { return .failed(.shutdown) }
            if state.inFlight < limit {
                state.inFlight += 1
                return .entered
            }
            defer { state.nextWaiter += 1 }
            return .wait(state.nextWaiter)
        }
        let id: Int
        switch entry {
        case .entered: return
        case .failed(let error): throw error
        case .wait(let waiterID): id = waiterID
        }
        do {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let resumeNow = state.withLock { state -> (any Error)?? in
                        if state.isShutDown { return .some(APNsClientError.shutdown) }
                        if Task.isCancelled { return .some(APNsClientError.cancelled) }
                        // A place may have freed between the first check and now.
                        if state.inFlight < limit && state.waiters.isEmpty {
                            state.inFlight += 1
                            return .some(nil)
                        }
                        state.waiters.append((id, continuation))
                        return .none
                    }
                    switch resumeNow {
                    case .none: break
                    case .some(.none): continuation.resume()
                    case .some(.some(let error)): continuation.resume(throwing: error)
                    }
                }
            } onCancel: {
                let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                    guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.waiters.remove(at: index).continuation
                }
                waiter?.resume(throwing: APNsClientError.cancelled)
            }
        } catch let error as APNsClientError {
            throw error
        } catch {
            throw .cancelled
        }
    }

    /// Frees a place, handing it straight to the longest waiter.
    func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if state.waiters.isEmpty {
                state.inFlight -= 1
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume()
    }

    func shutdown() {
        let waiters = state.withLock { state in
            state.isShutDown = true
            defer { state.waiters.removeAll() }
            return state.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume(throwing: APNsClientError.shutdown) }
    }
}
