// Values cross libpq in PostgreSQL's text format (bytea parameters go as raw binary). Text is what
// psql shows, needs no per-type binary layouts, and is exact for the types used here: every session
// is set to TimeZone UTC and ISO DateStyle, timestamptz travels with microseconds, uuid as its
// canonical string, and floats with extra_float_digits = 3 so they round-trip.
import Foundation

/// One bind parameter: NULL, a value in PostgreSQL text format, or raw bytes for bytea.
public struct PostgresData: Sendable, Equatable {
    enum Storage: Sendable, Equatable {
        case null
        case text(String)
        /// Raw bytes, sent as a binary parameter (bytea).
        case bytes([UInt8])
        // Values kept unformatted, so COPY writes their text straight into its buffer.
        case integer(Int64)
        case bool(Bool)
        case timestamp(microseconds: Int64)
    }

    let storage: Storage
    /// The parameter's type OID; 0 lets the server infer it from the statement.
    let oid: UInt32

    /// SQL NULL.
    public static let null = PostgresData(storage: .null, oid: 0)

    /// A value in PostgreSQL's text format whose type the server infers from the statement.
    public init(text: String) {
        self.init(storage: .text(text), oid: 0)
    }

    init(storage: Storage, oid: UInt32) {
        self.storage = storage
        self.oid = oid
    }

    init(text: String, oid: UInt32) {
        self.init(storage: .text(text), oid: oid)
    }

    /// Appends the text form of a non-NULL, non-bytes value (no COPY escaping).
    func appendText(to buffer: inout [UInt8]) {
        switch storage {
        case .null, .bytes: break
        case .text(let text): buffer.append(contentsOf: text.utf8)
        case .integer(let value): appendDecimal(value, to: &buffer)
        case .bool(let value): buffer.append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        case .timestamp(let micros): appendTimestamp(microseconds: micros, to: &buffer)
        }
    }
}

/// Appends the decimal digits of `value`, without allocating a String.
func appendDecimal(_ value: Int64, to buffer: inout [UInt8]) {
    if value < 0 { buffer.append(UInt8(ascii: "-")) }
    var magnitude = value.magnitude
    var digits:
        (
            UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
            UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
        ) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    var count = 0
    withUnsafeMutableBytes(of: &digits) { scratch in
        repeat {
            scratch[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
            count += 1
        } while magnitude > 0
        for index in stride(from: count - 1, through: 0, by: -1) { buffer.append(scratch[index]) }
    }
}

/// PostgreSQL type OIDs the module binds and names in errors.
enum PostgresOID {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let json: UInt32 = 114
    static let float4: UInt32 = 700
    static let float8: UInt32 = 701
    static let textArray: UInt32 = 1009
    static let varchar: UInt32 = 1043
    static let timestamp: UInt32 = 1114
    static let timestamptz: UInt32 = 1184
    static let numeric: UInt32 = 1700
    static let uuid: UInt32 = 2950
    static let jsonb: UInt32 = 3802

    static func name(_ oid: UInt32) -> String {
        switch oid {
        case bool: "bool"
        case bytea: "bytea"
        case int8: "int8"
        case int2: "int2"
        case int4: "int4"
        case text: "text"
        case json: "json"
        case float4: "float4"
        case float8: "float8"
        case textArray: "text[]"
        case varchar: "varchar"
        case timestamp: "timestamp"
        case timestamptz: "timestamptz"
        case numeric: "numeric"
        case uuid: "uuid"
        case jsonb: "jsonb"
        default: "oid \(oid)"
        }
    }
}

/// A Swift value that can be bound as a `$n` parameter.
public protocol PostgresEncodable: Sendable {
    /// The value as a bind parameter.
    var postgresData: PostgresData { get }
    /// The type OID its values are bound with (0: the server infers it from the statement). A nil of an
    /// optional is bound as NULL of this type, so a statement run with a value and with nil is one
    /// prepared statement on a connection, not two (each costs PostgreSQL a parse and plan per backend).
    static var postgresType: UInt32 { get }
}

extension PostgresEncodable {
    public static var postgresType: UInt32 { 0 }
}

/// A Swift value that can be decoded from a column in PostgreSQL's text format.
public protocol PostgresDecodable: Sendable {
    /// Parses the text form; nil when the text is not a valid value of this type.
    init?(postgresText text: String)
    /// The value that stands for SQL NULL, or nil when the type cannot hold NULL (non-optionals).
    static var postgresNull: Self? { get }
}

extension PostgresDecodable {
    public static var postgresNull: Self? { nil }
}

/// A type that is both bound and decoded.
public typealias PostgresCodable = PostgresEncodable & PostgresDecodable

// MARK: - Optionals and raw-representable enums

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresData: PostgresData { self?.postgresData ?? PostgresData(storage: .null, oid: Wrapped.postgresType) }
    public static var postgresType: UInt32 { Wrapped.postgresType }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init?(postgresText text: String) {
        guard let value = Wrapped(postgresText: text) else { return nil }
        self = .some(value)
    }
    public static var postgresNull: Self? { .some(.none) }
}

