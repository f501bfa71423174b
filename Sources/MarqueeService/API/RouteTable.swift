// The API's routes: each feature area registers its routes into one table (`APIRoutes`), with the access
// each needs and whether it takes a JSON body. APIServer does everything the routes share (matching,
// authentication, body limits and parsing, errors, metrics, logs), so a handler sees only valid input.
import MarqueeCore
import Network

/// Who may call a route.
public enum RouteAccess: Sendable, Equatable {
    /// No key needed (health, readiness, metrics, the OpenAPI document).
    case open
    /// Any valid key, whatever its scope.
    case anyKey
    /// A key whose scope permits this one (`admin` permits everything).
    case scope(APIScope)
}

/// What a handler receives: the request, its path parameters and query, the caller, and the parsed body.
public struct APIRequest: Sendable {
    public let http: HTTPRequest
    public let parameters: [String: String]
    public let query: QueryParameters
    /// The caller's key, for routes that need one.
    public let key: VerifiedAPIKey?
    /// The parsed JSON body, for routes that take one.
    public let body: JSONValue?

    public init(http: HTTPRequest, parameters: [String: String] = [:], key: VerifiedAPIKey? = nil, body: JSONValue? = nil) {
        self.http = http
        self.parameters = parameters
        self.query = QueryParameters(path: http.path)
        self.key = key
        self.body = body
    }

    /// A path parameter (the router only matches when it is present).
    public func parameter(_ name: String) -> String { parameters[name] ?? "" }

    /// The JSON body as a reader that names fields in its errors.
    public func bodyObject() throws(APIError) -> JSONFields {
        try JSONFields(body ?? .null, at: .root)
    }
}

/// An API route handler. Throw `APIError` for a client error; anything else is a 500 (or 503 when the
/// database cannot be reached) that reveals nothing.
public typealias APIHandler = @Sendable (APIRequest) async throws -> HTTPResponse

/// One registered route.
public struct APIRoute: Sendable {
    public let method: String
    public let template: String
    public let access: RouteAccess
    /// The route takes a JSON body (checked for size, content type and syntax before the handler).
    public let takesBody: Bool
    public let handler: APIHandler
}

/// The routes of one feature area (apps, attribute types, events, ...).
public protocol APIRoutes: Sendable {
    func register(in table: inout RouteTable)
}

/// Every route of the API.
public struct RouteTable: Sendable {
    public private(set) var router = Router<APIRoute>()

    public init() {}

    /// Adds a route.
    public mutating func add(
        _ method: String, _ template: String, access: RouteAccess, takesBody: Bool = false,
        _ handler: @escaping APIHandler
    ) {
        router.add(method, template, APIRoute(method: method, template: template, access: access, takesBody: takesBody, handler: handler))
    }

    /// Every route, in registration order.
    public var all: [APIRoute] { router.routes.map(\.handler) }

    /// Every (method, template) pair, in registration order.
    public var endpoints: [(method: String, template: String)] {
        router.routes.map { ($0.method, $0.template) }
    }
}

extension HTTPResponse {
    /// A JSON response.
    public static func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["content-type": "application/json"], body: value.jsonBytes)
    }
}
