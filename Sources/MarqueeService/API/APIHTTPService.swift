// Placeholder until the HTTP/1.1 server (branch `servers`) is on main: same initializer as the real one.
import MarqueeCore
import Network

/// The HTTP/1.1 API as a service of the daemon.
public final class APIHTTPService: Service {
    public let name = "http"

    public init(api: APIServer, host: String, port: Int, gracePeriod: Duration, logger: Logger, loopCount: Int = 1) throws {
        throw NetworkError.connectFailed("the HTTP/1.1 server is not built in yet (branch servers)")
    }

    public func run(until shutdown: ShutdownSignal) async throws {}
}
