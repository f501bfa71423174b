// Typed readers of query parameters, as JSONFields is for bodies: one rule for every route. An empty
// value (`?limit=`) counts as absent; a value that does not parse is a 422 naming the parameter.
import Foundation

extension QueryParameters {
    /// The value of `name`; nil when absent or empty.
    func text(_ name: String) -> String? { self[name].flatMap { $0.isEmpty ? nil : $0 } }

    /// A whole number within `range`; nil when absent.
    func integer(_ name: String, in range: ClosedRange<Int> = 1...Int.max) throws(APIError) -> Int? {
        guard let text = text(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.validation(
                range.upperBound == .max
                    ? "expected a whole number from \(range.lowerBound) up"
                    : "expected a whole number from \(range.lowerBound) to \(range.upperBound)",
                field: name)
        }
        return value
    }

    /// One of a closed set of words; nil when absent.
    func choice<T: RawRepresentable & CaseIterable>(_ name: String) throws(APIError) -> T? where T.RawValue == String {
        guard let text = text(name) else { return nil }
        guard let parsed = T(rawValue: text) else {
            throw APIError.validation("must be one of: \(T.allCases.map(\.rawValue).joined(separator: ", "))", field: name)
        }
        return parsed
    }

    /// An ISO 8601 instant; nil when absent.
    func date(_ name: String) throws(APIError) -> Date? {
        guard let text = text(name) else { return nil }
        guard let parsed = Date(iso8601: text) else {
            throw APIError.validation("expected an ISO 8601 date such as 2026-11-29T18:30:00Z", field: name)
        }
        return parsed
    }

    /// `true` or `false`; absent is false.
    func flag(_ name: String) throws(APIError) -> Bool {
        switch text(name) {
        case nil, "false": false
        case "true": true
        default: throw APIError.validation("expected true or false", field: name)
        }
    }
}
