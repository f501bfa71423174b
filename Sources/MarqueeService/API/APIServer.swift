// The API as a function from request to response, testable without sockets. In order: route (404, 405),
// admission of a keyed route (429, or 503 while the database is down: APIAdmission), body size (413), key and scope (401, 403), content type (415), JSON syntax (400), then the handler
// (422 and the rest). Each request is counted and timed by route template and status, and logged on one
// line without the Authorization header or the body.
import Foundation
import MarqueeCore
import Network
import Postgres

/// The HTTP API: routes plus everything they share.
public final class APIServer: Sendable {
    /// The largest body a route accepts (the HTTP server's own 413 uses the same figure).
    public static let defaultMaxBodySize = 64 * 1024

    public let routes: RouteTable
    public let maxBodySize: Int
    private let keys: APIKeyVerifier
    private let logger: Logger
    private let requests: Counter
    private let durations: Histogram
    /// Refuses keyed requests while the database is behind (nil: every request is let in).
    private let admission: APIAdmission?
    /// The `Retry-After` of a 503 for a database that could not be reached.
    static let databaseRetryAfter = 1

    public init(
        routes: [any APIRoutes], keys: APIKeyVerifier, metrics: MetricsRegistry, logger: Logger,
        maxBodySize: Int = APIServer.defaultMaxBodySize, admission: APIAdmission? = nil
    ) {
        var table = RouteTable()
        for group in routes { group.register(in: &table) }
        self.routes = table
        self.keys = keys
        self.logger = logger
        self.maxBodySize = maxBodySize
        self.admission = admission
        requests = metrics.counter(
            "marquee_http_requests_total", help: "HTTP API requests by method, route template and status.",
            labels: ["method", "route", "status"])
        durations = metrics.histogram(
            "marquee_http_request_duration_seconds",
            help: "HTTP API request latency by method, route template and status.",
            labels: ["method", "route", "status"])
    }

    /// Answers one request; never throws.
    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        let start = ContinuousClock.now
        var template = "unmatched"
        var keyID: String?
        var response: HTTPResponse
        do {
            // HEAD is answered as GET without the body.
            switch routes.router.match(method: request.method == "HEAD" ? "GET" : request.method, path: request.path) {
            case .notFound:
                throw APIError.notFound("route")
            case .methodNotAllowed(let allowed):
                var answer = APIError.methodNotAllowed(request.method, allowed: allowed).response
                answer.headers.set("allow", allowed.joined(separator: ", "))
                response = answer
            case .found(let route, let matched, let parameters):
                template = matched
                // Keyed routes need the database: refused before the key is checked (that may read it too).
                let admitted = route.access == .open ? nil : admission
                if let refusal = admitted?.refusal() { throw refusal }
                defer { admitted?.finished() }
                let (key, body) = try await admit(request, to: route)
                keyID = key?.keyID
                response = try await route.handler(APIRequest(http: request, parameters: parameters, key: key, body: body))
            }
        } catch let error as APIError {
            response = error.response
            // A refused key (revoked, unknown, short of the scope) is logged by the public id it presents, so an
            // operator can tell which feed lost access; never its secret. Parsed here only, not on every request.
            if error.status == 401 || error.status == 403 {
                keyID = APIKeyText(authorization: request.headers["authorization"] ?? "")?.id
            }
        } catch let error as PostgresError where error.kind == .checkoutTimeout {
            logger.warning("no database connection in time", ["route": .string(template), "error": .string("\(error)")])
            response = APIError.unavailable("the database did not answer in time; retry later", retryAfter: Self.databaseRetryAfter).response
        } catch let error as PostgresError where error.kind == .connectionFailed || error.kind == .connectionLost || error.kind == .poolClosed {
            logger.error("database unavailable", ["route": .string(template), "error": .string("\(error)")])
            response = APIError.unavailable("the database cannot be reached; retry later", retryAfter: Self.databaseRetryAfter).response
        } catch {
            logger.error("request failed", ["route": .string(template), "error": .string("\(error)")])
            response = APIError.internalError.response
        }
        if request.method == "HEAD" { response.body = [] }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let labels = [request.method, template, String(response.status)]
        requests.increment(labels)
        durations.observe(seconds, labels)
        let milliseconds = LogValue.double((seconds * 1e6).rounded() / 1e3)
        logger.info(
            "request",
            [
                "method": .string(request.method), "route": .string(template), "status": .int(response.status),
                "duration_ms": milliseconds, "key_id": keyID.map(LogValue.string) ?? "-",
            ])
        return response
    }

    /// The checks every route shares; returns the caller's key and the parsed body.
    private func admit(_ request: HTTPRequest, to route: APIRoute) async throws -> (VerifiedAPIKey?, JSONValue?) {
        if route.takesBody, request.body.count > maxBodySize { throw APIError.payloadTooLarge(limit: maxBodySize) }
        var key: VerifiedAPIKey?
        switch route.access {
        case .open:
            break
        case .anyKey:
            key = try await keys.verify(authorization: request.headers["authorization"])
        case .scope(let scope):
            let verified = try await keys.verify(authorization: request.headers["authorization"])
            guard verified.permits(scope) else { throw APIError.forbidden(scope: scope.rawValue) }
            key = verified
        }
        guard route.takesBody else { return (key, nil) }
        guard Self.isJSON(contentType: request.headers["content-type"]) else { throw APIError.unsupportedMediaType }
        do {
            return (key, try JSONValue(parsing: request.body))
        } catch {
            throw APIError.invalidJSON("the body is not valid JSON: \(error)")
        }
    }

    /// `application/json`, with parameters such as `charset=utf-8` allowed.
    static func isJSON(contentType: String?) -> Bool {
        guard let contentType else { return false }
        let blank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var mediaType = contentType.utf8.prefix { $0 != UInt8(ascii: ";") }.drop(while: blank)
        while let last = mediaType.last, blank(last) { mediaType = mediaType.dropLast() }
        let json = "application/json".utf8
        return mediaType.count == json.count
            && zip(mediaType, json).allSatisfy { byte, expected in ASCII.lowercased(byte) == expected }
    }
}
