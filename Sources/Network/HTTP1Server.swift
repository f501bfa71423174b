// An HTTP/1.1 server on libevent's evhttp, one evhttp per loop of a group, all accepting from one socket.
// evhttp parses and keeps connections alive; this file covers its corners:
// - its own answers (limits, malformed requests) are fixed HTML pages, so its limits are only a coarse outer
//   guard; the API's smaller body limit is enforced here with a JSON answer the caller shapes, and the pages
//   evhttp still writes (a body over its hard limit) are replaced in the output buffer by the same answers;
// - every method evhttp knows is allowed through to the handler (evhttp's default would answer 501);
// - its timeout only notices idle sockets, so each connection gets a deadline for reading a whole request,
//   armed when the connection is accepted or its previous response is sent: a client trickling bytes is cut off.
// evhttp has no hook for a new connection except the bufferevent callback, which runs before the connection
// object exists; an event activated from it runs later in the same loop pass, when evhttp has finished
// wiring the connection, and adopts it (the connection is the bufferevent's callback argument there).
internal import CLibEvent
import Foundation
import Synchronization

/// How an HTTP/1.1 server listens and what it accepts.
public struct HTTP1ServerConfiguration: Sendable {
    /// A numeric address; names are not resolved.
    public var host: String
    /// 0 picks a free port; `HTTP1Server.port` tells which.
    public var port: Int
    /// The API's body limit: a larger body is answered 413 through `errorResponse` before any handler runs.
    public var maxBodySize: Int = 64 * 1024
    /// evhttp's own limits (coarse outer guards; beyond them evhttp answers with its fixed HTML pages).
    public var hardMaxBodySize: Int = 1 << 20
    public var hardMaxHeadersSize: Int = 64 * 1024
    /// Time from accepting a connection, or sending its previous response, until a whole request has been
    /// read. A slower client is disconnected; this also bounds how long an idle keep-alive connection stays.
    public var requestReadTimeout: Duration = .seconds(10)
    /// evhttp's socket timeout: reading or writing without progress for this long closes the connection.
    public var ioTimeout: Duration = .seconds(30)
    /// How long `shutdown()` waits for in-flight handlers.
    public var shutdownGracePeriod: Duration = .seconds(10)
    /// The answers the server gives by itself: 400 `BadRequest` (a request evhttp could not read), 413
    /// `PayloadTooLarge` (over `maxBodySize`, or over evhttp's hard limit), 503 `ShuttingDown`, and 405
    /// `MethodNotAllowed` for methods evhttp cannot name (anything but GET, POST, HEAD, PUT, DELETE, OPTIONS,
    /// TRACE, CONNECT, PATCH, which all reach the handler).
    public var errorResponse: @Sendable (_ status: Int, _ reason: String) -> HTTPResponse = { status, reason in
        HTTPResponse(status: status, headers: ["content-type": "application/json"], body: Array(#"{"reason":"\#(reason)"}"#.utf8))
    }

    public init(host: String = "127.0.0.1", port: Int = 0) {
        self.host = host
        self.port = port
    }
}

/// What a handler knows about the connection a request came on.
public struct HTTP1RequestContext: Sendable {
    /// Unique among the connections of one server.
    public let connectionID: UInt64
    /// The peer, as `address:port`.
    public let remoteAddress: String
    /// The configured API body limit (bodies over it never reach the handler).
    public let maxBodySize: Int
}

/// Answers the requests of an `HTTP1Server`. Runs as a task; the response is sent on the loop thread.
/// Every method reaches the handler (PATCH, OPTIONS and TRACE included), so a router answers 405 itself.
public protocol HTTP1RequestHandler: Sendable {
    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse
}

/// An HTTP/1.1 server (keep-alive, no TLS) on evhttp, one evhttp per loop of a group.
public final class HTTP1Server: Sendable {
    /// The port the server listens on.
    public let port: Int
    private let shared: HTTP1ServerShared
    private let servers: [HTTP1LoopServer]

    /// Binds at once (throws `.bindFailed`) and starts accepting on every loop of the group.
    public init(configuration: HTTP1ServerConfiguration, group: EventLoopGroup, handler: some HTTP1RequestHandler) throws(NetworkError) {
        let socket = try ListeningSocket(host: configuration.host, port: configuration.port)
        port = socket.port
        let shared = HTTP1ServerShared(configuration: configuration, handler: handler)
        self.shared = shared
        servers = group.loops.map { HTTP1LoopServer(loop: $0, shared: shared) }
        for server in servers {
            let fd = dup(socket.fd)  // each evhttp closes its own copy
            server.loop.execute { server.start(listeningOn: fd) }
        }
    }

    /// Connections accepted so far, over all loops.
    public var acceptedConnectionCount: Int { shared.acceptedConnections.load(ordering: .relaxed) }

    /// Stops accepting, waits for in-flight handlers (up to the grace period; their responses say
    /// `Connection: close`), then closes every connection.
    public func shutdown() async {
        guard shared.beginShutdown() else { return }
        for server in servers { try? await server.loop.submit { server.stopAccepting() } }
        await shared.waitForHandlers()
        // Let the last responses reach their sockets before the connections are freed.
        try? await Task.sleep(for: .milliseconds(50))
        for server in servers { try? await server.loop.submit { server.close() } }
    }
}

/// State shared by the loops of one server: the handler, the settings and the in-flight count.
final class HTTP1ServerShared: Sendable {
    let configuration: HTTP1ServerConfiguration
    let handler: any HTTP1RequestHandler
    let acceptedConnections = Atomic<Int>(0)
    private let state = Mutex<State>(State())

    private struct State {
        var inFlight = 0
        var shuttingDown = false
        var graceExpired = false
        var idle: CheckedContinuation<Void, Never>?
    }

    init(configuration: HTTP1ServerConfiguration, handler: any HTTP1RequestHandler) {
        self.configuration = configuration
        self.handler = handler
    }

    var shuttingDown: Bool { state.withLock { $0.shuttingDown } }

    func beginShutdown() -> Bool {
        state.withLock { state in
            defer { state.shuttingDown = true }
            return !state.shuttingDown
        }
    }

    func handlerStarted() { state.withLock { $0.inFlight += 1 } }

    func handlerFinished() {
        let idle = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.inFlight -= 1
            guard state.inFlight == 0, let idle = state.idle else { return nil }
            state.idle = nil
            return idle
        }
        idle?.resume()
    }

    func waitForHandlers() async {
        let grace = configuration.shutdownGracePeriod
        // The timer may fire before the continuation below is installed; `graceExpired` records that.
        let timer = Task {
            try? await Task.sleep(for: grace)
            guard !Task.isCancelled else { return }
            let idle = self.state.withLock { state in
                state.graceExpired = true
                defer { state.idle = nil }
                return state.idle
            }
            idle?.resume()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.inFlight == 0 || state.graceExpired { return true }
                state.idle = continuation
                return false
            }
            if done { continuation.resume() }
        }
        timer.cancel()
    }
}

