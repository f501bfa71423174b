// One accepted HTTP/2 connection: a TLS bufferevent feeding an nghttp2 server session, as in nghttp2's
// examples/libevent-server.c. Everything here runs on the connection's loop thread; the public operations
// hop there when called from elsewhere. nghttp2 must not be re-entered from its own callbacks, so frames
// submitted while it is reading are sent once the read returns.
internal import CLibEvent
internal import CNGHTTP2
internal import COpenSSL
import Foundation

/// One HTTP/2 connection as its handler sees it: identity, peer, per-connection state and controls.
public final class HTTP2ServerConnection: @unchecked Sendable {
    /// Unique among the connections of its server.
    public let id: UInt64
    /// The peer, as `address:port` (`[address]:port` for IPv6).
    public let remoteAddress: String
    /// The loop whose thread owns this connection.
    public let loop: EventLoop
    /// Per-connection data for the handler (for example a cache of verified tokens).
    /// Read and write it on the loop thread only: in `handle`, or through `loop.execute`.
    public var state: AnyObject?
    /// The SETTINGS_MAX_CONCURRENT_STREAMS last sent to the peer (read on the loop thread).
    public private(set) var maxConcurrentStreams: UInt32
    /// Requests received complete on this connection so far (read on the loop thread).
    public private(set) var requestCount = 0

    private var headerListLimit: Int { Int(core.configuration.maxHeaderListSize) }
    private let core: HTTP2ServerCore  // a cycle through the registry, broken when the connection closes
    private var bufferEvent: OpaquePointer?
    private var session: OpaquePointer?
    private var streams: [Int32: HTTP2ServerStream] = [:]
    /// The highest stream id a request arrived on: the last-stream-id a GOAWAY must name.
    private var highestStreamID: Int32 = 0
    /// The last-stream-id of the GOAWAY sent, once one is.
    private var goAwayLastStreamID: Int32?
    private var receiving = false
    private var closeRequested = false
    private var closed = false
    private var pendingGoAway: (errorCode: UInt32, debugData: [UInt8], afterResponses: Int)?
    // Scratch space for response headers, reused by every response of the connection.
    private var headerBytes: [UInt8] = []
    private var headerRanges: [(name: Range<Int>, value: Range<Int>)] = []
    private var headerEntries: [nghttp2_nv] = []

    init?(fd: Int32, id: UInt64, remoteAddress: String, loop: EventLoop, core: HTTP2ServerCore) {
        guard let ssl = core.tls.makeConnection() else {
            Glibc.close(fd)
            return nil
        }
        let options = Int32(BEV_OPT_CLOSE_ON_FREE.rawValue | BEV_OPT_DEFER_CALLBACKS.rawValue)
        guard let bufferEvent = bufferevent_openssl_socket_new(loop.base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, options) else {
            SSL_free(ssl)
            Glibc.close(fd)
            return nil
        }
        self.id = id
        self.remoteAddress = remoteAddress
        self.loop = loop
        self.core = core
        self.bufferEvent = bufferEvent
        self.maxConcurrentStreams = core.configuration.maxConcurrentStreams
        bufferevent_openssl_set_allow_dirty_shutdown(bufferEvent, 1)
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        if let bufferEvent { bufferevent_free(bufferEvent) }
    }

    private var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    fileprivate static func from(_ pointer: UnsafeMutableRawPointer?) -> HTTP2ServerConnection {
        Unmanaged<HTTP2ServerConnection>.fromOpaque(pointer!).takeUnretainedValue()
    }

    /// Starts the TLS handshake. The registry holds the connection until `close()`.
    func start() {
        guard let bufferEvent else { return }
        bufferevent_setcb(
            bufferEvent,
            { _, context in
                HTTP2ServerConnection.from(context).readable()
            },
            { _, context in
                HTTP2ServerConnection.from(context).writable()
            },
            { _, events, context in
                HTTP2ServerConnection.from(context).event(events)
            }, context)
        if let idleTimeout = core.configuration.idleTimeout {
            var timeout = timeval(idleTimeout)
            bufferevent_set_timeouts(bufferEvent, &timeout, nil)
        }
        bufferevent_enable(bufferEvent, Int16(EV_READ | EV_WRITE))
    }

    // MARK: - Public controls

