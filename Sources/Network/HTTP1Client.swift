// An HTTP/1.1 client on libevent's evhttp (http:// and https://), for the admin CLI and other tools.
// evhttp writes requests and parses responses; this file covers its corners:
// - a host name is resolved on a Dispatch thread (evhttp without an evdns base would call getaddrinfo on the
//   loop thread), and evhttp is handed the numeric address while the Host header keeps the name;
// - evhttp reconnects a reset connection through the same bufferevent, which an OpenSSL bufferevent cannot
//   do, so a connection that closed or failed is freed and the next request gets a new one;
// - requests go one at a time (the client queues the rest), so a failure never leaves a request queued on a
//   connection evhttp would silently free;
// - a connect failure reaches the request callback with no error and status 0; what failed (refused, TLS,
//   certificate, timeout) is read from errno, the bufferevent and the client's own deadline.
internal import CLibEvent
internal import COpenSSL
import Foundation

/// How an `HTTP1Client` times out and whom it trusts over https.
public struct HTTP1ClientConfiguration: Sendable {
    /// The deadline of one request: connecting, TLS, sending and the whole response.
    public var timeout: Duration = .seconds(30)
    /// Trust for https URLs; ALPN offers http/1.1.
    public var tls = TLSClientConfiguration(alpnProtocols: ["http/1.1"])
    /// A larger response fails with `.invalidResponse`.
    public var maxResponseBodySize = 64 << 20

    public init(timeout: Duration = .seconds(30), extraCAFile: String? = nil) {
        self.timeout = timeout
        tls.extraCAFile = extraCAFile
    }
}

/// Why a request of an `HTTP1Client` failed, with what to check.
public enum HTTP1ClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL is not `http://host[:port][/prefix]` or `https://…`.
    case invalidURL(String)
    /// The host name does not resolve.
    case cannotResolve(host: String)
    /// Nothing accepts connections at the address: the server is not running, or the port is wrong.
    case connectionRefused(String)
    /// Connecting failed otherwise (unreachable network, reset).
    case connectFailed(String)
    /// No whole answer within the configured timeout.
    case timedOut(String, Duration)
    /// The TLS handshake failed (a plain-http server on the port, an old protocol).
    case tls(String)
    /// The server's certificate did not verify against the trusted CAs or the host name.
    case certificateRejected(String)
    /// The server closed the connection before its answer was complete.
    case connectionClosed(String)
    /// The answer was not HTTP/1.x or was too large.
    case invalidResponse(String)
    /// The client was closed.
    case closed

    public var description: String {
        switch self {
        case .invalidURL(let url): "invalid URL \(url): use http://host[:port] or https://host[:port]"
        case .cannotResolve(let host): "cannot resolve the host name \(host): check the URL"
        case .connectionRefused(let origin): "nothing accepts connections at \(origin): is the server running, and is the URL's port right?"
        case .connectFailed(let detail): "cannot connect: \(detail)"
        case .timedOut(let origin, let timeout): "no complete answer from \(origin) within \(timeout): the server may be overloaded or stuck"
        case .tls(let detail): "TLS handshake failed: \(detail) (does the server speak https on this port?)"
        case .certificateRejected(let detail):
            "the server's certificate was rejected: \(detail) (trust its CA with an extra CA file, or check the host name)"
        case .connectionClosed(let origin): "\(origin) closed the connection before answering completely"
        case .invalidResponse(let detail): "invalid response: \(detail)"
        case .closed: "the HTTP client was closed"
        }
    }
}

/// Where an `HTTP1Client` connects, parsed from a URL.
public struct HTTP1ClientURL: Sendable, Equatable, CustomStringConvertible {
    public var isTLS: Bool
    public var host: String
    public var port: Int
    /// Prepended to every request path; empty or starting with `/`, never ending with one.
    public var pathPrefix: String