extension PostgresEncodable where Self: RawRepresentable, RawValue: PostgresEncodable {
    public var postgresData: PostgresData { rawValue.postgresData }
    public static var postgresType: UInt32 { RawValue.postgresType }
}

extension PostgresDecodable where Self: RawRepresentable, RawValue: PostgresDecodable {
    public init?(postgresText text: String) {
        guard let raw = RawValue(postgresText: text) else { return nil }
        self.init(rawValue: raw)
    }
}

// MARK: - Text and numbers

extension String: PostgresCodable {
    public var postgresData: PostgresData { PostgresData(text: self) }
    public init?(postgresText text: String) { self = text }
}

extension Int: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.int8 }
    public var postgresData: PostgresData { PostgresData(storage: .integer(Int64(self)), oid: Self.postgresType) }
    public init?(postgresText text: String) { self.init(text) }
}

extension Int64: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.int8 }
    public var postgresData: PostgresData { PostgresData(storage: .integer(self), oid: Self.postgresType) }
    public init?(postgresText text: String) { self.init(text) }
}

extension Int32: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.int4 }
    public var postgresData: PostgresData { PostgresData(storage: .integer(Int64(self)), oid: Self.postgresType) }
    public init?(postgresText text: String) { self.init(text) }
}

extension Int16: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.int2 }
    public var postgresData: PostgresData { PostgresData(storage: .integer(Int64(self)), oid: Self.postgresType) }
    public init?(postgresText text: String) { self.init(text) }
}

extension Bool: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.bool }
    public var postgresData: PostgresData { PostgresData(storage: .bool(self), oid: Self.postgresType) }
    public init?(postgresText text: String) {
        switch text {
        case "t", "true": self = true
        case "f", "false": self = false
        default: return nil
        }
    }
}

extension Double: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.float8 }
    public var postgresData: PostgresData {
        let text: String
        if isNaN {
            text = "NaN"
        } else if self == .infinity {
            text = "Infinity"
        } else if self == -.infinity {
            text = "-Infinity"
        } else {
            text = description
        }
        return PostgresData(text: text, oid: Self.postgresType)
    }
    public init?(postgresText text: String) {
        switch text {
        case "NaN": self = .nan
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        default: self.init(text)
        }
    }
}

// MARK: - bytea, uuid, jsonb

extension Data: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.bytea }
    /// bytea travels as a binary parameter: no escaping, no hex doubling.
    public var postgresData: PostgresData { PostgresData(storage: .bytes([UInt8](self)), oid: Self.postgresType) }

    /// Parses bytea's hex output (`\x0a1b...`), the default since PostgreSQL 9.0.
    public init?(postgresText text: String) {
        var utf8 = text.utf8[...]
        guard utf8.starts(with: [UInt8(ascii: "\\"), UInt8(ascii: "x")]) else { return nil }
        utf8 = utf8.dropFirst(2)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count / 2)
        var high: UInt8?
        for char in utf8 {
            guard let nibble = hexValue(char) else { return nil }
            if let h = high {
                bytes.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        self.init(bytes)
    }
}

private func hexValue(_ char: UInt8) -> UInt8? {
    switch char {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): char - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): char - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): char - UInt8(ascii: "A") + 10
    default: nil
    }
}

extension UUID: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.uuid }
    public var postgresData: PostgresData { PostgresData(text: uuidString.lowercased(), oid: Self.postgresType) }
    public init?(postgresText text: String) { self.init(uuidString: text) }
}

/// A json or jsonb value, kept as its text; bound as jsonb.
public struct PostgresJSON: PostgresCodable, Hashable {
    /// The JSON text.
    public var text: String

    public init(_ text: String) { self.text = text }

    public static var postgresType: UInt32 { PostgresOID.jsonb }

    /// Encodes a value with `encoder` (a default JSONEncoder unless given).
    public init<T: Encodable>(encoding value: T, encoder: JSONEncoder = JSONEncoder()) throws {
        self.text = String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// Decodes the JSON text into `type`.
    public func decode<T: Decodable>(_ type: T.Type, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: Data(text.utf8))
    }

    public var postgresData: PostgresData { PostgresData(text: text, oid: Self.postgresType) }
    public init?(postgresText text: String) { self.text = text }
}

