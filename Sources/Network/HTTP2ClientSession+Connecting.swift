// The socket half of an HTTP/2 client session: resolving, connecting and the TLS handshake through a libevent
// `bufferevent_openssl`, and moving bytes between it and nghttp2. Runs on the connection's loop thread only,
// like everything in `HTTP2ClientSession`.
internal import CLibEvent
internal import CNGHTTP2
internal import COpenSSL
import Foundation

extension HTTP2ClientSession {
    // MARK: Connecting

    func start() {
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

    func connect(to address: SocketAddress) {
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

    func handle(events: Int16) {
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
    func connectError() -> NetworkError {
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

    func handshakeCompleted() {
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

    // MARK: Reading and writing

    func readAvailable() {
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

    func outputDrained() {
        flush()
        closeIfFinished()
    }

    /// Lets nghttp2 write what it has into the bufferevent.
    func flush() {
        guard let session else { return }
        let code = nghttp2_session_send(session)
        if code != 0 {
            close(
                inFlight: .http2(code: code, detail: String(cString: nghttp2_strerror(code))),
                queued: .requestNotSent("HTTP/2 protocol error"), reason: .http2(code: code, detail: "send"))
        }
    }

    func afterActivity() {
        startStreams()
        flush()
        closeIfFinished()
    }

    /// After GOAWAY, once the streams it allowed have finished; or when nghttp2 has nothing more to do.
    func closeIfFinished() {
        guard let session, let bev else { return }
        let goingAway = if case .goingAway = state.phase { true } else { false }
        let nghttp2Done = nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
        guard (goingAway && state.isDrained) || nghttp2Done else { return }
        guard evbuffer_get_length(bufferevent_get_output(bev)) == 0 || nghttp2Done else { return }
        close(inFlight: .connectionClosed, queued: .requestNotSent("the connection closed"), reason: nil)
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