/// The evhttp of one loop and the connections it has adopted; used on that loop's thread only.
final class HTTP1LoopServer: @unchecked Sendable {
    let loop: EventLoop
    private let shared: HTTP1ServerShared
    private var http: OpaquePointer?
    private var boundSocket: OpaquePointer?
    private var adoptEvent: OpaquePointer?
    private var toAdopt: [HTTP1Connection] = []
    private var connections: [OpaquePointer: HTTP1Connection] = [:]
    private static let nextConnectionID = Atomic<UInt64>(1)

    init(loop: EventLoop, shared: HTTP1ServerShared) {
        self.loop = loop
        self.shared = shared
    }

    private var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    private static func from(_ pointer: UnsafeMutableRawPointer?) -> HTTP1LoopServer {
        Unmanaged<HTTP1LoopServer>.fromOpaque(pointer!).takeUnretainedValue()
    }

    func start(listeningOn fd: Int32) {
        guard let http = evhttp_new(loop.base) else {
            Glibc.close(fd)
            return
        }
        self.http = http
        let configuration = shared.configuration
        // GET ... PATCH, plus bit 15, which evhttp 2.1 gives every method it cannot name; evhttp would answer
        // a disallowed method with an HTML 501 itself.
        evhttp_set_allowed_methods(http, UInt16.max)
        evhttp_set_max_body_size(http, configuration.hardMaxBodySize)
        evhttp_set_max_headers_size(http, configuration.hardMaxHeadersSize)
        var ioTimeout = timeval(configuration.ioTimeout)
        evhttp_set_timeout_tv(http, &ioTimeout)
        evhttp_set_gencb(
            http,
            { request, context in
                HTTP1LoopServer.from(context).received(request!)
            }, context)
        evhttp_set_bevcb(
            http,
            { base, context in
                HTTP1LoopServer.from(context).makeBufferEvent(base!)
            }, context)
        adoptEvent = event_new(
            loop.base, -1, 0,
            { _, _, context in
                HTTP1LoopServer.from(context).adoptNewConnections()
            }, context)
        boundSocket = evhttp_accept_socket_with_handle(http, fd)
        if boundSocket == nil { Glibc.close(fd) }
    }

