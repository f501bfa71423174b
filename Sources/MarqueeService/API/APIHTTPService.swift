// Hosts the APIServer on the Network module's HTTP/1.1 server as a Service: binds at start (so a port
// in use fails the daemon at once), logs the port, and on shutdown stops accepting, lets in-flight
// requests finish (their responses close the connection) and closes.
import MarqueeCore
import Network

extension APIServer: HTTP1RequestHandler {
    public func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse {
        await respond(to: request)
    }
}

/// The HTTP/1.1 API as a service of the daemon.
public final class APIHTTPService: Service {
    public let name = "http"
    private let server: HTTP1Server
    private let group: EventLoopGroup
    private let logger: Logger

    /// The port the API listens on.
    public var port: Int { server.port }

    /// Binds `host:port` at once; throws `NetworkError.bindFailed` when it cannot.
    public init(api: APIServer, host: String, port: Int, gracePeriod: Duration, logger: Logger, loopCount: Int = 1) throws {
        var configuration = HTTP1ServerConfiguration(host: host, port: port)
        configuration.maxBodySize = api.maxBodySize
        configuration.shutdownGracePeriod = gracePeriod
        let limit = api.maxBodySize
        configuration.errorResponse = { status, _ in
            switch status {
            case 400: APIError.badRequest("the request is not valid HTTP/1.1").response
            case 413: APIError.payloadTooLarge(limit: limit).response
            case 503: APIError.unavailable("the server is shutting down; retry on another instance").response
            case 405: APIError(status: 405, code: "method_not_allowed", message: "this HTTP method is not supported").response
            default: APIError(status: status, code: "http_error", message: "the request was refused (\(status))").response
            }
        }
        let group = EventLoopGroup(loopCount: loopCount, name: "marquee-http")
        do {
            server = try HTTP1Server(configuration: configuration, group: group, handler: api)
        } catch {
            group.shutdown()
            throw error
        }
        self.group = group
        self.logger = logger
        logger.notice("listening", ["host": .string(host), "port": .int(server.port)])
    }

    public func run(until shutdown: ShutdownSignal) async throws {
        await shutdown.wait()
        logger.info("http: stopping; finishing in-flight requests")
        await server.shutdown()
        group.shutdown()
    }
}
