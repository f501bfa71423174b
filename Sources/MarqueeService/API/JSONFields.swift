// Reading a JSON request body field by field: every refusal is a 422 that names the field's path,
// and an object refuses keys it does not know, so a typo never passes silently.
import Foundation
import MarqueeCore

/// A JSON object being read by a handler.
public struct JSONFields: Sendable {
    public let object: JSONObject
    public let path: JSONPath

    /// Fails with 422 unless `value` is an object.
    public init(_ value: JSONValue, at path: JSONPath) throws(APIError) {
        guard case .object(let object) = value else {
            throw .validation("expected a JSON object, found \(value.typeName)", field: path.isRoot ? nil : "\(path)")
        }
        self.object = object
        self.path = path
    }

    /// Fails with 422 naming the first key not in `allowed`.
    public func allowOnly(_ allowed: Set<String>) throws(APIError) {
        if let unknown = object.keys.first(where: { !allowed.contains($0) }) {
            throw .validation("unknown field; allowed: \(allowed.sorted().joined(separator: ", "))", field: field(unknown))
        }
    }

    /// The path of a member, as errors name it.
    public func field(_ key: String) -> String { "\(path.appending(key: key))" }

    /// A required member of any type.
    public func required(_ key: String) throws(APIError) -> JSONValue {
        guard let value = object[key], !value.isNull else { throw .validation("required", field: field(key)) }
        return value
    }

    /// A required string member.
    public func string(_ key: String) throws(APIError) -> String {
        let value = try required(key)
        guard let text = value.stringValue else { throw .validation("expected a string, found \(value.typeName)", field: field(key)) }
        return text
    }

    /// A required integer member within `range`.
    public func int(_ key: String, in range: ClosedRange<Int64> = Int64.min...Int64.max) throws(APIError) -> Int64 {
        let value = try required(key)
        guard let number = value.intValue else { throw .validation("expected an integer, found \(value.typeName)", field: field(key)) }
        guard range.contains(number) else {
            throw .validation("must be from \(range.lowerBound) to \(range.upperBound)", field: field(key))
        }
        return number
    }
}

extension JSONFields {
    /// An optional member of any type; an explicit null counts as absent.
    public func optional(_ key: String) -> JSONValue? {
        guard let value = object[key], !value.isNull else { return nil }
        return value
    }

    /// An optional string member.
    public func optionalString(_ key: String) throws(APIError) -> String? {
        guard optional(key) != nil else { return nil }
        return try string(key)
    }

    /// A required ISO 8601 date with an offset (`2026-11-29T18:30:00Z`, fractional seconds allowed).
    public func date(_ key: String) throws(APIError) -> Date {
        let text = try string(key)
        guard let date = Date(iso8601: text) else {
            throw .validation("expected an ISO 8601 date such as 2026-11-29T18:30:00Z", field: field(key))
        }
        return date
    }

    /// An optional ISO 8601 date.
    public func optionalDate(_ key: String) throws(APIError) -> Date? {
        guard optional(key) != nil else { return nil }
        return try date(key)
    }

    /// An optional finite number.
    public func optionalDouble(_ key: String) throws(APIError) -> Double? {
        guard let value = optional(key) else { return nil }
        guard let number = value.doubleValue, number.isFinite else {
            throw .validation("expected a number, found \(value.typeName)", field: field(key))
        }
        return number
    }

    /// An optional boolean member.
    public func optionalBool(_ key: String) throws(APIError) -> Bool? {
        guard let value = optional(key) else { return nil }
        guard let bool = value.boolValue else { throw .validation("expected true or false, found \(value.typeName)", field: field(key)) }
        return bool
    }

    /// A string member naming one case of `T` (its raw value); `fallback` when absent.
    public func choice<T: RawRepresentable & CaseIterable>(_ key: String, default fallback: T? = nil) throws(APIError) -> T
    where T.RawValue == String {
        if optional(key) == nil, let fallback { return fallback }
        let text = try string(key)
        guard let value = T(rawValue: text) else {
            throw .validation("must be one of: \(T.allCases.map(\.rawValue).joined(separator: ", "))", field: field(key))
        }
        return value
    }
}
