// The I/O half of an HTTP/2 client connection: a libevent `bufferevent_openssl` carrying TLS, and an
// nghttp2 client session framing HTTP/2 over it, in the shape of nghttp2's examples/libevent-client.c.
// Decisions about streams (queue, limit, GOAWAY, deadlines) live in `HTTP2ClientStreamState`; this file
// feeds it events from the C callbacks and carries out what it says. Everything here runs on the
// connection's loop thread; C callbacks find the session through `user_data` and streams by their id,
// never through pointers that could outlive them.
internal import CLibEvent
internal import CNGHTTP2
internal import COpenSSL
import Foundation
import Synchronization

/// One request on its way: the request, its deadline, the response as it arrives and the waiting caller.
/// Made by the caller, handed to the loop once through the session's inbox, then touched only there.
final class HTTP2ClientStream: HTTP2ClientDeadlined, @unchecked Sendable {
    let request: HTTPRequest
    let deadline: ContinuousClock.Instant
    private var continuation: UnsafeContinuation<Result<HTTPResponse, NetworkError>, Never>?
    /// Set when nghttp2 accepts the request.
    var streamID: Int32 = 0
    /// True once the caller has been resumed; such a stream is no longer in the state machine.
    var isFinished: Bool { continuation == nil }
    // Loop-confined and touched by every callback: no dynamic exclusivity checks.
    /// How much of the request body nghttp2 has read.
    @exclusivity(unchecked) var bodyOffset = 0
    @exclusivity(unchecked) var status = 0
    @exclusivity(unchecked) var headers: [HTTPField] = []
    @exclusivity(unchecked) var body: [UInt8] = []

    init(
        request: HTTPRequest, deadline: ContinuousClock.Instant,
        continuation: UnsafeContinuation<Result<HTTPResponse, NetworkError>, Never>
    ) {
        self.request = request
        self.deadline = deadline
        self.continuation = continuation
    }

    /// Resumes the caller exactly once.
    func finish(_ result: Result<HTTPResponse, NetworkError>) {
        guard let continuation else { return }
        self.continuation = nil
        continuation.resume(returning: result)
    }

    func succeed() {
        finish(.success(HTTPResponse(status: status, headers: HTTPHeaders(headers), body: body)))
    }
}

/// The libevent + nghttp2 machinery of one client connection; touched only on its loop thread.
///
/// Split by what each part does: requests, timers and closing here; connecting and the socket in
/// `HTTP2ClientSession+Connecting.swift`; the nghttp2 session and its callbacks in `HTTP2ClientSession+Frames.swift`.
/// Its state is internal rather than private only so those extensions reach it; like the rest of the session,
/// nothing but the loop thread touches it.
final class HTTP2ClientSession: @unchecked Sendable {
    let loop: EventLoop
    let origin: HTTP2Origin
    /// `origin.authority`, computed once.
    let authority: String
    let tls: TLSClientContext
    let configuration: HTTP2ClientConnection.Configuration
    let emit: @Sendable (HTTP2ClientConnection.Event) -> Void

    // The hot loop-confined state skips dynamic exclusivity checks; only the loop thread touches it.
    @exclusivity(unchecked) var state = HTTP2ClientStreamState<HTTP2ClientStream>()
    /// Requests handed over by other threads, taken by the loop in batches.
    let inbox = Mutex<[HTTP2ClientStream]>([])
    var started = false
    var bev: OpaquePointer?
    var session: OpaquePointer?
    /// The bufferevent's callbacks hold one reference to `self` until teardown.
    var retainedByCallbacks = false
    var connectTimer: LoopTimer?
    var deadlineTimer: LoopTimer?
    var deadlineTimerAt: ContinuousClock.Instant?
    var pingTimer: LoopTimer?
    var pingTimeoutTimer: LoopTimer?
    var lastReadAt = ContinuousClock.now
    // Scratch space for request headers, reused by every request.
    @exclusivity(unchecked) var headerBytes: [UInt8] = []
    @exclusivity(unchecked) var headerSpans: [(name: Int, nameLength: Int, value: Int, valueLength: Int)] = []
    @exclusivity(unchecked) var headerFields: [nghttp2_nv] = []
    /// The stream the last callback was about: callbacks come in runs for one stream.
    @exclusivity(unchecked) var lastStream: HTTP2ClientStream?

    private static let expiredInQueue = NetworkError.requestNotSent("timed out before a stream was free")

    /// nghttp2 stops producing frames while this much output waits for the socket.
    static let outputHighWater = 1 << 17

    init(
        loop: EventLoop, origin: HTTP2Origin, tls: TLSClientContext, configuration: HTTP2ClientConnection.Configuration,
        emit: @escaping @Sendable (HTTP2ClientConnection.Event) -> Void
    ) {
        self.loop = loop
        self.origin = origin
        authority = origin.authority
        self.tls = tls
        self.configuration = configuration
        self.emit = emit
    }

    // MARK: Requests

