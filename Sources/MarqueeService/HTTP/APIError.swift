// One error format for every endpoint: {"error": {"code": ..., "message": ..., "field": ...}} with the
// right status. Handlers throw APIError; anything else becomes a 500 that reveals nothing internal.
import MarqueeCore
import Network

/// An API failure a client can act on: the HTTP status, a stable code, a message and the field at fault.
public struct APIError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    /// A stable snake_case code, e.g. `validation_failed`.
    public let code: String
    public let message: String
    /// The input at fault as a path, e.g. `contentState.homeScore`, or a header or query name.
    public let field: String?
    /// Seconds a client should wait before it tries again (`Retry-After`), for 429 and 503.
    public let retryAfter: Int?

    public init(status: Int, code: String, message: String, field: String? = nil, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retryAfter = retryAfter
    }

    public var description: String { "\(status) \(code): \(message)" + (field.map { " (\($0))" } ?? "") }

    /// The JSON body.
    public var json: JSONValue {
        var error = JSONObject()
        error["code"] = .string(code)
        error["message"] = .string(message)
        error["field"] = field.map(JSONValue.string) ?? .null
        return .object(["error": .object(error)])
    }

    /// The whole HTTP response.
    public var response: HTTPResponse {
        var headers: HTTPHeaders = ["content-type": "application/json"]
        if status == 401 { headers.add("www-authenticate", "Bearer") }
        if let retryAfter { headers.add("retry-after", "\(retryAfter)") }
        return HTTPResponse(status: status, headers: headers, body: json.jsonBytes)
    }

    public static func badRequest(_ message: String, field: String? = nil) -> APIError {
        APIError(status: 400, code: "bad_request", message: message, field: field)
    }

    public static func invalidJSON(_ message: String) -> APIError {
        APIError(status: 400, code: "invalid_json", message: message, field: nil)
    }

    /// A refused member. The message names its subject: the field is put in front unless the message starts with
    /// it already ("occurredAt: required", not "required"), so it reads alone in a log or a terminal.
    public static func validation(_ message: String, field: String?) -> APIError {
        let named = field.map { message.hasPrefix($0) ? message : "\($0): \(message)" } ?? message
        return APIError(status: 422, code: "validation_failed", message: named, field: field)
    }

    /// A freshness policy member that cannot be stored (the type's policy, or an event's `freshness`).
    public static func validation(_ error: FreshnessSettingsError) -> APIError {
        validation(error.message, field: error.field)
    }

    public static let unauthorized = APIError(
        status: 401, code: "unauthorized", message: "missing or unknown API key; send 'Authorization: Bearer <key>'", field: "authorization")

    public static func forbidden(scope: String) -> APIError {
        APIError(status: 403, code: "forbidden", message: "this API key lacks the '\(scope)' scope", field: "authorization")
    }

    public static func notFound(_ what: String) -> APIError {
        APIError(status: 404, code: "not_found", message: "\(what) not found", field: nil)
    }

    public static func methodNotAllowed(_ method: String, allowed: [String]) -> APIError {
        APIError(
            status: 405, code: "method_not_allowed",
            message: "\(method) is not allowed here; allowed: \(allowed.joined(separator: ", "))", field: nil)
    }

    public static func conflict(_ message: String, field: String? = nil) -> APIError {
        APIError(status: 409, code: "conflict", message: message, field: field)
    }

    public static func payloadTooLarge(limit: Int) -> APIError {
        APIError(status: 413, code: "payload_too_large", message: "request body exceeds \(limit) bytes", field: nil)
    }

    public static let unsupportedMediaType = APIError(
        status: 415, code: "unsupported_media_type", message: "send 'Content-Type: application/json'", field: "content-type")

    public static let internalError = APIError(
        status: 500, code: "internal", message: "internal error; the server log has details", field: nil)

    /// APNs did not answer an operator's request within its bound (`serve --admin-timeout`).
    public static func apnsTimeout(_ message: String) -> APIError {
        APIError(status: 504, code: "apns_timeout", message: message, field: nil)
    }

    public static func unavailable(_ message: String, retryAfter: Int? = nil) -> APIError {
        APIError(status: 503, code: "unavailable", message: message, field: nil, retryAfter: retryAfter)
    }

    /// 429: the server is behind (its database queue is past `--max-queue-wait`); the request did nothing.
    public static func overloaded(retryAfter: Int) -> APIError {
        APIError(
            status: 429, code: "overloaded", message: "the server is behind; nothing was done, retry after \(retryAfter) s", field: nil,
            retryAfter: retryAfter)
    }
}