    func stopAccepting() {
        if let http, let boundSocket { evhttp_del_accept_socket(http, boundSocket) }
        boundSocket = nil
    }

    /// Frees evhttp and with it every connection.
    func close() {
        stopAccepting()
        if let http { evhttp_free(http) }  // each connection's close callback forgets it
        http = nil
        for connection in connections.values { connection.forget() }
        connections.removeAll()
        toAdopt.removeAll()
        if let adoptEvent { event_free(adoptEvent) }
        adoptEvent = nil
    }

    // MARK: - Connections

    private func makeBufferEvent(_ base: OpaquePointer) -> OpaquePointer? {
        // No BEV_OPT_CLOSE_ON_FREE: evhttp then closes the socket itself when it frees the connection.
        guard let bufferEvent = bufferevent_socket_new(base, -1, 0) else { return nil }
        replaceHTMLErrorPages(of: bufferEvent)
        shared.acceptedConnections.add(1, ordering: .relaxed)
        toAdopt.append(HTTP1Connection(bufferEvent: bufferEvent, id: Self.nextConnectionID.add(1, ordering: .relaxed).oldValue))
        if let adoptEvent { event_active(adoptEvent, EV_TIMEOUT, 0) }
        return bufferEvent
    }

    private func adoptNewConnections() {
        let adopted = toAdopt
        toAdopt.removeAll()
        for connection in adopted {
            guard let evcon = connection.adopt(loop: loop, timeout: shared.configuration.requestReadTimeout) else { continue }
            connections[evcon] = connection
            evhttp_connection_set_closecb(
                evcon,
                { evcon, context in
                    HTTP1LoopServer.from(context).connectionClosed(evcon!)
                }, context)
        }
    }

    private func connectionClosed(_ evcon: OpaquePointer) {
        connections.removeValue(forKey: evcon)?.forget()
    }

    // MARK: - Requests

    private func received(_ request: UnsafeMutablePointer<evhttp_request>) {
        guard let evcon = evhttp_request_get_connection(request) else { return }
        let connection = connections[evcon]
        connection?.disarm()
        let configuration = shared.configuration
        let context = HTTP1RequestContext(
            connectionID: connection?.id ?? 0, remoteAddress: connection?.remoteAddress ?? "unknown",
            maxBodySize: configuration.maxBodySize)
        let pending = HTTP1PendingReply(request: request, connection: connection)
        if shared.shuttingDown {
            return reply(pending, configuration.errorResponse(503, "ShuttingDown"))
        }
        guard let method = Self.methodName(evhttp_request_get_command(request)) else {
            // evhttp kept no name for the method and did not read a body it may have: answer, then close.
            return reply(pending, configuration.errorResponse(405, "MethodNotAllowed"), close: true)
        }
        let input = evhttp_request_get_input_buffer(request)
        let bodySize = evbuffer_get_length(input)
        if bodySize > configuration.maxBodySize {
            return reply(pending, configuration.errorResponse(413, "PayloadTooLarge"))
        }
        let body = [UInt8](unsafeUninitializedCapacity: bodySize) { buffer, count in
            count = bodySize > 0 ? max(0, Int(evbuffer_remove(input, buffer.baseAddress, bodySize))) : 0
        }
        var headers: [HTTPField] = []
        var field = evhttp_request_get_input_headers(request)?.pointee.tqh_first
        while let current = field {
            headers.append(HTTPField(name: String(cString: current.pointee.key), value: String(cString: current.pointee.value)))
            field = current.pointee.next.tqe_next
        }
        let httpRequest = HTTPRequest(
            method: method,
            path: String(cString: evhttp_request_get_uri(request)),
            authority: headers.first { $0.name == "host" }?.value,
            headers: HTTPHeaders(headers), body: body)
        shared.handlerStarted()
        let handler = shared.handler
        Task {
            let response = await handler.handle(httpRequest, context: context)
            self.loop.execute {
                self.reply(pending, response)
                self.shared.handlerFinished()
            }
        }
    }