    /// Parses `http://host[:port][/prefix]` or `https://…`; IPv6 literals in brackets.
    public init(_ string: String) throws(HTTP1ClientError) {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", var host = components.host, !host.isEmpty,
            components.query == nil, components.fragment == nil, components.user == nil
        else { throw .invalidURL(string) }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        isTLS = scheme == "https"
        self.host = host
        port = components.port ?? (isTLS ? 443 : 80)
        guard (1...65535).contains(port) else { throw .invalidURL(string) }
        var prefix = components.percentEncodedPath
        while prefix.hasSuffix("/") { prefix.removeLast() }
        pathPrefix = prefix
    }

    /// The Host header: the host, bracketed when it is an IPv6 literal, with the port unless it is the default.
    public var authority: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        return port == (isTLS ? 443 : 80) ? host : "\(host):\(port)"
    }

    public var description: String { "\(isTLS ? "https" : "http")://\(authority)\(pathPrefix)" }
}

/// An HTTP/1.1 client for one origin over one keep-alive connection, bound to an event loop.
/// Requests from several tasks are sent one after another.
public actor HTTP1Client {
    public nonisolated let url: HTTP1ClientURL
    public nonisolated let loop: EventLoop
    private let configuration: HTTP1ClientConfiguration
    private let tls: TLSClientContext?
    private var address: String?
    private var connection: HTTP1ClientConnection?
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var isClosed = false

    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// A server that closes while we write must cost an error, not the process: no SIGPIPE.
    private static let ignoresSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    /// Parses the URL and, for https, loads the trusted CAs (a file read: call it at startup).
    public init(url: String, loop: EventLoop, configuration: HTTP1ClientConfiguration = HTTP1ClientConfiguration()) throws(HTTP1ClientError) {
        HTTP1Client.ignoresSIGPIPE
        self.url = try HTTP1ClientURL(url)
        self.loop = loop
        self.configuration = configuration
        if self.url.isTLS {
            do {
                tls = try TLSClientContext(configuration: configuration.tls)
            } catch {
                throw .tls(error.description)
            }
        } else {
            tls = nil
        }
    }

    deinit {
        if let connection { loop.execute { connection.free() } }
    }

    /// Sends `request` (its path is appended to the URL's path prefix) and returns the whole response, within
    /// the configured timeout, counted from the call. A GET that meets a keep-alive connection the server had
    /// just closed is sent again on a new one.
    public nonisolated func send(_ request: HTTPRequest) async throws(HTTP1ClientError) -> HTTPResponse {
        try await exchange(request, timeout: nil).get()
    }

    /// `send(_:)` with a timeout of its own.
    public nonisolated func send(_ request: HTTPRequest, timeout: Duration) async throws(HTTP1ClientError) -> HTTPResponse {
        try await exchange(request, timeout: timeout).get()
    }

    /// The isolated half of `send`: it answers a `Result`, and the caller's side throws (as `HTTP2ClientConnection` does).
    private func exchange(_ request: HTTPRequest, timeout: Duration?) async -> Result<HTTPResponse, HTTP1ClientError> {
        let timeout = timeout ?? configuration.timeout
        let deadline = ContinuousClock.now + timeout
        await acquire()
        defer { release() }
        guard !isClosed else { return .failure(.closed) }
        let reused = connection?.isReusable ?? false
        let result = await attempt(request, deadline: deadline, timeout: timeout)
        if case .failure(.connectionClosed) = result, reused, request.method == "GET" || request.method == "HEAD" {
            return await attempt(request, deadline: deadline, timeout: timeout)
        }
        return result
    }

    /// Closes the connection once the request in flight (if any) has its answer; later requests fail with `.closed`.
    public func close() async {
        await acquire()
        defer { release() }
        isClosed = true
        connection?.free()
        connection = nil
    }

    private func acquire() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    private func release() {
        if waiters.isEmpty {
            busy = false
        } else {
            waiters.removeFirst().resume()
        }
    }

    private func attempt(_ request: HTTPRequest, deadline: ContinuousClock.Instant, timeout: Duration) async -> Result<HTTPResponse, HTTP1ClientError>
    {
        let connection: HTTP1ClientConnection
        switch await currentConnection() {
        case .success(let current): connection = current
        case .failure(let error): return .failure(error)
        }
        let result = await withCheckedContinuation { continuation in
            connection.send(
                request, url: url, deadline: deadline, timeout: timeout, maxBodySize: configuration.maxResponseBodySize,
                loop: loop, continuation: continuation)
        }
        if case .failure = result, self.connection === connection {
            connection.free()
            self.connection = nil
        }
        return result
    }

    /// The open connection, or a new one when there is none or the last one closed.
    private func currentConnection() async -> Result<HTTP1ClientConnection, HTTP1ClientError> {
        if let connection, !connection.isClosed { return .success(connection) }
        connection?.free()
        connection = nil
        if address == nil {
            let host = url.host
            let port = url.port
            address = SocketAddress.resolve(host: host, port: port, numericOnly: true)?.numericHost
            if address == nil {
                // A name: getaddrinfo blocks, so it runs on a Dispatch thread, never on the loop or the Swift pool.
                address = await withCheckedContinuation { continuation in
                    DispatchQueue.global().async {
                        continuation.resume(returning: SocketAddress.resolve(host: host, port: port, numericOnly: false)?.numericHost)
                    }
                }
            }
        }
        guard let address else { return .failure(.cannotResolve(host: url.host)) }
        do throws(HTTP1ClientError) {
            let connection = try HTTP1ClientConnection(loop: loop, url: url, address: address, tls: tls)
            self.connection = connection
            return .success(connection)
        } catch {
            return .failure(error)
        }
    }
}

