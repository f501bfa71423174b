// The public face of one HTTP/2 client connection. It is an actor whose executor is the connection's
// event loop, so its isolated members run on the loop thread and talk to the nghttp2 session directly.
// `send` is the exception: callers drop requests into the session's inbox (the loop takes them in
// batches) and wait on one continuation each, resumed straight onto their own executor. No task is
// created per request.

/// Where an HTTP/2 client connects: a host name or IP address and a port, always over TLS.
public struct HTTP2Origin: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    /// The `:authority` for requests that do not set one: `host` alone on port 443.
    public var authority: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        return port == 443 ? host : "\(host):\(port)"
    }

    public var description: String { "https://\(authority)" }
}

/// One multiplexed HTTP/2 connection over TLS; many callers may `send` at once.
public actor HTTP2ClientConnection {
    /// Timeouts, keepalive and flow-control windows of one connection.
    public struct Configuration: Sendable {
        /// TCP connect, TLS handshake and ALPN together.
        public var connectTimeout: Duration
        /// PING after this long without any frame from the peer; nil turns keepalive off.
        public var pingInterval: Duration?
        /// A PING unanswered for this long means the connection is dead.
        public var pingTimeout: Duration
        /// SETTINGS_INITIAL_WINDOW_SIZE we announce: how much of each response the peer may send ahead.
        public var initialWindowSize: Int
        /// The connection-level receive window.
        public var connectionWindowSize: Int

        public init(
            connectTimeout: Duration = .seconds(10), pingInterval: Duration? = .seconds(60),
            pingTimeout: Duration = .seconds(10), initialWindowSize: Int = 65_535,
            connectionWindowSize: Int = 1 << 20
        ) {
            self.connectTimeout = connectTimeout
            self.pingInterval = pingInterval
            self.pingTimeout = pingTimeout
            self.initialWindowSize = initialWindowSize
            self.connectionWindowSize = connectionWindowSize
        }
    }

    /// What happened to the connection, for its owner.
    public enum Event: Sendable, Equatable {
        /// TLS and ALPN `h2` succeeded; requests may start (one at a time until the peer's SETTINGS).
        case connected
        /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS changed (including the first SETTINGS).
        case maxConcurrentStreamsChanged(Int)
        /// The peer sent GOAWAY: no new streams; streams above `lastStreamID` failed with `.goAway`.
        case goAway(lastStreamID: Int32, errorCode: UInt32)
        /// The connection is gone: nil after an orderly close, else why.
        case closed(NetworkError?)
    }

    public nonisolated let origin: HTTP2Origin
    public nonisolated let loop: EventLoop
    /// The connection's events, newest kept if nobody reads them.
    public nonisolated let events: AsyncStream<Event>
    private nonisolated let session: HTTP2ClientSession

    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// Creates the connection; it connects on the first `send`. `onEvent` runs on the loop thread and
    /// must not block.
    public init(
        origin: HTTP2Origin, tls: TLSClientContext, loop: EventLoop, configuration: Configuration = Configuration(),
        onEvent: (@Sendable (Event) -> Void)? = nil
    ) {
        let (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(64))
        self.origin = origin
        self.loop = loop
        self.events = events
        session = HTTP2ClientSession(loop: loop, origin: origin, tls: tls, configuration: configuration) { event in
            onEvent?(event)
            continuation.yield(event)
            if case .closed = event { continuation.finish() }
        }
    }

    deinit {
        let session = self.session
        loop.execute { session.shutdown() }
    }

    /// Sends `request` and returns the whole response. `timeout` covers everything, including time spent
    /// waiting for a stream slot. Errors say whether a retry can help (`NetworkError.isRetryable`);
    /// `.goAway` and `.requestNotSent` (also when the timeout passed while it waited for a stream slot)
    /// mean the request never reached the peer's application; `.timedOut` means it was sent.
    public nonisolated func send(_ request: HTTPRequest, timeout: Duration) async throws(NetworkError) -> HTTPResponse {
        try await send(request, deadline: .now + timeout).get()
    }

    /// Nonisolated on purpose: the caller hands the request to the loop and is resumed straight on its
    /// own executor, without hopping back through the loop on the way out.
    nonisolated func send(_ request: HTTPRequest, deadline: ContinuousClock.Instant) async -> Result<HTTPResponse, NetworkError> {
        await withUnsafeContinuation { continuation in
            session.submitFromAnyThread(HTTP2ClientStream(request: request, deadline: deadline, continuation: continuation))
        }
    }

    /// Closes the connection; requests still pending fail with `.shutdown`.
    public func close() {
        session.shutdown()
    }

    /// The peer's current stream limit (1 until its first SETTINGS).
    public var maxConcurrentStreams: Int { session.state.maxConcurrentStreams }
    /// Streams in flight.
    public var activeStreams: Int { session.state.activeCount }
    /// Requests waiting for a stream slot.
    public var queuedRequests: Int { session.state.queuedCount }
}