// MARK: - text[]

extension Array: PostgresEncodable where Element == String {
    public static var postgresType: UInt32 { PostgresOID.textArray }
    /// Bound as text[]: every element double-quoted, with `"` and `\` escaped.
    public var postgresData: PostgresData {
        var text = "{"
        for (index, element) in enumerated() {
            if index > 0 { text += "," }
            text += "\""
            if element.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                for char in element.unicodeScalars {
                    if char == "\"" || char == "\\" { text += "\\" }
                    text.unicodeScalars.append(char)
                }
            } else {
                text += element
            }
            text += "\""
        }
        text += "}"
        return PostgresData(text: text, oid: Self.postgresType)
    }
}

extension Array: PostgresDecodable where Element == String {
    /// Parses a one-dimensional text[] in array output syntax; NULL elements are not accepted.
    public init?(postgresText text: String) {
        guard let elements = parseTextArray(text) else { return nil }
        self = elements
    }
}

/// Parses `{a,"b c",NULL}`; returns nil for NULL elements, nested arrays or malformed input.
func parseTextArray(_ text: String) -> [String]? {
    var scalars = text.unicodeScalars[...]
    if scalars.first == "[" {  // explicit bounds such as [0:1]={a,b}
        guard let equals = scalars.firstIndex(of: "=") else { return nil }
        scalars = scalars[scalars.index(after: equals)...]
    }
    guard scalars.first == "{", scalars.last == "}" else { return nil }
    scalars = scalars.dropFirst().dropLast()
    var result: [String] = []
    if scalars.isEmpty { return result }
    var index = scalars.startIndex
    while true {
        var element = String.UnicodeScalarView()
        if index < scalars.endIndex, scalars[index] == "\"" {
            index = scalars.index(after: index)
            var closed = false
            while index < scalars.endIndex {
                let char = scalars[index]
                index = scalars.index(after: index)
                if char == "\\" {
                    guard index < scalars.endIndex else { return nil }
                    element.append(scalars[index])
                    index = scalars.index(after: index)
                } else if char == "\"" {
                    closed = true
                    break
                } else {
                    element.append(char)
                }
            }
            guard closed else { return nil }
        } else {
            while index < scalars.endIndex, scalars[index] != "," {
                let char = scalars[index]
                if char == "{" || char == "\"" { return nil }
                if char == "\\" {
                    index = scalars.index(after: index)
                    guard index < scalars.endIndex else { return nil }
                }
                element.append(scalars[index])
                index = scalars.index(after: index)
            }
            if String(element).uppercased() == "NULL" { return nil }
        }
        result.append(String(element))
        if index == scalars.endIndex { return result }
        guard scalars[index] == "," else { return nil }
        index = scalars.index(after: index)
    }
}

// MARK: - Columns of a batch

/// One column of a batched statement's rows, bound as a one-dimensional array in text form and read back with
/// `unnest` (`unnest($1::bigint[], $2::text[])`): PostgreSQL parses each element with its column's own type, where a
/// `jsonb_to_recordset` input is encoded as JSON here and parsed as JSON there, every row. Bound as `text[]`, so
/// the statement casts it to the column's type.
public struct PostgresColumn: PostgresEncodable {
    let text: String
    public static var postgresType: UInt32 { PostgresOID.textArray }
    public var postgresData: PostgresData { PostgresData(text: text, oid: Self.postgresType) }

    /// Integers (`::bigint[]`, `::integer[]`); nil elements are NULL.
    public init(_ values: some Collection<Int?>) {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(2 + values.count * 8)
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            if let value { appendDecimal(Int64(value), to: &bytes) } else { bytes.append(contentsOf: "NULL".utf8) }
        }
        bytes.append(UInt8(ascii: "}"))
        text = String(decoding: bytes, as: UTF8.self)
    }

    /// Integers, none NULL.
    public init(_ values: some Collection<Int>) { self.init(values.lazy.map { Optional($0) }) }

    /// Text (`::text[]`, or cast to another type whose text form it holds: `::uuid[]`, `::float8[]`); nil elements
    /// are NULL. Every element is quoted, with `"` and `\` escaped.
    public init(_ values: some Collection<String?>) {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            guard let value else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            bytes.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
                bytes.append(byte)
            }
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "}"))
        text = String(decoding: bytes, as: UTF8.self)
    }

    /// Text, none NULL.
    public init(_ values: some Collection<String>) { self.init(values.lazy.map { Optional($0) }) }

    /// Floating-point numbers (`::float8[]`), exact as text; nil elements are NULL.
    public init(_ values: some Collection<Double?>) { self.init(values.lazy.map { $0.map { "\($0)" } }) }
}