/// One evhttp connection and its bufferevent; used on its loop's thread only.
final class HTTP1ClientConnection: @unchecked Sendable {
    private var evcon: OpaquePointer?
    private let bufferEvent: OpaquePointer
    private let origin: String
    let isTLS: Bool
    /// The server or the network closed it; evhttp would reconnect through the same bufferevent.
    private(set) var isClosed = false
    /// At least one response came back on it, so a failure of the next may be a keep-alive race.
    private(set) var isReusable = false
    /// TCP (and TLS) got through at some point; a failure before that is a failure to connect.
    private(set) var wasEstablished = false

    init(loop: EventLoop, url: HTTP1ClientURL, address: String, tls: TLSClientContext?) throws(HTTP1ClientError) {
        origin = url.description
        isTLS = tls != nil
        let options = Int32(BEV_OPT_CLOSE_ON_FREE.rawValue | BEV_OPT_DEFER_CALLBACKS.rawValue)
        let bufferEvent: OpaquePointer?
        if let tls {
            let ssl: OpaquePointer
            do {
                ssl = try tls.makeSSL(host: url.host)
            } catch {
                throw .tls(error.description)
            }
            bufferEvent = bufferevent_openssl_socket_new(loop.base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, options)
            if let bufferEvent {
                bufferevent_openssl_set_allow_dirty_shutdown(bufferEvent, 1)
            } else {
                SSL_free(ssl)
            }
        } else {
            bufferEvent = bufferevent_socket_new(loop.base, -1, options)
        }
        guard let bufferEvent else { throw .connectFailed("cannot create a bufferevent") }
        self.bufferEvent = bufferEvent
        // evhttp owns the bufferevent from here on and frees it with the connection.
        guard let evcon = evhttp_connection_base_bufferevent_new(loop.base, nil, bufferEvent, address, UInt16(url.port)) else {
            bufferevent_free(bufferEvent)
            throw .connectFailed("cannot create an HTTP connection to \(origin)")
        }
        self.evcon = evcon
        evhttp_connection_set_retries(evcon, 0)
        // evhttp calls this only for a connection that was established (for TLS: handshake done).
        evhttp_connection_set_closecb(
            evcon,
            { _, context in
                let connection = Unmanaged<HTTP1ClientConnection>.fromOpaque(context!).takeUnretainedValue()
                connection.isClosed = true
                connection.wasEstablished = true
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { free() }

    /// Frees the evhttp connection (never from inside one of its callbacks).
    func free() {
        guard let evcon else { return }
        self.evcon = nil
        isClosed = true
        evhttp_connection_set_closecb(evcon, nil, nil)  // it would run now, possibly inside deinit
        evhttp_connection_free(evcon)
    }

    /// Starts `request`; `deadline` ends it, `timeout` is what the error names.
    func send(
        _ request: HTTPRequest, url: HTTP1ClientURL, deadline: ContinuousClock.Instant, timeout: Duration, maxBodySize: Int,
        loop: EventLoop, continuation: CheckedContinuation<Result<HTTPResponse, HTTP1ClientError>, Never>
    ) {
        guard let evcon else { return continuation.resume(returning: .failure(.closed)) }
        guard let command = Self.command(request.method) else {
            return continuation.resume(returning: .failure(.invalidResponse("evhttp cannot send the method \(request.method)")))
        }
        evhttp_connection_set_max_body_size(evcon, maxBodySize)
        // evhttp's own socket timeout stays behind the request's deadline, which names the failure better.
        let remaining = max(deadline - .now, .zero)
        var socketTimeout = timeval(remaining + .seconds(1))
        evhttp_connection_set_timeout_tv(evcon, &socketTimeout)
        let pending = HTTP1ClientPendingRequest(connection: self, origin: origin, timeout: timeout, continuation: continuation)
        let context = Unmanaged.passRetained(pending).toOpaque()  // released when evhttp calls back or the request is cancelled
        guard
            let evRequest = evhttp_request_new(
                { request, context in
                    Unmanaged<HTTP1ClientPendingRequest>.fromOpaque(context!).takeRetainedValue().completed(request)
                }, context)
        else {
            Unmanaged<HTTP1ClientPendingRequest>.fromOpaque(context).release()
            return continuation.resume(returning: .failure(.connectFailed("out of memory")))
        }
        evhttp_request_set_error_cb(evRequest) { error, context in
            Unmanaged<HTTP1ClientPendingRequest>.fromOpaque(context!).takeUnretainedValue().evhttpError = error
        }
        if let headers = evhttp_request_get_output_headers(evRequest) {
            var hasHost = false
            var hasLength = false
            for field in request.headers.fields {
                hasHost = hasHost || field.name == "host"
                hasLength = hasLength || field.name == "content-length"
                evhttp_add_header(headers, field.name, field.value)
            }
            if !hasHost { evhttp_add_header(headers, "Host", request.authority ?? url.authority) }
            if !hasLength, !request.body.isEmpty || ["POST", "PUT", "PATCH"].contains(request.method) {
                evhttp_add_header(headers, "Content-Length", String(request.body.count))
            }
        }
        if !request.body.isEmpty {
            request.body.withUnsafeBytes { _ = evbuffer_add(evhttp_request_get_output_buffer(evRequest), $0.baseAddress, $0.count) }
        }
        let path = url.pathPrefix + (request.path.hasPrefix("/") ? request.path : "/" + request.path)
        guard evhttp_make_request(evcon, evRequest, command, path) == 0 else {
            // evhttp freed the request without calling back.
            Unmanaged<HTTP1ClientPendingRequest>.fromOpaque(context).release()
            return continuation.resume(returning: .failure(.connectFailed("evhttp could not start the request to \(origin)")))
        }
        pending.start(request: evRequest, loop: loop, after: remaining)
    }

    /// After a connect or handshake failure: the certificate or TLS error kept on the bufferevent, if any.
    fileprivate func tlsFailure() -> HTTP1ClientError? {
        guard let ssl = bufferevent_openssl_get_ssl(bufferEvent) else { return nil }
        if SSL_get_verify_result(ssl) != X509_V_OK {
            if case .certificateRejected(let detail) = TLSClientContext.handshakeError(ssl: ssl) { return .certificateRejected(detail) }
        }
        var codes: [UInt] = []
        while case let code = bufferevent_get_openssl_error(bufferEvent), code != 0 { codes.append(code) }
        let tlsCodes = codes.filter { ERR_GET_LIB($0) != 0 }
        return tlsCodes.isEmpty ? nil : .tls(tlsCodes.map(TLSClientContext.describe).joined(separator: "; "))
    }

    fileprivate func answered() {
        isReusable = true
        wasEstablished = true
    }

    private static func command(_ method: String) -> evhttp_cmd_type? {
        switch method {
        case "GET": EVHTTP_REQ_GET
        case "POST": EVHTTP_REQ_POST
        case "HEAD": EVHTTP_REQ_HEAD
        case "PUT": EVHTTP_REQ_PUT
        case "DELETE": EVHTTP_REQ_DELETE
        case "OPTIONS": EVHTTP_REQ_OPTIONS
        case "PATCH": EVHTTP_REQ_PATCH
        default: nil
        }
    }
}

/// One request in flight: its continuation and deadline; used on the loop thread only.
private final class HTTP1ClientPendingRequest {
    private let connection: HTTP1ClientConnection
    private let origin: String
    private let timeout: Duration
    private var continuation: CheckedContinuation<Result<HTTPResponse, HTTP1ClientError>, Never>?
    private var request: UnsafeMutablePointer<evhttp_request>?
    private var timer: LoopTimer?
    var evhttpError: evhttp_request_error?

    init(
        connection: HTTP1ClientConnection, origin: String, timeout: Duration,
        continuation: CheckedContinuation<Result<HTTPResponse, HTTP1ClientError>, Never>
    ) {
        self.connection = connection
        self.origin = origin
        self.timeout = timeout
        self.continuation = continuation
    }

    func start(request: UnsafeMutablePointer<evhttp_request>, loop: EventLoop, after remaining: Duration) {
        guard continuation != nil else { return }  // failed at once, inside evhttp_make_request
        self.request = request
        timer = loop.schedule(after: remaining) { [self] in
            timer = nil
            guard let request = self.request else { return }
            self.request = nil
            // A cancelled request gets no callback: give back the reference it held.
            let context = Unmanaged.passUnretained(self)
            evhttp_cancel_request(request)
            finish(.failure(.timedOut(origin, timeout)))
            context.release()
        }
    }

    /// evhttp's callback: a whole response, or nil / status 0 when the request failed.
    func completed(_ request: UnsafeMutablePointer<evhttp_request>?) {
        let socketError = errno
        self.request = nil
        guard let request, case let status = Int(evhttp_request_get_response_code(request)), status != 0 else {
            return finish(.failure(failure(socketError: socketError)))
        }
        var headers: [HTTPField] = []
        var field = evhttp_request_get_input_headers(request)?.pointee.tqh_first
        while let current = field {
            headers.append(HTTPField(name: String(cString: current.pointee.key), value: String(cString: current.pointee.value)))
            field = current.pointee.next.tqe_next
        }
        let input = evhttp_request_get_input_buffer(request)
        let size = evbuffer_get_length(input)
        let body = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            count = size > 0 ? max(0, Int(evbuffer_remove(input, buffer.baseAddress, size))) : 0
        }
        connection.answered()
        finish(.success(HTTPResponse(status: status, headers: HTTPHeaders(headers), body: body)))
    }

    private func failure(socketError: Int32) -> HTTP1ClientError {
        if let tls = connection.tlsFailure() { return tls }
        switch evhttpError {
        case EVREQ_HTTP_TIMEOUT: return .timedOut(origin, timeout)
        case EVREQ_HTTP_INVALID_HEADER: return .invalidResponse("malformed headers from \(origin)")
        case EVREQ_HTTP_DATA_TOO_LONG: return .invalidResponse("the response from \(origin) is too large or malformed")
        default: break
        }
        switch socketError {
        case ECONNREFUSED: return .connectionRefused(origin)
        case ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL: return .connectFailed("\(origin): \(String(cString: strerror(socketError)))")
        default: break
        }
        // evhttp keeps no errno for a refused connect: a connection never established was refused, or,
        // over TLS, closed by the server during the handshake.
        guard connection.wasEstablished else {
            return connection.isTLS ? .tls("\(origin) refused the connection or closed it during the handshake") : .connectionRefused(origin)
        }
        return .connectionClosed(origin)
    }

    private func finish(_ result: Result<HTTPResponse, HTTP1ClientError>) {
        timer?.cancel()
        timer = nil
        continuation?.resume(returning: result)
        continuation = nil
    }
}

extension SocketAddress {
    /// The address as numeric text (getnameinfo with NI_NUMERICHOST never blocks).
    var numericHost: String? {
        var storage = self.storage
        var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let result = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, socklen_t(length), &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard result == 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
