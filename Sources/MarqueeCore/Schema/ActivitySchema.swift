// Schemas for `ActivityAttributes` types: what the app's Swift structs look like, so Marquee can refuse
// an update the app would fail to decode (the device drops such a push silently while APNs says 200).
// The JSON format is documented in docs/schemas.md.

/// An `ActivityAttributes` type: its Swift name and the schemas of its attributes and content state.
public struct ActivityType: Sendable, Equatable {
    /// The Swift struct name, sent as `attributes-type` in push-to-start payloads.
    public var name: String
    public var attributes: ObjectSchema
    public var contentState: ObjectSchema

    public init(name: String, attributes: ObjectSchema, contentState: ObjectSchema) {
        self.name = name
        self.attributes = attributes
        self.contentState = contentState
    }
}

/// The ordered fields of one Swift struct; encoded values list keys in this order.
public struct ObjectSchema: Sendable, Equatable {
    /// One stored property.
    public struct Field: Sendable, Equatable {
        public var name: String
        public var spec: FieldSpec

        public init(_ name: String, _ spec: FieldSpec) {
            self.name = name
            self.spec = spec
        }
    }

    public private(set) var fields: [Field]

    /// Fields with duplicate names keep the first.
    public init(_ fields: [Field]) {
        var seen = Set<String>()
        self.fields = fields.filter { seen.insert($0.name).inserted }
    }

    public func field(named name: String) -> Field? { fields.first { $0.name == name } }
}

/// A field's type and flags.
public struct FieldSpec: Sendable, Equatable {
    public var type: FieldType
    /// `T?` in Swift: may be absent or null on input; omitted from output when absent.
    public var isOptional: Bool
    /// A change of this field makes an `auto` update priority 10.
    public var isSignificant: Bool
    /// The attribute that names the event (`"eventKey": true`): Marquee fills it with the event's external id,
    /// so an activity started by a push can tell its app which event it shows (docs/schemas.md#the-event-key).
    public var isEventKey: Bool

    public init(_ type: FieldType, optional: Bool = false, significant: Bool = false, eventKey: Bool = false) {
        self.type = type
        self.isOptional = optional
        self.isSignificant = significant
        self.isEventKey = eventKey
    }
}

/// The type of a field, as Swift's default `Codable` encodes it.
public indirect enum FieldType: Sendable, Equatable {
    case string
    case int
    case double
    case bool
    /// A `String`-backed Swift enum: one of these raw values.
    case enumeration([String])
    /// `Date`: seconds since 2001-01-01 as a number.
    case date
    /// `ClosedRange<Date>`: `[lower, upper]`.
    case dateRange
    /// A nested Codable struct.
    case object(ObjectSchema)
    /// `[Element]`; an optional element spec means `[Element?]` (nulls allowed).
    case array(FieldSpec)

    /// The name used in the schema format and in error messages.
    public var name: String {
        switch self {
        case .string: "string"
        case .int: "int"
        case .double: "double"
        case .bool: "bool"
        case .enumeration: "enum"
        case .date: "date"
        case .dateRange: "dateRange"
        case .object: "object"
        case .array: "array"
        }
    }

    static let scalarNames: [String: FieldType] = [
        "string": .string, "int": .int, "double": .double, "bool": .bool, "date": .date, "dateRange": .dateRange,
    ]
}

/// A malformed schema, with the path of the part that is wrong.
public struct SchemaError: Error, Equatable, CustomStringConvertible {
    public var path: JSONPath
    public var message: String

    public var description: String { "invalid schema at \(path): \(message)" }
}

// MARK: - The JSON format (docs/schemas.md)

extension ActivityType {
    /// Reads a schema document: `{"name": ..., "attributes": {fields}, "contentState": {fields}}`.
    public init(json: JSONValue) throws(SchemaError) {
        let root = try SchemaReader.object(json, at: .root, allowedKeys: ["name", "attributes", "contentState"])
        guard let nameValue = root["name"] else { throw SchemaError(path: ["name"], message: "missing") }
        guard let name = nameValue.stringValue, Self.isSwiftTypeName(name) else {
            throw SchemaError(path: ["name"], message: "must be a Swift type name such as \"MatchAttributes\"")
        }
        guard let attributes = root["attributes"] else { throw SchemaError(path: ["attributes"], message: "missing") }
        guard let contentState = root["contentState"] else { throw SchemaError(path: ["contentState"], message: "missing") }
        self.init(
            name: name,
            attributes: try ObjectSchema(json: attributes, at: ["attributes"]),
            contentState: try ObjectSchema(json: contentState, at: ["contentState"]))
        try checkEventKey()
    }