    /// Sends the response and re-arms the connection's read deadline for its next request.
    private func reply(_ pending: HTTP1PendingReply, _ response: HTTPResponse, close: Bool = false) {
        guard http != nil else { return }  // shut down past the grace period: evhttp freed the request
        let request = pending.request
        if let headers = evhttp_request_get_output_headers(request) {
            for field in response.headers.fields { evhttp_add_header(headers, field.name, field.value) }
            if close || shared.shuttingDown { evhttp_add_header(headers, "connection", "close") }
        }
        if !response.body.isEmpty {
            response.body.withUnsafeBytes { _ = evbuffer_add(evhttp_request_get_output_buffer(request), $0.baseAddress, $0.count) }
        }
        // A request whose client left is detached from its connection; sending frees it.
        evhttp_send_reply(request, Int32(response.status), nil, nil)
        pending.connection?.arm()
    }

    // MARK: - evhttp's own error pages

    /// Watches a connection's output: evhttp answers what it refuses by itself (a body over its hard limit, a
    /// malformed request) with a fixed HTML page and no hook to shape it, so the page is replaced, in the
    /// output buffer before any of it is written, by `errorResponse` for its status.
    private func replaceHTMLErrorPages(of bufferEvent: OpaquePointer) {
        guard let output = bufferevent_get_output(bufferEvent) else { return }
        _ = evbuffer_add_cb(
            output,
            { buffer, info, context in
                guard let buffer, let info, info.pointee.n_added > 0 else { return }
                HTTP1LoopServer.from(context).replaceHTMLErrorPage(in: buffer)
            }, context)
    }

    /// Replaces the buffer's content when it is exactly one whole evhttp error page (status line, headers
    /// saying text/html, a body of their Content-Length starting with evhttp's `<HTML><HEAD>`); else leaves it.
    /// evhttp writes a page in several adds within one call, so the check runs until the body is in.
    private func replaceHTMLErrorPage(in buffer: OpaquePointer) {
        let length = evbuffer_get_length(buffer)
        guard length > 16, length <= 4096 else { return }
        // Every response passes here, a few times each: a look at its status line first, and only the two
        // statuses evhttp answers with by itself are read whole.
        var statusLine = [UInt8](repeating: 0, count: 12)
        guard evbuffer_copyout(buffer, &statusLine, 12) == 12 else { return }
        let code = statusLine[9...].reduce(0) { $0 * 10 + Int($1) - Int(UInt8(ascii: "0")) }
        guard code == 413 || code == 400 else { return }
        var bytes = [UInt8](repeating: 0, count: length)
        guard evbuffer_copyout(buffer, &bytes, length) == length, bytes.starts(with: Array("HTTP/1.".utf8)) else { return }
        guard let page = HTTP1ErrorPage(bytes) else { return }
        // The reasons `errorResponse` is documented to get for the answers this server gives by itself.
        let reason = [400: "BadRequest", 413: "PayloadTooLarge"][page.status] ?? page.reason.replacingOccurrences(of: " ", with: "")
        let response = shared.configuration.errorResponse(page.status, reason)
        var text = "HTTP/1.1 \(page.status) \(page.reason)\r\n"
        for field in response.headers.fields where field.name.lowercased() != "content-length" && field.name.lowercased() != "connection" {
            text += "\(field.name): \(field.value)\r\n"
        }
        text += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        let replacement = Array(text.utf8) + response.body
        evbuffer_drain(buffer, length)
        replacement.withUnsafeBytes { _ = evbuffer_add(buffer, $0.baseAddress, $0.count) }
    }

