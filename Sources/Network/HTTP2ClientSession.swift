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
final class HTTP2ClientSession: @unchecked Sendable {
    let loop: EventLoop
    let origin: HTTP2Origin
    /// `origin.authority`, computed once.
    private let authority: String
    let tls: TLSClientContext
    let configuration: HTTP2ClientConnection.Configuration
    private let emit: @Sendable (HTTP2ClientConnection.Event) -> Void

    // The hot loop-confined state skips dynamic exclusivity checks; only the loop thread touches it.
    @exclusivity(unchecked) private(set) var state = HTTP2ClientStreamState<HTTP2ClientStream>()
    /// Requests handed over by other threads, taken by the loop in batches.
    private let inbox = Mutex<[HTTP2ClientStream]>([])
    private var started = false
    private var bev: OpaquePointer?
    private var session: OpaquePointer?
    /// The bufferevent's callbacks hold one reference to `self` until teardown.
    private var retainedByCallbacks = false
    private var connectTimer: LoopTimer?
    private var deadlineTimer: LoopTimer?
    private var deadlineTimerAt: ContinuousClock.Instant?
    private var pingTimer: LoopTimer?
    private var pingTimeoutTimer: LoopTimer?
    private var lastReadAt = ContinuousClock.now
    // Scratch space for request headers, reused by every request.
    @exclusivity(unchecked) private var headerBytes: [UInt8] = []
    @exclusivity(unchecked) private var headerSpans: [(name: Int, nameLength: Int, value: Int, valueLength: Int)] = []
    @exclusivity(unchecked) private var headerFields: [nghttp2_nv] = []
    /// The stream the last callback was about: callbacks come in runs for one stream.
    @exclusivity(unchecked) private var lastStream: HTTP2ClientStream?

    private static let expiredInQueue = NetworkError.requestNotSent("timed out before a stream was free")

    /// nghttp2 stops producing frames while this much output waits for the socket.
    private static let outputHighWater = 1 << 17

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

