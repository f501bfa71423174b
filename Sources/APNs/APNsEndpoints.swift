// Where APNs requests go. Precedence: a URL stored with the app, then the process environment
// (MARQUEE_APNS_PUSH_URL / MARQUEE_APNS_MANAGE_URL override Apple's hosts for every environment),
// then Apple's host for the app's environment. A pure function of its inputs, so it is tested without I/O.
import Foundation

/// An APNs environment; channels, tokens and keys belong to one of them.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    case development
    case production

    /// Parses `development`, `sandbox` (Apple's name for development) or `production`, in any case.
    public init?(parsing text: String) {
        switch text.lowercased() {
        case "development", "sandbox": self = .development
        case "production": self = .production
        default: return nil
        }
    }
}

/// The two APNs services: pushes and broadcasts, or channel management. Each has its own host and connections.
public enum APNsHostKind: String, Sendable, Hashable, CaseIterable {
    case push
    case management
}

/// One HTTPS host and port that APNs (or the simulator) listens on.
public struct APNsEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `https://host[:port]` (port 443 when absent; IPv6 hosts in brackets). Only https: APNs is TLS-only.
    public init(url text: String) throws(APNsConfigurationError) {
        guard let components = URLComponents(string: text), components.scheme?.lowercased() == "https",
            let host = components.host, !host.isEmpty
        else {
            throw .invalidURL(text, "expected https://host[:port]")
        }
        guard components.path.isEmpty || components.path == "/", components.query == nil, components.fragment == nil,
            components.user == nil
        else {
            throw .invalidURL(text, "an APNs URL names a host and port only, no path, query or credentials")
        }
        let port = components.port ?? 443
        guard (1...65_535).contains(port) else { throw .invalidURL(text, "port out of range") }
        self.init(host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: port)
    }

    /// Apple's host for a service in an environment.
    public static func apple(_ kind: APNsHostKind, _ environment: APNsEnvironment) -> APNsEndpoint {
        switch (kind, environment) {
        case (.push, .development): APNsEndpoint(host: "api.sandbox.push.apple.com", port: 443)
        case (.push, .production): APNsEndpoint(host: "api.push.apple.com", port: 443)
        case (.management, .development): APNsEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
        case (.management, .production): APNsEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
        }
    }

    /// `https://host:port`, with IPv6 hosts in brackets.
    public var url: String { host.contains(":") ? "https://[\(host)]:\(port)" : "https://\(host):\(port)" }
    public var description: String { url }
}

/// Where one app's APNs requests go, and which extra CA to trust when connecting there.
public struct APNsEndpoints: Sendable, Hashable {
    public var push: APNsEndpoint
    public var management: APNsEndpoint
    /// A PEM CA file to trust besides the system store (`MARQUEE_APNS_CA_FILE`), e.g. the simulator's CA.
    public var extraTrustedCAFile: String?

    public static let pushURLVariable = "MARQUEE_APNS_PUSH_URL"
    public static let managementURLVariable = "MARQUEE_APNS_MANAGE_URL"
    public static let caFileVariable = "MARQUEE_APNS_CA_FILE"

    public init(push: APNsEndpoint, management: APNsEndpoint, extraTrustedCAFile: String? = nil) {
        self.push = push
        self.management = management
        self.extraTrustedCAFile = extraTrustedCAFile
    }

    /// The endpoint for a service.
    public subscript(kind: APNsHostKind) -> APNsEndpoint {
        switch kind {
        case .push: push
        case .management: management
        }
    }

    /// Resolves an app's endpoints: its stored URLs first, then the process environment, then Apple's hosts.
    /// Empty strings count as absent. Pass `ProcessInfo.processInfo.environment` in production.
    public static func resolve(
        environment: APNsEnvironment, appPushURL: String? = nil, appManagementURL: String? = nil,
        processEnvironment: [String: String]
    ) throws(APNsConfigurationError) -> APNsEndpoints {
        func pick(_ stored: String?, _ variable: String, _ kind: APNsHostKind) throws(APNsConfigurationError) -> APNsEndpoint {
            if let stored, !stored.isEmpty { return try APNsEndpoint(url: stored) }
            if let value = processEnvironment[variable], !value.isEmpty {
                do { return try APNsEndpoint(url: value) } catch { throw .invalidURL("\(variable)=\(value)", error.reason) }
            }
            return .apple(kind, environment)
        }
        let caFile = processEnvironment[caFileVariable].flatMap { $0.isEmpty ? nil : $0 }
        return APNsEndpoints(
            push: try pick(appPushURL, pushURLVariable, .push),
            management: try pick(appManagementURL, managementURLVariable, .management),
            extraTrustedCAFile: caFile)
    }
}

/// APNs configuration that cannot work; fix the named setting.
public enum APNsConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An APNs URL setting is malformed: `(value, what is expected)`.
    case invalidURL(String, String)

    var reason: String {
        switch self {
        case .invalidURL(_, let reason): reason
        }
    }

    public var description: String {
        switch self {
        case .invalidURL(let value, let reason): "invalid APNs URL \(value): \(reason)"
        }
    }
}
