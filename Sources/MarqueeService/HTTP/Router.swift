// Maps a method and path to a handler. Templates name their parameters in braces
// (`/v1/events/{id}/updates`); the template, not the raw path, labels metrics, so ids never explode
// metric cardinality.
import Foundation

/// What the router found for a request.
public enum RouteMatch<Handler: Sendable>: Sendable {
    case found(Handler, template: String, parameters: [String: String])
    /// The path exists, the method does not.
    case methodNotAllowed(allowed: [String])
    case notFound
}

/// A table of routes.
public struct Router<Handler: Sendable>: Sendable {
    public struct Route: Sendable {
        public let method: String
        public let template: String
        let segments: [Segment]
        public let handler: Handler
    }

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    public private(set) var routes: [Route] = []

    public init() {}

    /// Adds a route; later routes never shadow earlier ones with the same template and method.
    public mutating func add(_ method: String, _ template: String, _ handler: Handler) {
        let segments = template.split(separator: "/", omittingEmptySubsequences: true).map { part -> Segment in
            part.hasPrefix("{") && part.hasSuffix("}") ? .parameter(String(part.dropFirst().dropLast())) : .literal(String(part))
        }
        routes.append(Route(method: method, template: template, segments: segments, handler: handler))
    }

    /// Finds the route for `method` and `path` (a query string is ignored).
    public func match(method: String, path: String) -> RouteMatch<Handler> {
        let pathOnly = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        // Empty segments are kept, so `/v1/events//updates` or a trailing slash matches nothing.
        guard pathOnly.hasPrefix("/") else { return .notFound }
        // `/` itself has no segment (the template `/` none either).
        let parts = pathOnly == "/" ? [] : pathOnly.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        var allowed: [String] = []
        for route in routes {
            guard let parameters = Self.bind(route.segments, to: parts) else { continue }
            if route.method == method { return .found(route.handler, template: route.template, parameters: parameters) }
            allowed.append(route.method)
        }
        return allowed.isEmpty ? .notFound : .methodNotAllowed(allowed: allowed)
    }

    private static func bind(_ segments: [Segment], to parts: [String]) -> [String: String]? {
        guard segments.count == parts.count else { return nil }
        // Literals first: most routes fail there, and then no parameter was decoded for nothing.
        for (segment, part) in zip(segments, parts) {
            if case .literal(let literal) = segment, literal != part { return nil }
        }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(segments, parts) {
            guard case .parameter(let name) = segment else { continue }
            guard let decoded = part.contains("%") ? part.removingPercentEncoding : part, !decoded.isEmpty else { return nil }
            parameters[name] = decoded
        }
        return parameters
    }
}

/// The query parameters of a request path, percent-decoded.
public struct QueryParameters: Sendable, Equatable {
    public let pairs: [(name: String, value: String)]

    public init(path: String) {
        guard let query = path.split(separator: "?", maxSplits: 1).dropFirst().first else {
            pairs = []
            return
        }
        pairs = query.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in
                String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
            }
            return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
    }

    /// The last value of `name`.
    public subscript(name: String) -> String? { pairs.last { $0.name == name }?.value }

    /// Every name present.
    public var names: [String] { pairs.map(\.name) }

    public static func == (lhs: QueryParameters, rhs: QueryParameters) -> Bool {
        lhs.pairs.map { [$0.name, $0.value] } == rhs.pairs.map { [$0.name, $0.value] }
    }
}