    /// The attribute Marquee fills with the event's external id, if the type has one.
    public var eventKey: String? { attributes.fields.first { $0.spec.isEventKey }?.name }

    /// At most one event key, on a top-level string attribute.
    private func checkEventKey() throws(SchemaError) {
        var keys: [String] = []
        for field in attributes.fields {
            if field.spec.isEventKey {
                guard field.spec.type == .string else {
                    throw SchemaError(path: ["attributes", .key(field.name), "eventKey"], message: "the event key must be a string attribute")
                }
                keys.append(field.name)
            }
            if case .some(let path) = Self.nestedEventKey(field.spec, at: ["attributes", .key(field.name)]) {
                throw SchemaError(path: path, message: "eventKey marks a top-level string attribute only")
            }
        }
        if keys.count > 1 {
            throw SchemaError(path: ["attributes", .key(keys[1]), "eventKey"], message: "only one attribute may be the event key (\(keys[0]) is)")
        }
        for field in contentState.fields {
            let path: JSONPath = ["contentState", .key(field.name)]
            if field.spec.isEventKey {
                throw SchemaError(path: path.appending(key: "eventKey"), message: "the event key is an attribute, not content state")
            }
            if let nested = Self.nestedEventKey(field.spec, at: path) {
                throw SchemaError(path: nested, message: "eventKey marks a top-level string attribute only")
            }
        }
    }

    /// The path of an event key inside an object or array spec, if any.
    private static func nestedEventKey(_ spec: FieldSpec, at path: JSONPath) -> JSONPath? {
        switch spec.type {
        case .object(let schema):
            for field in schema.fields {
                let fieldPath = path.appending(key: "fields").appending(key: field.name)
                if field.spec.isEventKey { return fieldPath.appending(key: "eventKey") }
                if let nested = nestedEventKey(field.spec, at: fieldPath) { return nested }
            }
            return nil
        case .array(let items):
            if items.isEventKey { return path.appending(key: "items").appending(key: "eventKey") }
            return nestedEventKey(items, at: path.appending(key: "items"))
        default:
            return nil
        }
    }

    /// Parses a schema document from JSON text.
    public init(jsonText: String) throws(SchemaError) {
        let json: JSONValue
        do { json = try JSONValue(parsing: jsonText) } catch {
            throw SchemaError(path: .root, message: "not JSON: \(error)")
        }
        try self.init(json: json)
    }

    /// The canonical schema document (shorthand strings where possible), for storage.
    public var json: JSONValue {
        ["name": .string(name), "attributes": attributes.json, "contentState": contentState.json]
    }

    static func isSwiftTypeName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 128,
            first == "_" || first.properties.isAlphabetic
        else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }
}

extension ObjectSchema {
    /// Reads `{"fieldName": spec, ...}` (see docs/schemas.md); `path` prefixes error paths.
    public init(json: JSONValue, at path: JSONPath = .root) throws(SchemaError) {
        guard case .object(let object) = json else {
            throw SchemaError(path: path, message: "expected an object of fields, found \(json.typeName)")
        }
        var fields: [Field] = []
        for (name, spec) in object {
            guard !name.isEmpty else { throw SchemaError(path: path.appending(key: name), message: "empty field name") }
            fields.append(Field(name, try FieldSpec(json: spec, at: path.appending(key: name))))
        }
        self.init(fields)
    }

    public var json: JSONValue {
        var object = JSONObject()
        for field in fields { object[field.name] = field.spec.json }
        return .object(object)
    }
}