    private static func methodName(_ command: evhttp_cmd_type) -> String? {
        switch command {
        case EVHTTP_REQ_GET: "GET"
        case EVHTTP_REQ_POST: "POST"
        case EVHTTP_REQ_HEAD: "HEAD"
        case EVHTTP_REQ_PUT: "PUT"
        case EVHTTP_REQ_DELETE: "DELETE"
        case EVHTTP_REQ_OPTIONS: "OPTIONS"
        case EVHTTP_REQ_TRACE: "TRACE"
        case EVHTTP_REQ_CONNECT: "CONNECT"
        case EVHTTP_REQ_PATCH: "PATCH"
        default: nil
        }
    }
}

/// An evhttp request awaiting its response; only its loop touches the pointer.
private struct HTTP1PendingReply: @unchecked Sendable {
    let request: UnsafeMutablePointer<evhttp_request>
    let connection: HTTP1Connection?
}

/// One accepted connection: its identity and its request-read deadline; used on its loop's thread only.
final class HTTP1Connection: @unchecked Sendable {
    let id: UInt64
    private(set) var remoteAddress = "unknown"
    private var bufferEvent: OpaquePointer?
    private var evcon: OpaquePointer?
    private var deadline: OpaquePointer?
    private var timeout = timeval()

    init(bufferEvent: OpaquePointer, id: UInt64) {
        self.bufferEvent = bufferEvent
        self.id = id
    }

    deinit { if let deadline { event_free(deadline) } }

    /// Finds the evhttp connection that now owns the bufferevent and starts the first read deadline.
    func adopt(loop: EventLoop, timeout: Duration) -> OpaquePointer? {
        guard let bufferEvent else { return nil }
        var readCallback: bufferevent_data_cb?
        var argument: UnsafeMutableRawPointer?
        bufferevent_getcb(bufferEvent, &readCallback, nil, nil, &argument)
        guard readCallback != nil, let argument else { return nil }
        let evcon = OpaquePointer(argument)
        self.evcon = evcon
        var address: UnsafeMutablePointer<CChar>?
        var port: UInt16 = 0
        evhttp_connection_get_peer(evcon, &address, &port)
        if let address { remoteAddress = "\(String(cString: address)):\(port)" }
        self.timeout = timeval(timeout)
        deadline = event_new(
            loop.base, -1, 0,
            { _, _, context in
                Unmanaged<HTTP1Connection>.fromOpaque(context!).takeUnretainedValue().deadlinePassed()
            }, Unmanaged.passUnretained(self).toOpaque())
        arm()
        return evcon
    }

    func arm() {
        if let deadline { event_add(deadline, &timeout) }
    }

    func disarm() {
        if let deadline { event_del(deadline) }
    }

    private func deadlinePassed() {
        // The close callback (connectionClosed) forgets this connection.
        if let evcon { evhttp_connection_free(evcon) }
    }

    /// evhttp has freed the connection: drop every pointer into it.
    func forget() {
        if let deadline { event_free(deadline) }
        deadline = nil
        evcon = nil
        bufferEvent = nil
    }
}

extension timeval {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self.init(tv_sec: Int(max(0, seconds)), tv_usec: Int(max(0, attoseconds) / 1_000_000_000_000))
    }
}

/// One whole error page as evhttp writes it (`evhttp_send_error`): a status line, headers saying text/html
/// with a Content-Length, and exactly that many bytes of body starting with `<HTML><HEAD>`.
struct HTTP1ErrorPage: Equatable {
    let status: Int
    /// The status line's reason phrase, e.g. `Payload Too Large`.
    let reason: String

    init(status: Int, reason: String) {
        self.status = status
        self.reason = reason
    }

    init?(_ bytes: [UInt8]) {
        let separator = Array("\r\n\r\n".utf8)
        guard let end = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else { return nil }
        let head = String(decoding: bytes[..<end], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let statusLine = lines[0].split(separator: " ", maxSplits: 2)
        guard statusLine.count == 3, let status = Int(statusLine[1]), (400..<600).contains(status) else { return nil }
        var contentType = ""
        var contentLength: Int?
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            switch line[..<colon].lowercased() {
            case "content-type": contentType = value.lowercased()
            case "content-length": contentLength = Int(value)
            default: break
            }
        }
        let body = bytes[(end + separator.count)...]
        guard contentType.hasPrefix("text/html"), let contentLength, body.count == contentLength,
            body.starts(with: Array("<HTML><HEAD>".utf8))
        else { return nil }
        self.status = status
        reason = String(statusLine[2])
    }
}