    /// From any thread: hands a request to the loop. Requests arriving together share one wake-up of
    /// the loop and one write.
    func submitFromAnyThread(_ stream: HTTP2ClientStream) {
        let first = inbox.withLock { inbox -> Bool in
            inbox.append(stream)
            return inbox.count == 1
        }
        if first { loop.execute { [self] in drainInbox() } }
    }

    func drainInbox() {
        var arrived = inbox.withLock { inbox -> [HTTP2ClientStream] in
            let arrived = inbox
            inbox.removeAll(keepingCapacity: true)
            return arrived
        }
        for stream in arrived { accept(stream) }
        arrived.removeAll()
        if session != nil {
            startStreams()
            flush()
        }
    }

    func accept(_ stream: HTTP2ClientStream) {
        if !started { start() }
        if let failed = state.enqueue(stream) {
            stream.finish(.failure(failed.error))
            return
        }
        armDeadlineTimer(for: stream.deadline)
    }

    /// Closes the connection on the owner's request: everything pending fails with `.shutdown`.
    func shutdown() {
        if let session {
            nghttp2_session_terminate_session(session, UInt32(NGHTTP2_NO_ERROR.rawValue))
            flush()
        }
        close(inFlight: .shutdown, queued: .shutdown, reason: nil)
    }

    func startStreams() {
        guard session != nil, state.queuedCount > 0 else { return }
        let now = ContinuousClock.now
        while let stream = state.nextToStart() {
            // Its deadline may pass before its expiry sweep runs; it must not start then.
            if stream.deadline <= now {
                stream.finish(.failure(Self.expiredInQueue))
                continue
            }
            let id = submit(stream)
            if id > 0 {
                stream.streamID = id
                state.started(stream, id: id)
            } else if id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
                // Stream ids are spent: behave as if the peer had sent GOAWAY so the owner replaces us.
                stream.finish(.failure(.requestNotSent("stream ids exhausted")))
                goAway(lastStreamID: .max, errorCode: 0, debugData: "stream ids exhausted")
                return
            } else {
                stream.finish(.failure(.http2(code: id, detail: String(cString: nghttp2_strerror(id)))))
            }
        }
    }

    // MARK: Timers

    func armDeadlineTimer(for deadline: ContinuousClock.Instant) {
        if let armed = deadlineTimerAt, armed <= deadline { return }
        deadlineTimer?.cancel()
        deadlineTimerAt = deadline
        let delay = max(deadline - .now, .zero) + .milliseconds(1)
        deadlineTimer = loop.schedule(after: delay) { [self] in
            deadlineTimer = nil
            deadlineTimerAt = nil
            expireRequests()
        }
    }

    func expireRequests() {
        let expired = state.expire(now: .now)
        // Timed out before leaving this process: say so, the caller may safely retry elsewhere.
        for request in expired.queued { request.finish(.failure(Self.expiredInQueue)) }
        for (id, request) in expired.streams {
            if let session {
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, UInt32(NGHTTP2_CANCEL.rawValue))
            }
            request.finish(.failure(.timedOut))
        }
        if let next = expired.nextDeadline { armDeadlineTimer(for: next) }
        afterActivity()
    }

    /// Every interval: if nothing arrived since the last tick, PING; no answer within the timeout means dead.
    func armPingTimer() {
        guard let interval = configuration.pingInterval else { return }
        pingTimer = loop.schedule(after: interval) { [self] in
            pingTimer = nil
            guard let session else { return }
            if pingTimeoutTimer == nil && ContinuousClock.now - lastReadAt >= interval {
                nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
                flush()
                pingTimeoutTimer = loop.schedule(after: configuration.pingTimeout) { [self] in
                    pingTimeoutTimer = nil
                    close(inFlight: .connectionClosed, queued: .requestNotSent("PING unanswered"), reason: .connectionClosed)
                }
            }
            armPingTimer()
        }
    }

    // MARK: Closing

    /// Fails what is pending, frees the C objects and reports the close. `reason` is nil for an orderly close.
    func close(inFlight: NetworkError, queued: NetworkError, reason: NetworkError?) {
        guard state.phase != .closed else { return }
        let failed = state.closed(error: inFlight, queuedError: queued)
        for timer in [connectTimer, deadlineTimer, pingTimer, pingTimeoutTimer] { timer?.cancel() }
        connectTimer = nil
        deadlineTimer = nil
        deadlineTimerAt = nil
        pingTimer = nil
        pingTimeoutTimer = nil
        if let bev {
            bufferevent_setcb(bev, nil, nil, nil, nil)
            bufferevent_free(bev)
            self.bev = nil
        }
        if let session {
            nghttp2_session_del(session)
            self.session = nil
        }
        // The owner hears first, so a caller retrying at once does not pick this connection again.
        emit(.closed(reason))
        for group in failed {
            for request in group.requests { request.finish(.failure(group.error)) }
        }
        if retainedByCallbacks {
            // Released on a later turn of the loop: a C callback may still be running on `self`.
            retainedByCallbacks = false
            loop.execute { [self] in Unmanaged.passUnretained(self).release() }
        }
    }
}
