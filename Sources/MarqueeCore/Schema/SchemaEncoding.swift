// Validation and encoding of attribute and content-state values against a schema. Input is what an
// ingester sends (dates as ISO 8601 text or epoch numbers, ranges as arrays or {lower, upper}, explicit
// nulls for absent optionals); output is exactly what Swift's default JSONEncoder would have written for
// the app's struct, so a plain JSONDecoder on the device decodes it.

import Foundation

/// How a bare number in a `date` field is read. Ingesters send Unix epoch seconds; values already in
/// app form (stored state) hold seconds since 2001-01-01.
public enum DateNumbers: Sendable, Equatable {
    case unixEpoch
    case referenceDate
}

/// A value that does not fit its schema, with the path of the failing field.
public struct ValidationError: Error, Equatable, CustomStringConvertible {
    /// What is wrong with the field.
    public enum Kind: Equatable, Sendable {
        case missingField
        case unknownField
        case wrongType(expected: String, found: String)
        case notInEnum(String, allowed: [String])
        /// Not an ISO 8601 date with offset, not a number, or outside 1970...2199.
        case badDate
        /// A date range whose lower bound is after its upper bound (JSONDecoder refuses those).
        case invertedDateRange
    }

    public var path: JSONPath
    public var kind: Kind

    public init(_ kind: Kind, at path: JSONPath) {
        self.kind = kind
        self.path = path
    }

    public var description: String {
        switch kind {
        case .missingField: "\(path): missing field"
        case .unknownField: "\(path): unknown field (not in the schema)"
        case .wrongType(let expected, let found): "\(path): expected \(expected), found \(found)"
        case .notInEnum(let value, let allowed):
            "\(path): \(JSONValue.string(value).jsonString) is not one of \(allowed.joined(separator: ", "))"
        case .badDate:
            "\(path): bad date; send ISO 8601 with an offset (2026-11-29T18:30:00Z) or Unix epoch seconds"
        case .invertedDateRange: "\(path): date range lower bound is after its upper bound"
        }
    }
}

extension ObjectSchema {
    /// Validates a complete value and returns it in app form (fields in schema order, absent
    /// optionals omitted, dates as reference-date seconds, ranges as `[lower, upper]`).
    /// `path` prefixes error paths, e.g. `["contentState"]`.
    public func encode(
        _ value: JSONValue, at path: JSONPath = .root, dateNumbers: DateNumbers = .unixEpoch
    ) throws(ValidationError) -> JSONValue {
        try ValueEncoder(dateNumbers: dateNumbers, isPatch: false).object(value, self, at: path)
    }

    /// Validates a JSON merge patch (RFC 7396) against the schema and returns it in app form: fields
    /// may be missing, nested objects are patches too, `null` removes an optional field (a required one
    /// cannot be removed), arrays and date ranges are replaced whole.
    public func encodePatch(
        _ patch: JSONValue, at path: JSONPath = .root, dateNumbers: DateNumbers = .unixEpoch
    ) throws(ValidationError) -> JSONValue {
        try ValueEncoder(dateNumbers: dateNumbers, isPatch: true).object(patch, self, at: path)
    }

    /// Paths of `significant` fields whose value differs between two app-form values. With no
    /// previous value, every significant field present in `new` counts as changed.
    public func significantChanges(from old: JSONValue?, to new: JSONValue, at path: JSONPath = .root) -> [JSONPath] {
        var changes: [JSONPath] = []
        for field in fields {
            let fieldPath = path.appending(key: field.name)
            let before = old?[field.name]
            let after = new[field.name]
            if field.spec.isSignificant {
                if before != after { changes.append(fieldPath) }
            } else if case .object(let nested) = field.spec.type, let after {
                changes += nested.significantChanges(from: before, to: after, at: fieldPath)
            }
        }
        return changes
    }
}

extension ActivityType {
    /// Validates and encodes static attributes (errors under `attributes.`).
    public func encodeAttributes(_ value: JSONValue, at path: JSONPath = ["attributes"]) throws(ValidationError) -> JSONValue {
        try attributes.encode(value, at: path)
    }

    /// Validates and encodes a complete content state (errors under `contentState.`).
    public func encodeContentState(_ value: JSONValue, at path: JSONPath = ["contentState"]) throws(ValidationError) -> JSONValue {
        try contentState.encode(value, at: path)
    }

    /// Applies an ingester's merge patch to the previous app-form content state and returns the
    /// validated new content state in app form.
    public func patchContentState(
        _ previous: JSONValue, with patch: JSONValue, at path: JSONPath = ["contentState"]
    ) throws(ValidationError) -> JSONValue {
        let encodedPatch = try contentState.encodePatch(patch, at: path)
        return try contentState.encode(previous.merging(patch: encodedPatch), at: path, dateNumbers: .referenceDate)
    }

    /// Significant content-state fields changed between two app-form states.
    public func significantChanges(from old: JSONValue?, to new: JSONValue) -> [JSONPath] {
        contentState.significantChanges(from: old, to: new, at: ["contentState"])
    }
}

/// One pass of validation and encoding.
private struct ValueEncoder {
    let dateNumbers: DateNumbers
    let isPatch: Bool