    /// Sends SETTINGS_MAX_CONCURRENT_STREAMS `limit` to the peer; callable from any thread.
    public func setMaxConcurrentStreams(_ limit: UInt32) {
        onLoop { connection in
            guard let session = connection.session, !connection.closed else { return }
            var entry = nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: limit)
            guard nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entry, 1) == 0 else { return }
            connection.maxConcurrentStreams = limit
            connection.sendUnlessReceiving()
        }
    }

    /// Sends GOAWAY with `errorCode` and `debugData` (APNs puts `{"reason":...}` there), now or after the
    /// next `afterResponses` responses. Streams already received still get their responses; the connection
    /// closes once they are done. Callable from any thread.
    public func goAway(errorCode: UInt32 = 0, debugData: [UInt8] = [], afterResponses: Int = 0) {
        onLoop { connection in
            guard !connection.closed else { return }
            if afterResponses > 0 {
                connection.pendingGoAway = (errorCode, debugData, afterResponses)
            } else {
                connection.submitGoAway(errorCode: errorCode, debugData: debugData)
            }
        }
    }

    /// Closes the connection at once, without GOAWAY; in-flight streams are lost. Callable from any thread.
    public func terminate() {
        onLoop { $0.close() }
    }

    private func onLoop(_ body: @escaping @Sendable (HTTP2ServerConnection) -> Void) {
        if loop.inEventLoop {
            body(self)
        } else {
            loop.execute { body(self) }
        }
    }

    // MARK: - Connection life

    private func event(_ events: Int16) {
        if events & Int16(BEV_EVENT_CONNECTED) != 0 {
            handshakeDone()
            return
        }
        if events & Int16(BEV_EVENT_TIMEOUT) != 0, session != nil, let bufferEvent {
            // The read timeout disabled reading. A quiet client awaiting its responses is not idle.
            bufferevent_enable(bufferEvent, Int16(EV_READ))
            if streams.isEmpty { submitGoAway(errorCode: 0, debugData: []) }
            return
        }
        close()  // EOF, error, or a TLS handshake that timed out
    }

    private func handshakeDone() {
        guard let bufferEvent, let ssl = bufferevent_openssl_get_ssl(bufferEvent) else { return close() }
        var protocolName: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &protocolName, &length)
        guard length == 2, let protocolName, protocolName[0] == UInt8(ascii: "h"), protocolName[1] == UInt8(ascii: "2") else {
            return close()  // the client did not offer ALPN at all
        }
        guard makeSession() else { return close() }
        core.handler.connectionOpened(self)
        send()
    }

    private func makeSession() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_send_callback(
            callbacks,
            { _, data, length, _, context in
                HTTP2ServerConnection.from(context).output(data!, length)
            })
        nghttp2_session_callbacks_set_on_begin_headers_callback(
            callbacks,
            { _, frame, context in
                HTTP2ServerConnection.from(context).beginHeaders(frame!)
            })
        nghttp2_session_callbacks_set_on_header_callback(
            callbacks,
            { session, frame, name, nameLength, value, valueLength, _, context in
                guard let stream = HTTP2ServerStream.from(session, frame!.pointee.hd.stream_id) else { return 0 }
                // nghttp2 does not enforce our SETTINGS_MAX_HEADER_LIST_SIZE; over it, the stream is reset.
                stream.headerListSize += nameLength + valueLength + 32
                if stream.headerListSize > HTTP2ServerConnection.from(context).headerListLimit {
                    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
                }
                stream.header(UnsafeBufferPointer(start: name, count: nameLength), UnsafeBufferPointer(start: value, count: valueLength))
                return 0
            })
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
            callbacks,
            { session, _, streamID, data, length, context in
                guard let stream = HTTP2ServerStream.from(session, streamID) else { return 0 }
                HTTP2ServerConnection.from(context).data(stream, UnsafeBufferPointer(start: data, count: length))
                return 0
            })
        nghttp2_session_callbacks_set_on_frame_recv_callback(
            callbacks,
            { _, frame, context in
                HTTP2ServerConnection.from(context).frameReceived(frame!)
            })
        nghttp2_session_callbacks_set_on_stream_close_callback(
            callbacks,
            { _, streamID, _, context in
                HTTP2ServerConnection.from(context).streams[streamID] = nil
                return 0
            })
        guard nghttp2_session_server_new(&session, callbacks, context) == 0, let session else { return false }

        let configuration = core.configuration
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: configuration.maxConcurrentStreams),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: configuration.initialWindowSize),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: configuration.maxHeaderListSize),
        ]
        guard nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count) == 0 else { return false }
        if configuration.initialWindowSize > 65_535 {
            _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(clamping: configuration.initialWindowSize))
        }
        return true
    }

    /// Frees the session and the socket; idempotent.
    func close() {
        guard !closed else { return }
        if receiving {  // nghttp2 is on the stack; free it once the read returns
            closeRequested = true
            return
        }
        closed = true
        if let session { nghttp2_session_del(session) }
        session = nil
        streams.removeAll()
        if let bufferEvent { bufferevent_free(bufferEvent) }
        bufferEvent = nil
        core.closed(self)
        core.handler.connectionClosed(self)
    }

    /// Server shutdown: GOAWAY now, close when the streams already received are done.
    func beginShutdown() {
        guard !closed else { return }
        if session == nil { return close() }  // still in the TLS handshake
        submitGoAway(errorCode: 0, debugData: [])
    }

    private func submitGoAway(errorCode: UInt32, debugData: [UInt8]) {
        guard let session else { return }
        pendingGoAway = nil
        // nghttp2's "last processed" stream is that of the latest frame received, which can be lower than
        // a stream already answered; a GOAWAY naming it would tell the client to resend handled requests.
        let lastStream = max(nghttp2_session_get_last_proc_stream_id(session), highestStreamID)
        goAwayLastStreamID = lastStream
        _ = debugData.withUnsafeBufferPointer { data in
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStream, errorCode, data.baseAddress, data.count)
        }
        sendUnlessReceiving()
    }

    // MARK: - Bytes in and out

    private func readable() {
        guard let bufferEvent, let session else { return }
        let input = bufferevent_get_input(bufferEvent)
        let length = evbuffer_get_length(input)
        guard length > 0, let data = evbuffer_pullup(input, -1) else { return }
        receiving = true
        let consumed = nghttp2_session_mem_recv(session, data, length)
        receiving = false
        guard consumed >= 0, !closeRequested else { return close() }
        evbuffer_drain(input, consumed)
        send()
    }

    private func writable() {
        guard let bufferEvent, let session else { return }
        if evbuffer_get_length(bufferevent_get_output(bufferEvent)) > 0 { return }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 { return close() }
        send()
    }

    private func sendUnlessReceiving() {
        if !receiving { send() }
    }

    /// Lets nghttp2 write what it has; closes when the session is finished and the output has drained.
    private func send() {
        guard let session, let bufferEvent, !closed else { return }
        guard nghttp2_session_send(session) == 0 else { return close() }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
            && evbuffer_get_length(bufferevent_get_output(bufferEvent)) == 0
        {
            close()
        }
    }

    private func output(_ data: UnsafePointer<UInt8>, _ length: Int) -> Int {
        guard let bufferEvent else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        // Stop producing while a lot is waiting for the socket; the write callback resumes.
        if evbuffer_get_length(bufferevent_get_output(bufferEvent)) >= 1 << 16 {
            return Int(NGHTTP2_ERR_WOULDBLOCK.rawValue)
        }
        bufferevent_write(bufferEvent, data, length)
        return length
    }

    // MARK: - Frames

    private func beginHeaders(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        guard frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
            frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST, let session
        else { return 0 }
        let id = frame.pointee.hd.stream_id
        // A stream that starts after the GOAWAY was decided (later in the same read) is refused, unprocessed,
        // so the client may send it elsewhere; without a stream object its frames are ignored.
        if let goAwayLastStreamID, id > goAwayLastStreamID {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_REFUSED_STREAM.rawValue)
            return 0
        }
        let stream = HTTP2ServerStream(id: id)
        highestStreamID = max(highestStreamID, stream.id)
        streams[stream.id] = stream
        nghttp2_session_set_stream_user_data(session, stream.id, Unmanaged.passUnretained(stream).toOpaque())
        return 0
    }

    private func data(_ stream: HTTP2ServerStream, _ chunk: UnsafeBufferPointer<UInt8>) {
        guard !stream.rejected else { return }
        if stream.body.count + chunk.count > core.configuration.maxRequestBodySize {
            reject(stream)
        } else {
            stream.body.append(contentsOf: chunk)
        }
    }

    private func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        let type = frame.pointee.hd.type
        guard type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue),
            let stream = HTTP2ServerStream.from(session, frame.pointee.hd.stream_id)
        else { return 0 }
        if frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 {
            if !stream.rejected { dispatch(stream) }
        } else if type == UInt8(NGHTTP2_HEADERS.rawValue), let declared = stream.contentLength,
            declared > core.configuration.maxRequestBodySize
        {
            reject(stream)
        }
        return 0
    }

    /// Answers 413 at once and drops the rest of the body as it arrives. No RST_STREAM follows: curl reports
    /// RST_STREAM(NO_ERROR) during its upload as a failure instead of showing the 413.
    private func reject(_ stream: HTTP2ServerStream) {
        stream.rejected = true
        stream.body = []
        respond(stream, core.configuration.payloadTooLargeResponse)
    }

    // MARK: - Requests and responses

    private func dispatch(_ stream: HTTP2ServerStream) {
        requestCount += 1
        let request = HTTPRequest(
            method: stream.method, path: stream.path, authority: stream.authority,
            headers: HTTPHeaders(stream.headers), body: stream.body)
        stream.body = []
        switch core.handler.handle(request, connection: self) {
        case .response(let response):
            respond(stream, response)
        case .reset(let errorCode):
            guard let session else { return }
            stream.responded = true
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, errorCode)
        case .deferred(let work):
            let streamID = stream.id
            Task {
                let response = await work()
                self.loop.execute { self.respondLater(streamID: streamID, response) }
            }
        }
    }

    private func respondLater(streamID: Int32, _ response: HTTPResponse) {
        guard !closed, let stream = streams[streamID] else { return }  // the stream was reset or closed
        respond(stream, response)
        sendUnlessReceiving()
    }

    private func appendHeader(_ name: String, _ value: String) {
        let nameStart = headerBytes.count
        headerBytes.append(contentsOf: name.utf8)
        let valueStart = headerBytes.count
        headerBytes.append(contentsOf: value.utf8)
        headerRanges.append((nameStart..<valueStart, valueStart..<headerBytes.count))
    }

    private func respond(_ stream: HTTP2ServerStream, _ response: HTTPResponse) {
        guard let session, !stream.responded else { return }
        stream.responded = true
        stream.responseBody = response.body
        // A GOAWAY due with this response goes first, so a client that stops reading after its last
        // response has seen it.
        if var goAway = pendingGoAway {
            goAway.afterResponses -= 1
            pendingGoAway = goAway
            if goAway.afterResponses <= 0 { submitGoAway(errorCode: goAway.errorCode, debugData: goAway.debugData) }
        }
        var provider = nghttp2_data_provider(
            source: nghttp2_data_source(ptr: Unmanaged.passUnretained(stream).toOpaque()),
            read_callback: { _, _, buffer, length, flags, source, _ in
                let stream = Unmanaged<HTTP2ServerStream>.fromOpaque(source!.pointee.ptr).takeUnretainedValue()
                return stream.readResponse(into: buffer!, length, flags!)
            })
        let hasBody = !response.body.isEmpty
        // Names and values go into one reused buffer; nghttp2 copies them during the call.
        headerBytes.removeAll(keepingCapacity: true)
        headerRanges.removeAll(keepingCapacity: true)
        appendHeader(":status", String(response.status))
        for field in response.headers.fields { appendHeader(field.name, field.value) }
        headerEntries.removeAll(keepingCapacity: true)
        headerBytes.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            for range in headerRanges {
                headerEntries.append(
                    nghttp2_nv(
                        name: base + range.name.lowerBound, value: base + range.value.lowerBound,
                        namelen: range.name.count, valuelen: range.value.count,
                        flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            if hasBody {
                _ = nghttp2_submit_response(session, stream.id, headerEntries, headerEntries.count, &provider)
            } else {
                _ = nghttp2_submit_response(session, stream.id, headerEntries, headerEntries.count, nil)
            }
        }
    }
}

/// One request stream: its headers and body as they arrive, then the response body nghttp2 reads from.
final class HTTP2ServerStream {
    let id: Int32
    var method = ""
    var path = ""
    var authority: String?
    var contentLength: Int?
    var headerListSize = 0
    var headers: [HTTPField] = []
    var body: [UInt8] = []
    var rejected = false
    var responded = false
    var responseBody: [UInt8] = []
    private var responseOffset = 0

    init(id: Int32) { self.id = id }

    static func from(_ session: OpaquePointer?, _ streamID: Int32) -> HTTP2ServerStream? {
        guard let session, let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Unmanaged<HTTP2ServerStream>.fromOpaque(pointer).takeUnretainedValue()
    }

    func header(_ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>) {
        let text = String(decoding: value, as: UTF8.self)
        if name.first == UInt8(ascii: ":") {
            switch String(decoding: name, as: UTF8.self) {
            case ":method": method = text
            case ":path": path = text
            case ":authority": authority = text
            default: break  // :scheme
            }
            return
        }
        let field = HTTPField(lowercaseName: String(decoding: name, as: UTF8.self), value: text)
        if field.name == "content-length" {
            contentLength = Int(text)
            if let contentLength, contentLength > 0 { body.reserveCapacity(min(contentLength, 1 << 20)) }
        }
        headers.append(field)
    }

    func readResponse(into buffer: UnsafeMutablePointer<UInt8>, _ length: Int, _ flags: UnsafeMutablePointer<UInt32>) -> Int {
        let count = min(length, responseBody.count - responseOffset)
        responseBody.withUnsafeBufferPointer { body in
            buffer.update(from: body.baseAddress! + responseOffset, count: count)
        }
        responseOffset += count
        if responseOffset == responseBody.count {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
        }
        return count
    }
}

extension HTTPField {
    /// A field whose name is known to be lowercase already (nghttp2 refuses uppercase header names).
    init(lowercaseName name: String, value: String) {
        self.name = name
        self.value = value
    }
}