    private func drainInbox() {
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

    private func accept(_ stream: HTTP2ClientStream) {
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

    private func startStreams() {
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

    /// Hands one request to nghttp2; returns the stream id or a negative nghttp2 error.
    private func submit(_ stream: HTTP2ClientStream) -> Int32 {
        let request = stream.request
        headerBytes.removeAll(keepingCapacity: true)
        headerSpans.removeAll(keepingCapacity: true)
        addHeader(":method", request.method)
        addHeader(":scheme", "https")
        addHeader(":authority", request.authority ?? authority)
        addHeader(":path", request.path)
        var hasContentLength = false
        for field in request.headers {
            if field.name == "content-length" { hasContentLength = true }
            // HTTP/1.1 connection headers are malformed in HTTP/2 (RFC 9113, 8.2.2); peers reset for them.
            switch field.name {
            case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host": continue
            default: addHeader(field.name, field.value)
            }
        }
        if !request.body.isEmpty && !hasContentLength { addHeader("content-length", String(request.body.count)) }

        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readBodyCallback)
        headerFields.removeAll(keepingCapacity: true)
        return headerBytes.withUnsafeMutableBufferPointer { bytes in
            let base = bytes.baseAddress!
            for span in headerSpans {
                headerFields.append(
                    nghttp2_nv(
                        name: base + span.name, value: base + span.value, namelen: span.nameLength,
                        valuelen: span.valueLength, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return request.body.isEmpty
                ? nghttp2_submit_request(session, nil, headerFields, headerFields.count, nil, nil)
                : nghttp2_submit_request(session, nil, headerFields, headerFields.count, &provider, nil)
        }
    }

    private func addHeader(_ name: String, _ value: String) {
        let nameStart = headerBytes.count
        headerBytes.append(contentsOf: name.utf8)
        let valueStart = headerBytes.count
        headerBytes.append(contentsOf: value.utf8)
        headerSpans.append((nameStart, valueStart - nameStart, valueStart, headerBytes.count - valueStart))
    }

    /// nghttp2 asks for the next piece of a request body; bodies larger than the flow-control window are
    /// read piece by piece as WINDOW_UPDATEs arrive, so the request keeps its bytes until the stream ends.
    fileprivate func readBody(
        streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int,
        flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        guard let stream = activeStream(streamID) else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let body = stream.request.body
        let count = min(length, body.count - stream.bodyOffset)
        body.withUnsafeBufferPointer { bytes in
            buffer.update(from: bytes.baseAddress! + stream.bodyOffset, count: count)
        }
        stream.bodyOffset += count
        if stream.bodyOffset == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    // MARK: Connecting

    private func start() {
        started = true
        connectTimer = loop.schedule(after: configuration.connectTimeout) { [self] in
            connectTimer = nil
            let error = NetworkError.connectFailed("timed out connecting to \(authority)")
            close(inFlight: error, queued: error, reason: error)
        }
        if let address = SocketAddress.resolve(host: origin.host, port: origin.port, numericOnly: true) {
            connect(to: address)
            return
        }
        // A name: getaddrinfo blocks, so it runs on a Dispatch thread, never on the loop or the Swift pool.
        DispatchQueue.global().async { [self] in
            let address = SocketAddress.resolve(host: self.origin.host, port: self.origin.port, numericOnly: false)
            loop.execute { [self] in
                guard state.phase == .connecting else { return }
                if let address {
                    connect(to: address)
                } else {
                    let error = NetworkError.connectFailed("cannot resolve \(self.origin.host)")
                    close(inFlight: error, queued: error, reason: error)
                }
            }
        }
    }

    private func connect(to address: SocketAddress) {
        let ssl: OpaquePointer
        do {
            ssl = try tls.makeSSL(host: origin.host)
        } catch {
            close(inFlight: error, queued: error, reason: error)
            return
        }
        let options = Int32(BEV_OPT_CLOSE_ON_FREE.rawValue | BEV_OPT_DEFER_CALLBACKS.rawValue)
        guard let bev = bufferevent_openssl_socket_new(loop.base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, options) else {
            SSL_free(ssl)
            let error = NetworkError.tls("bufferevent_openssl_socket_new failed")
            close(inFlight: error, queued: error, reason: error)
            return
        }
        self.bev = bev
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1)
        retainedByCallbacks = true
        bufferevent_setcb(
            bev,
            { _, context in
                Unmanaged<HTTP2ClientSession>.fromOpaque(context!).takeUnretainedValue().readAvailable()
            },
            { _, context in
                Unmanaged<HTTP2ClientSession>.fromOpaque(context!).takeUnretainedValue().outputDrained()
            },
            { _, events, context in
                Unmanaged<HTTP2ClientSession>.fromOpaque(context!).takeUnretainedValue().handle(events: events)
            }, Unmanaged.passRetained(self).toOpaque())
        bufferevent_enable(bev, Int16(EV_READ | EV_WRITE))
        var storage = address.storage
        let connected = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bufferevent_socket_connect(bev, $0, address.length) }
        }
        if connected != 0 {
            let error = NetworkError.connectFailed("\(origin.authority): \(String(cString: strerror(errno)))")
            close(inFlight: error, queued: error, reason: error)
        }
    }

    private func handle(events: Int16) {
        if events & Int16(BEV_EVENT_CONNECTED) != 0 {
            handshakeCompleted()
            return
        }
        guard events & Int16(BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT) != 0 else { return }
        if state.phase == .connecting {
            let error = connectError()
            close(inFlight: error, queued: error, reason: error)
        } else {
            close(inFlight: .connectionClosed, queued: .requestNotSent("the connection closed"), reason: .connectionClosed)
        }
    }

    /// Why a connection attempt failed: certificate, ALPN, other TLS trouble, or TCP.
    private func connectError() -> NetworkError {
        let ssl = bev.flatMap { bufferevent_openssl_get_ssl($0) }
        if let ssl, SSL_get_verify_result(ssl) != X509_V_OK { return TLSClientContext.handshakeError(ssl: ssl) }
        let socketError = errno
        // libevent queues OpenSSL's error codes, mixed with SSL_get_error values (which have no library).
        var codes: [UInt] = []
        while let bev, case let code = bufferevent_get_openssl_error(bev), code != 0 { codes.append(code) }
        let tlsCodes = codes.filter { ERR_GET_LIB($0) != 0 }
        if tlsCodes.contains(where: { ERR_GET_REASON($0) == SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL }) { return .alpnRefused }
        // OpenSSL reports a peer that hung up mid-handshake as a TLS error; it is the connection that failed
        // (a peer restarting, say), and another attempt may succeed.
        let hungUp = !tlsCodes.isEmpty && tlsCodes.allSatisfy { ERR_GET_REASON($0) == SSL_R_UNEXPECTED_EOF_WHILE_READING }
        if !tlsCodes.isEmpty && !hungUp { return .tls(tlsCodes.map(TLSClientContext.describe).joined(separator: "; ")) }
        let detail = socketError == 0 || hungUp ? "closed during the TLS handshake" : String(cString: strerror(socketError))
        return .connectFailed("\(origin.authority): \(detail)")
    }

    private func handshakeCompleted() {
        guard let bev, let ssl = bufferevent_openssl_get_ssl(bev) else { return }
        guard TLSClientContext.negotiatedProtocol(ssl: ssl) == "h2" else {
            close(inFlight: .alpnRefused, queued: .alpnRefused, reason: .alpnRefused)
            return
        }
        var one: Int32 = 1
        setsockopt(bufferevent_getfd(bev), Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        do {
            try makeSession()
        } catch {
            close(inFlight: error, queued: error, reason: error)
            return
        }
        connectTimer?.cancel()
        connectTimer = nil
        lastReadAt = .now
        state.connected()
        emit(.connected)
        armPingTimer()
        afterActivity()
    }

    private func makeSession() throws(NetworkError) {
        var callbacks: OpaquePointer?
        try checkNGHTTP2(nghttp2_session_callbacks_new(&callbacks))
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_send_callback(callbacks, sendCallback)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, frameReceivedCallback)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, headerCallback)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, dataChunkCallback)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, streamClosedCallback)

        var option: OpaquePointer?
        try checkNGHTTP2(nghttp2_option_new(&option))
        defer { nghttp2_option_del(option) }
        // Until the peer's first SETTINGS, assume one stream (APNs starts there), not nghttp2's 100.
        nghttp2_option_set_peer_max_concurrent_streams(option, 1)

        var session: OpaquePointer?
        try checkNGHTTP2(nghttp2_session_client_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option))
        self.session = session
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue),
                value: UInt32(configuration.initialWindowSize)),
        ]
        try checkNGHTTP2(nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count))
        if configuration.connectionWindowSize > 65_535 {
            try checkNGHTTP2(
                nghttp2_session_set_local_window_size(
                    session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0,
                    Int32(configuration.connectionWindowSize)))
        }
    }

    // MARK: Reading and writing

    private func readAvailable() {
        guard let bev else { return }
        lastReadAt = .now
        let input = bufferevent_get_input(bev)
        while let session {
            var chunk = iovec()  // libevent's evbuffer_iovec is struct iovec here
            guard evbuffer_peek(input, -1, nil, &chunk, 1) > 0, chunk.iov_len > 0, let base = chunk.iov_base else { break }
            let consumed = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), chunk.iov_len)
            if consumed < 0 {
                let code = Int32(consumed)
                close(
                    inFlight: .http2(code: code, detail: String(cString: nghttp2_strerror(code))),
                    queued: .requestNotSent("HTTP/2 protocol error"), reason: .http2(code: code, detail: "receive"))
                return
            }
            evbuffer_drain(input, consumed)
        }
        afterActivity()
    }

    private func outputDrained() {
        flush()
        closeIfFinished()
    }

    /// Lets nghttp2 write what it has into the bufferevent.
    private func flush() {
        guard let session else { return }
        let code = nghttp2_session_send(session)
        if code != 0 {
            close(
                inFlight: .http2(code: code, detail: String(cString: nghttp2_strerror(code))),
                queued: .requestNotSent("HTTP/2 protocol error"), reason: .http2(code: code, detail: "send"))
        }
    }

    fileprivate func write(_ data: UnsafePointer<UInt8>, length: Int) -> Int {
        guard let bev else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        if evbuffer_get_length(bufferevent_get_output(bev)) >= HTTP2ClientSession.outputHighWater {
            return Int(NGHTTP2_ERR_WOULDBLOCK.rawValue)
        }
        return bufferevent_write(bev, data, length) == 0 ? length : Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }

    private func afterActivity() {
        startStreams()
        flush()
        closeIfFinished()
    }

    /// After GOAWAY, once the streams it allowed have finished; or when nghttp2 has nothing more to do.
    private func closeIfFinished() {
        guard let session, let bev else { return }
        let goingAway = if case .goingAway = state.phase { true } else { false }
        let nghttp2Done = nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
        guard (goingAway && state.isDrained) || nghttp2Done else { return }
        guard evbuffer_get_length(bufferevent_get_output(bev)) == 0 || nghttp2Done else { return }
        close(inFlight: .connectionClosed, queued: .requestNotSent("the connection closed"), reason: nil)
    }

    // MARK: Frames and streams (from nghttp2 callbacks; no teardown happens inside them)

    fileprivate func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        switch UInt32(header.type) {
        case NGHTTP2_SETTINGS.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0:
            let limit = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
            let clamped = Int(min(limit, 1 << 20))
            if state.settingsReceived(maxConcurrentStreams: clamped) {
                emit(.maxConcurrentStreamsChanged(clamped))
            }
        case NGHTTP2_GOAWAY.rawValue:
            let goaway = frame.pointee.goaway
            let debugData =
                goaway.opaque_data_len > 0
                ? String(decoding: UnsafeBufferPointer(start: goaway.opaque_data, count: goaway.opaque_data_len), as: UTF8.self)
                : ""
            goAway(lastStreamID: goaway.last_stream_id, errorCode: goaway.error_code, debugData: debugData)
        case NGHTTP2_PING.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
            pingTimeoutTimer?.cancel()
            pingTimeoutTimer = nil
        default:
            break
        }
    }

    private func goAway(lastStreamID: Int32, errorCode: UInt32, debugData: String) {
        let failed = state.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
        // The owner hears first, so a caller retrying at once does not pick this connection again.
        emit(.goAway(lastStreamID: lastStreamID, errorCode: errorCode))
        for request in failed.requests { request.finish(.failure(failed.error)) }
    }

    fileprivate func headerReceived(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard let stream = activeStream(streamID) else { return }
        if name.count == 7 && name.elementsEqual(":status".utf8) {
            var status = 0
            for digit in value { status = status * 10 + Int(digit &- 48) }
            if stream.status >= 100 && stream.status < 200 { stream.headers.removeAll() }
            stream.status = status
        } else {
            if stream.headers.isEmpty { stream.headers.reserveCapacity(8) }
            let field = HTTPField(lowercasedName: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
            // Room for the whole body at once, within reason.
            if field.name == "content-length", let length = Int(field.value), length > 0 {
                stream.body.reserveCapacity(min(length, 1 << 24))
            }
            stream.headers.append(field)
        }
    }

    fileprivate func dataReceived(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) {
        activeStream(streamID)?.body.append(contentsOf: data)
    }

    /// The request on stream `id` if it is still in flight.
    private func activeStream(_ id: Int32) -> HTTP2ClientStream? {
        if let lastStream, lastStream.streamID == id, !lastStream.isFinished { return lastStream }
        lastStream = state.active[id]
        return lastStream
    }

    fileprivate func streamClosed(id: Int32, errorCode: UInt32) {
        lastStream = nil
        guard let stream = state.streamClosed(id: id) else { return }
        if errorCode == NGHTTP2_NO_ERROR.rawValue && stream.status >= 200 {
            stream.succeed()
        } else if errorCode == NGHTTP2_REFUSED_STREAM.rawValue {
            stream.finish(.failure(.requestNotSent("the peer refused the stream")))
        } else {
            stream.finish(.failure(.streamReset(errorCode: errorCode)))
        }
    }

    // MARK: Timers

    private func armDeadlineTimer(for deadline: ContinuousClock.Instant) {
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

    private func expireRequests() {
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
    private func armPingTimer() {
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
    private func close(inFlight: NetworkError, queued: NetworkError, reason: NetworkError?) {
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

extension HTTPField {
    /// For names that are lowercase already (HTTP/2 requires it), skipping the copy `init` makes.
    init(lowercasedName: String, value: String) {
        self.init(name: "", value: value)
        self.name = lowercasedName
    }
}

/// A resolved socket address.
struct SocketAddress: @unchecked Sendable {
    var storage = sockaddr_storage()
    var length: Int32 = 0

    /// getaddrinfo for TCP, IPv4 preferred; with `numericOnly` it never blocks (IP literals only).
    static func resolve(host: String, port: Int, numericOnly: Bool) -> SocketAddress? {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = numericOnly ? AI_NUMERICHOST | AI_NUMERICSERV : AI_NUMERICSERV
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, var first = result else { return nil }
        defer { freeaddrinfo(result) }
        // IPv4 first when a name has both: loopback services often listen on 127.0.0.1 only.
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let current = candidate {
            if current.pointee.ai_family == AF_INET {
                first = current
                break
            }
            candidate = current.pointee.ai_next
        }
        var address = SocketAddress()
        address.length = Int32(first.pointee.ai_addrlen)
        withUnsafeMutableBytes(of: &address.storage) { storage in
            storage.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return address
    }
}

// MARK: nghttp2 callbacks (C function pointers; `user_data` is the unretained session)

private func session(_ userData: UnsafeMutableRawPointer?) -> HTTP2ClientSession {
    Unmanaged<HTTP2ClientSession>.fromOpaque(userData!).takeUnretainedValue()
}

private let sendCallback: nghttp2_send_callback = { _, data, length, _, userData in
    session(userData).write(data!, length: length)
}

private let frameReceivedCallback: nghttp2_on_frame_recv_callback = { _, frame, userData in
    session(userData).frameReceived(frame!)
    return 0
}

private let headerCallback: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue else { return 0 }
    session(userData).headerReceived(
        streamID: frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength))
    return 0
}

private let dataChunkCallback: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    session(userData).dataReceived(streamID: streamID, UnsafeBufferPointer(start: data, count: length))
    return 0
}

private let streamClosedCallback: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
    session(userData).streamClosed(id: streamID, errorCode: errorCode)
    return 0
}

private let readBodyCallback: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    session(userData).readBody(streamID: streamID, into: buffer!, length: length, flags: flags!)
}