    func object(_ value: JSONValue, _ schema: ObjectSchema, at path: JSONPath) throws(ValidationError) -> JSONValue {
        guard case .object(let input) = value else {
            throw ValidationError(.wrongType(expected: "object", found: value.typeName), at: path)
        }
        for key in input.keys where schema.field(named: key) == nil {
            throw ValidationError(.unknownField, at: path.appending(key: key))
        }
        var output = JSONObject()
        for field in schema.fields {
            let fieldPath = path.appending(key: field.name)
            switch input[field.name] {
            case nil:
                guard field.spec.isOptional || isPatch else { throw ValidationError(.missingField, at: fieldPath) }
            case .null?:
                guard field.spec.isOptional else {
                    throw ValidationError(.wrongType(expected: field.spec.type.name, found: "null"), at: fieldPath)
                }
                if isPatch { output[field.name] = .null }
            case let fieldValue?:
                output[field.name] = try encode(fieldValue, as: field.spec.type, at: fieldPath)
            }
        }
        return .object(output)
    }

    func encode(_ value: JSONValue, as type: FieldType, at path: JSONPath) throws(ValidationError) -> JSONValue {
        var wrongType: ValidationError { ValidationError(.wrongType(expected: type.name, found: value.typeName), at: path) }
        switch type {
        case .string:
            guard case .string = value else { throw wrongType }
            return value
        case .bool:
            guard case .bool = value else { throw wrongType }
            return value
        case .int:
            switch value {
            case .int: return value
            case .double(let double): if let integer = Int64(exactly: double) { return .int(integer) }
            default: break
            }
            throw wrongType
        case .double:
            guard let double = value.doubleValue else { throw wrongType }
            return .double(double)
        case .enumeration(let allowed):
            guard case .string(let raw) = value else { throw wrongType }
            guard allowed.contains(raw) else { throw ValidationError(.notInEnum(raw, allowed: allowed), at: path) }
            return value
        case .date:
            return .double(ActivityDate.referenceSeconds(fromMilliseconds: try milliseconds(value, at: path)))
        case .dateRange:
            let (lower, upper) = try rangeBounds(value, at: path)
            let lowerMilliseconds = try milliseconds(lower.value, at: lower.path)
            let upperMilliseconds = try milliseconds(upper.value, at: upper.path)
            guard lowerMilliseconds <= upperMilliseconds else { throw ValidationError(.invertedDateRange, at: path) }
            return [
                .double(ActivityDate.referenceSeconds(fromMilliseconds: lowerMilliseconds)),
                .double(ActivityDate.referenceSeconds(fromMilliseconds: upperMilliseconds)),
            ]
        case .object(let schema):
            return try object(value, schema, at: path)
        case .array(let itemSpec):
            guard case .array(let elements) = value else { throw wrongType }
            // Array elements are whole values even inside a patch: a patch replaces arrays.
            let elementEncoder = ValueEncoder(dateNumbers: dateNumbers, isPatch: false)
            var output: [JSONValue] = []
            output.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                if element == .null {
                    guard itemSpec.isOptional else {
                        throw ValidationError(.wrongType(expected: itemSpec.type.name, found: "null"), at: path.appending(index: index))
                    }
                    output.append(.null)
                } else {
                    output.append(try elementEncoder.encode(element, as: itemSpec.type, at: path.appending(index: index)))
                }
            }
            return .array(output)
        }
    }

    private func milliseconds(_ value: JSONValue, at path: JSONPath) throws(ValidationError) -> Int64 {
        let result: Int64?
        switch value {
        case .string(let text): result = ActivityDate.parseISO8601(text)
        case .int, .double: result = ActivityDate.milliseconds(fromSeconds: value.doubleValue!, since: dateNumbers)
        default: throw ValidationError(.wrongType(expected: "date", found: value.typeName), at: path)
        }
        guard let result else { throw ValidationError(.badDate, at: path) }
        return result
    }

    /// `[lower, upper]`, `{"lower", "upper"}` or `{"lowerBound", "upperBound"}`.
    private func rangeBounds(
        _ value: JSONValue, at path: JSONPath
    ) throws(ValidationError) -> (lower: (value: JSONValue, path: JSONPath), upper: (value: JSONValue, path: JSONPath)) {
        switch value {
        case .array(let bounds) where bounds.count == 2:
            return ((bounds[0], path.appending(index: 0)), (bounds[1], path.appending(index: 1)))
        case .object(let object):
            let names =
                object["lowerBound"] != nil || object["upperBound"] != nil
                ? ("lowerBound", "upperBound") : ("lower", "upper")
            for key in object.keys where key != names.0 && key != names.1 {
                throw ValidationError(.unknownField, at: path.appending(key: key))
            }
            guard let lower = object[names.0] else { throw ValidationError(.missingField, at: path.appending(key: names.0)) }
            guard let upper = object[names.1] else { throw ValidationError(.missingField, at: path.appending(key: names.1)) }
            return ((lower, path.appending(key: names.0)), (upper, path.appending(key: names.1)))
        default:
            throw ValidationError(.wrongType(expected: "dateRange ([lower, upper] or {\"lower\", \"upper\"})", found: value.typeName), at: path)
        }
    }
}