extension FieldSpec {
    /// Reads `"int"`, `"string?"` or `{"type": ..., "optional": ..., "significant": ..., ...}`.
    public init(json: JSONValue, at path: JSONPath) throws(SchemaError) {
        if case .string(var name) = json {
            let optional = name.hasSuffix("?")
            if optional { name.removeLast() }
            guard let type = FieldType.scalarNames[name] else {
                throw SchemaError(path: path, message: Self.unknownTypeMessage(name, shorthand: true))
            }
            self.init(type, optional: optional)
            return
        }
        let object = try SchemaReader.object(
            json, at: path, allowedKeys: ["type", "optional", "significant", "eventKey", "values", "fields", "items"])
        guard let typeName = object["type"]?.stringValue else {
            throw SchemaError(path: path.appending(key: "type"), message: "missing or not a string")
        }
        let type: FieldType
        var allowed: Set<String> = ["type", "optional", "significant", "eventKey"]
        switch typeName {
        case "enum":
            allowed.insert("values")
            type = .enumeration(try SchemaReader.enumValues(object["values"], at: path.appending(key: "values")))
        case "object":
            allowed.insert("fields")
            guard let fields = object["fields"] else {
                throw SchemaError(path: path.appending(key: "fields"), message: "an object field needs \"fields\"")
            }
            type = .object(try ObjectSchema(json: fields, at: path.appending(key: "fields")))
        case "array":
            allowed.insert("items")
            guard let items = object["items"] else {
                throw SchemaError(path: path.appending(key: "items"), message: "an array field needs \"items\"")
            }
            let itemSpec = try FieldSpec(json: items, at: path.appending(key: "items"))
            guard !itemSpec.isSignificant else {
                throw SchemaError(path: path.appending(key: "items"), message: "mark the array field significant, not its items")
            }
            type = .array(itemSpec)
        default:
            guard let scalar = FieldType.scalarNames[typeName] else {
                throw SchemaError(path: path.appending(key: "type"), message: Self.unknownTypeMessage(typeName, shorthand: false))
            }
            type = scalar
        }
        for key in object.keys where !allowed.contains(key) {
            throw SchemaError(path: path.appending(key: key), message: "\"\(key)\" does not apply to type \(typeName)")
        }
        self.init(
            type,
            optional: try SchemaReader.flag(object["optional"], at: path.appending(key: "optional")),
            significant: try SchemaReader.flag(object["significant"], at: path.appending(key: "significant")),
            eventKey: try SchemaReader.flag(object["eventKey"], at: path.appending(key: "eventKey")))
    }

    /// Shorthand (`"date?"`) when the spec has no more than a scalar type and optionality.
    public var json: JSONValue {
        if !isSignificant, !isEventKey, FieldType.scalarNames[type.name] != nil {
            return .string(type.name + (isOptional ? "?" : ""))
        }
        var object: JSONObject = ["type": .string(type.name)]
        switch type {
        case .enumeration(let values): object["values"] = .array(values.map(JSONValue.string))
        case .object(let schema): object["fields"] = schema.json
        case .array(let items): object["items"] = items.json
        default: break
        }
        if isOptional { object["optional"] = true }
        if isSignificant { object["significant"] = true }
        if isEventKey { object["eventKey"] = true }
        return .object(object)
    }

    private static func unknownTypeMessage(_ name: String, shorthand: Bool) -> String {
        let names = "string, int, double, bool, date, dateRange" + (shorthand ? "" : ", enum, object, array")
        return "unknown type \"\(name)\"; use one of \(names)"
            + (shorthand ? " (enum, object and array need the {\"type\": ...} form)" : "")
    }
}

/// Small checks shared by the schema readers.
private enum SchemaReader {
    static func object(_ json: JSONValue, at path: JSONPath, allowedKeys: Set<String>) throws(SchemaError) -> JSONObject {
        guard case .object(let object) = json else {
            throw SchemaError(path: path, message: "expected an object, found \(json.typeName)")
        }
        for key in object.keys where !allowedKeys.contains(key) {
            throw SchemaError(path: path.appending(key: key), message: "unknown key; allowed: \(allowedKeys.sorted().joined(separator: ", "))")
        }
        return object
    }

    static func flag(_ value: JSONValue?, at path: JSONPath) throws(SchemaError) -> Bool {
        guard let value else { return false }
        guard let flag = value.boolValue else { throw SchemaError(path: path, message: "expected true or false") }
        return flag
    }

    static func enumValues(_ value: JSONValue?, at path: JSONPath) throws(SchemaError) -> [String] {
        guard let array = value?.arrayValue, !array.isEmpty else {
            throw SchemaError(path: path, message: "an enum needs a non-empty array of raw values")
        }
        var values: [String] = []
        for (index, element) in array.enumerated() {
            guard let raw = element.stringValue else {
                throw SchemaError(path: path.appending(index: index), message: "enum raw values must be strings")
            }
            guard !values.contains(raw) else {
                throw SchemaError(path: path.appending(index: index), message: "duplicate enum value \"\(raw)\"")
            }
            values.append(raw)
        }
        return values
    }
}
