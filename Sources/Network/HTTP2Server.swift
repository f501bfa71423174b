// An HTTP/2 server over TLS (ALPN h2) on nghttp2 and libevent, shaped after nghttp2's
// examples/libevent-server.c. One socket is accepted on the group's first loop and each connection is handed
// to the next loop of the group; a connection then lives on that loop's thread for good. Requests reach a
// handler on that thread: it answers at once (no task, no hop) or hands back async work whose response is
// sent on the loop when it is ready.
internal import CLibEvent
import Foundation
import Synchronization

/// How an HTTP/2 server listens and what it allows each connection.
public struct HTTP2ServerConfiguration: Sendable {
    /// A numeric address; names are not resolved.
    public var host: String
    /// 0 picks a free port; `HTTP2Server.port` tells which.
    public var port: Int
    /// SETTINGS_MAX_CONCURRENT_STREAMS sent first on every connection; a handler may change it per connection.
    public var maxConcurrentStreams: UInt32 = 100
    /// SETTINGS_INITIAL_WINDOW_SIZE for request bodies; the connection window is raised to match.
    public var initialWindowSize: UInt32 = 65_535
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    public var maxHeaderListSize: UInt32 = 64 * 1024
    /// A request body larger than this is answered with `payloadTooLargeResponse` and not buffered further.
    public var maxRequestBodySize: Int = 1 << 20
    /// The answer to a body over `maxRequestBodySize`.
    public var payloadTooLargeResponse = HTTPResponse(status: 413)
    /// A connection with no open stream that sends nothing for this long (or stalls in its TLS handshake)
    /// gets GOAWAY and is closed; nil keeps idle connections forever.
    public var idleTimeout: Duration? = .seconds(300)
    /// How long `shutdown()` lets in-flight streams finish before closing what is left.
    public var shutdownGracePeriod: Duration = .seconds(10)

    public init(host: String = "127.0.0.1", port: Int = 0) {
        self.host = host
        self.port = port
    }
}

/// A handler's answer: a response now, or async work whose response is sent when it is ready.
public enum HTTP2Reply: Sendable {
    /// Sent at once, on the loop thread.
    case response(HTTPResponse)
    /// Runs as a task; its response is sent on the connection's loop thread when it returns.
    case deferred(@Sendable () async -> HTTPResponse)
    /// No answer: the stream is reset with RST_STREAM and this HTTP/2 error code, after the request was read whole.
    case reset(errorCode: UInt32)
}

/// Answers the requests of an `HTTP2Server`.
public protocol HTTP2RequestHandler: Sendable {
    /// Called on the connection's loop thread for each complete request. Must not block: return
    /// `.deferred` for work that awaits.
    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply
    /// Called on the loop thread once the TLS handshake has succeeded, before the connection's first request.
    func connectionOpened(_ connection: HTTP2ServerConnection)
    /// Called on the loop thread after the connection has closed.
    func connectionClosed(_ connection: HTTP2ServerConnection)
}

extension HTTP2RequestHandler {
    public func connectionOpened(_ connection: HTTP2ServerConnection) {}
    public func connectionClosed(_ connection: HTTP2ServerConnection) {}
}

/// An HTTP/2 server over TLS with ALPN h2, spreading its connections over an event-loop group.
public final class HTTP2Server: Sendable {
    /// The port the server listens on.
    public let port: Int
    private let core: HTTP2ServerCore
    private let acceptLoop: EventLoop
    private let acceptor: Mutex<AcceptorBox?>

    /// Binds at once (throws `.bindFailed`) and starts accepting on the group's loops.
    public init(
        configuration: HTTP2ServerConfiguration, tls: TLSServerContext, group: EventLoopGroup,
        handler: some HTTP2RequestHandler
    ) throws(NetworkError) {
        let socket = try ListeningSocket(host: configuration.host, port: configuration.port)
        port = socket.port
        let core = HTTP2ServerCore(configuration: configuration, tls: tls, handler: handler, group: group)
        self.core = core
        acceptLoop = group.loops[0]
        let box = AcceptorBox()
        acceptor = Mutex(box)
        let fd = socket.release()
        acceptLoop.execute {
            box.acceptor = ConnectionAcceptor(loop: group.loops[0], fd: fd) { fd, address in
                core.accept(fd: fd, remoteAddress: address)
            }
        }
    }

