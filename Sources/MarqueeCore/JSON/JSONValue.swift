// A JSON value of our own rather than JSONSerialization's `Any`: on Linux the latter cannot always tell
// `3` from `3.0`, loses key order and accepts duplicate keys. Marquee needs all three to be exact,
// because an app decodes `content-state` with a plain JSONDecoder and drops what does not fit.

/// A JSON value that keeps integers and doubles apart and object keys in insertion order.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
}

extension JSONValue {
    /// The member `key` when this is an object, else nil.
    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { object[key] } else { nil }
    }

    /// The value at `path`, or nil when some component does not exist.
    public subscript(path: JSONPath) -> JSONValue? {
        var current = self
        for component in path.components {
            switch (component, current) {
            case (.key(let key), .object(let object)):
                guard let next = object[key] else { return nil }
                current = next
            case (.index(let index), .array(let array)) where array.indices.contains(index):
                current = array[index]
            default:
                return nil
            }
        }
        return current
    }

    public var isNull: Bool { self == .null }
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
    public var intValue: Int64? { if case .int(let value) = self { value } else { nil } }
    public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    public var arrayValue: [JSONValue]? { if case .array(let value) = self { value } else { nil } }
    public var objectValue: JSONObject? { if case .object(let value) = self { value } else { nil } }

    /// The number as a Double, for `.int` and `.double` alike.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The name used in error messages: null, bool, int, double, string, array or object.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var object = JSONObject()
        for (key, value) in elements { object[key] = value }
        self = .object(object)
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact JSON text.
    public var description: String { jsonString }
}