    /// The number of open connections.
    public var connectionCount: Int { core.connectionCount }

    /// Stops accepting, sends GOAWAY on every connection, lets in-flight streams finish (up to the grace
    /// period), then closes what is left. Returns when every connection is closed.
    public func shutdown() async {
        guard
            let box = acceptor.withLock({ box in
                defer { box = nil }
                return box
            })
        else { return }
        try? await acceptLoop.submit {
            box.acceptor?.stop()
            box.acceptor = nil
        }
        await core.shutdown()
    }
}

private final class AcceptorBox: @unchecked Sendable {
    var acceptor: ConnectionAcceptor?  // touched on the accept loop only
}

/// What every connection of one server shares; the registry is the only mutable state crossing threads.
final class HTTP2ServerCore: Sendable {
    let configuration: HTTP2ServerConfiguration
    let tls: TLSServerContext
    let handler: any HTTP2RequestHandler
    let group: EventLoopGroup
    private let nextID = Atomic<UInt64>(1)
    private let registry = Mutex<Registry>(Registry())

    private struct Registry {
        var connections: [UInt64: HTTP2ServerConnection] = [:]
        var shuttingDown = false
        var drained: CheckedContinuation<Void, Never>?
    }

    init(configuration: HTTP2ServerConfiguration, tls: TLSServerContext, handler: any HTTP2RequestHandler, group: EventLoopGroup) {
        self.configuration = configuration
        self.tls = tls
        self.handler = handler
        self.group = group
    }

    var connectionCount: Int { registry.withLock { $0.connections.count } }

    /// Called on the accept loop: hands the socket to the next loop of the group.
    func accept(fd: Int32, remoteAddress: String) {
        let loop = group.next()
        let id = nextID.add(1, ordering: .relaxed).oldValue
        if loop.inEventLoop {
            open(fd: fd, id: id, remoteAddress: remoteAddress, loop: loop)
        } else {
            loop.execute { self.open(fd: fd, id: id, remoteAddress: remoteAddress, loop: loop) }
        }
    }

    private func open(fd: Int32, id: UInt64, remoteAddress: String, loop: EventLoop) {
        guard let connection = HTTP2ServerConnection(fd: fd, id: id, remoteAddress: remoteAddress, loop: loop, core: self) else {
            return
        }
        let accepted = registry.withLock { registry -> Bool in
            guard !registry.shuttingDown else { return false }
            registry.connections[id] = connection
            return true
        }
        if accepted { connection.start() } else { connection.close() }
    }

    /// Called on the connection's loop when it has closed.
    func closed(_ connection: HTTP2ServerConnection) {
        let drained = registry.withLock { registry -> CheckedContinuation<Void, Never>? in
            registry.connections[connection.id] = nil
            guard registry.connections.isEmpty, let drained = registry.drained else { return nil }
            registry.drained = nil
            return drained
        }
        drained?.resume()
    }

    func shutdown() async {
        let connections = registry.withLock { registry in
            registry.shuttingDown = true
            return Array(registry.connections.values)
        }
        for connection in connections {
            connection.loop.execute { connection.beginShutdown() }
        }
        let grace = configuration.shutdownGracePeriod
        let timer = Task {
            try? await Task.sleep(for: grace)
            guard !Task.isCancelled else { return }
            let left = self.registry.withLock { Array($0.connections.values) }
            for connection in left { connection.loop.execute { connection.close() } }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = registry.withLock { registry -> Bool in
                if registry.connections.isEmpty { return true }
                registry.drained = continuation
                return false
            }
            if done { continuation.resume() }
        }
        timer.cancel()
    }
}
