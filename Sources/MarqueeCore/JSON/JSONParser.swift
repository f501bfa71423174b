// A strict RFC 8259 parser. It exists because Marquee needs what JSONSerialization does not give on
// Linux: int vs double kept apart, key order kept, duplicate keys refused, error positions. It is safe
// on any input: nesting is capped (so recursion stays shallow), numbers and UTF-8 are validated, and
// every failure is a typed error with the byte offset, line and column.
//
// Choices beyond the RFC, all on the strict side:
// - a duplicate key in an object is refused (decoders disagree on which copy wins);
// - a byte order mark is refused, as is invalid UTF-8 and an escaped lone surrogate;
// - an integer that does not fit Int64 becomes a double; a number whose magnitude overflows a
//   double (1e400) is refused.

import Foundation

/// Why a JSON text was refused, and where.
public struct JSONParseError: Error, Equatable, CustomStringConvertible {
    /// What was wrong.
    public enum Reason: Equatable, Sendable {
        case unexpectedEnd
        case unexpectedCharacter(UInt8)
        case invalidNumber
        case numberOutOfRange
        case invalidEscape
        case loneSurrogate
        case controlCharacterInString
        case invalidUTF8
        case duplicateKey(String)
        case tooDeep(limit: Int)
        case trailingContent
    }

    public var reason: Reason
    /// Byte offset from the start of the text (0-based).
    public var offset: Int
    /// 1-based line and column (column counted in bytes).
    public var line: Int
    public var column: Int

    public var description: String {
        let what: String
        switch reason {
        case .unexpectedEnd: what = "unexpected end of JSON text"
        case .unexpectedCharacter(let byte):
            what =
                (0x21...0x7E).contains(byte)
                ? "unexpected character '\(Character(UnicodeScalar(byte)))'"
                : "unexpected byte 0x\(String(byte, radix: 16, uppercase: true))"
        case .invalidNumber: what = "invalid number"
        case .numberOutOfRange: what = "number out of range"
        case .invalidEscape: what = "invalid escape sequence"
        case .loneSurrogate: what = "unpaired UTF-16 surrogate in \\u escape"
        case .controlCharacterInString: what = "control character in string (escape it)"
        case .invalidUTF8: what = "invalid UTF-8 in string"
        case .duplicateKey(let key): what = "duplicate key \(JSONValue.string(key).jsonString)"
        case .tooDeep(let limit): what = "nesting deeper than \(limit) levels"
        case .trailingContent: what = "unexpected content after the JSON value"
        }
        return "\(what) at line \(line), column \(column) (byte \(offset))"
    }
}

extension JSONValue {
    /// The deepest nesting of arrays and objects the parser accepts.
    public static let maximumDepth = 64

    /// Parses a complete JSON text (RFC 8259, strictly; see JSONParser.swift for the choices made).
    public init(parsing bytes: [UInt8]) throws(JSONParseError) {
        var parser = JSONParser(bytes: bytes)
        self = try parser.parseDocument()
    }

    public init(parsing data: Data) throws(JSONParseError) {
        try self.init(parsing: [UInt8](data))
    }

    public init(parsing text: String) throws(JSONParseError) {
        try self.init(parsing: Array(text.utf8))
    }
}

struct JSONParser {
    let bytes: [UInt8]
    var position = 0
    var depth = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard position == bytes.count else { throw error(.trailingContent) }
        return value
    }

    // MARK: values

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard position < bytes.count else { throw error(.unexpectedEnd) }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case let byte: throw error(.unexpectedCharacter(byte))
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        var object = JSONObject()
        skipWhitespace()
        if try consumeIf(UInt8(ascii: "}")) {
            depth -= 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            let keyOffset = position
            guard position < bytes.count else { throw error(.unexpectedEnd) }
            guard bytes[position] == UInt8(ascii: "\"") else { throw error(.unexpectedCharacter(bytes[position])) }
            let key = try parseString()
            skipWhitespace()
            try expect(UInt8(ascii: ":"))
            skipWhitespace()
            let value = try parseValue()
            guard object.appendNew(key, value) else { throw error(.duplicateKey(key), at: keyOffset) }
            skipWhitespace()
            if try consumeIf(UInt8(ascii: "}")) { break }
            try expect(UInt8(ascii: ","))
        }
        depth -= 1
        return .object(object)
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        var array: [JSONValue] = []
        skipWhitespace()
        if try consumeIf(UInt8(ascii: "]")) {
            depth -= 1
            return .array(array)
        }
        while true {
            skipWhitespace()
            array.append(try parseValue())
            skipWhitespace()
            if try consumeIf(UInt8(ascii: "]")) { break }
            try expect(UInt8(ascii: ","))
        }
        depth -= 1
        return .array(array)
    }

    private mutating func enterContainer() throws(JSONParseError) {
        guard depth < JSONValue.maximumDepth else { throw error(.tooDeep(limit: JSONValue.maximumDepth)) }
        depth += 1
        position += 1
    }

    // MARK: strings

    /// Parses a string starting at its opening quote.
    private mutating func parseString() throws(JSONParseError) -> String {
        let start = position
        position += 1
        var buffer: [UInt8] = []
        var segmentStart = position
        while true {
            guard position < bytes.count else { throw error(.unexpectedEnd) }
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                let string: String?
                if buffer.isEmpty {
                    // Through a buffer pointer: validating an ArraySlice takes the slow generic path.
                    string = bytes.withUnsafeBufferPointer { all in
                        String(validating: UnsafeBufferPointer(rebasing: all[segmentStart..<position]), as: UTF8.self)
                    }
                } else {
                    buffer.append(contentsOf: bytes[segmentStart..<position])
                    string = String(validating: buffer, as: UTF8.self)
                }
                position += 1
                guard let string else { throw error(.invalidUTF8, at: start) }
                return string
            case UInt8(ascii: "\\"):
                buffer.append(contentsOf: bytes[segmentStart..<position])
                try parseEscape(into: &buffer)
                segmentStart = position
            case 0..<0x20:
                throw error(.controlCharacterInString)
            default:
                position += 1
            }
        }
    }

    private mutating func parseEscape(into buffer: inout [UInt8]) throws(JSONParseError) {
        let escapeStart = position
        position += 1
        guard position < bytes.count else { throw error(.unexpectedEnd) }
        let letter = bytes[position]
        position += 1
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): buffer.append(letter)
        case UInt8(ascii: "b"): buffer.append(0x08)
        case UInt8(ascii: "f"): buffer.append(0x0C)
        case UInt8(ascii: "n"): buffer.append(0x0A)
        case UInt8(ascii: "r"): buffer.append(0x0D)
        case UInt8(ascii: "t"): buffer.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try parseHex4())
            if (0xD800...0xDBFF).contains(scalar) {
                guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                else { throw error(.loneSurrogate, at: escapeStart) }
                position += 2
                let low = UInt32(try parseHex4())
                guard (0xDC00...0xDFFF).contains(low) else { throw error(.loneSurrogate, at: escapeStart) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw error(.loneSurrogate, at: escapeStart)
            }
            // Surrogates were ruled out above, so every remaining value is a valid scalar.
            UTF8.encode(Unicode.Scalar(scalar)!) { buffer.append($0) }
        default:
            throw error(.invalidEscape, at: escapeStart)
        }
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt16 {
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard position < bytes.count else { throw error(.unexpectedEnd) }
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error(.invalidEscape)
            }
            value = value << 4 | UInt16(digit)
            position += 1
        }
        return value
    }

    // MARK: numbers

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = position
        _ = try consumeIf(UInt8(ascii: "-"))
        // Integer part: 0, or a non-zero digit followed by digits.
        guard position < bytes.count, isDigit(bytes[position]) else { throw error(.invalidNumber, at: start) }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            skipDigits()
        }
        var isInteger = true
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else { throw error(.invalidNumber, at: start) }
            skipDigits()
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard position < bytes.count, isDigit(bytes[position]) else { throw error(.invalidNumber, at: start) }
            skipDigits()
        }
        // A digit straight after a leading zero ("01") is not a number.
        if position < bytes.count, isDigit(bytes[position]) { throw error(.invalidNumber, at: start) }

        // Up to 18 digits always fit an Int64: no text needed.
        let negative = bytes[start] == UInt8(ascii: "-")
        if isInteger, position - start - (negative ? 1 : 0) <= 18 {
            var magnitude: Int64 = 0
            for byte in bytes[(negative ? start + 1 : start)..<position] {
                magnitude = magnitude * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return .int(negative ? -magnitude : magnitude)
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .int(integer) }
        guard let double = Double(text), double.isFinite else { throw error(.numberOutOfRange, at: start) }
        return .double(double)
    }

    private mutating func skipDigits() {
        while position < bytes.count, isDigit(bytes[position]) { position += 1 }
    }

    private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

    // MARK: small steps

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func expectLiteral(_ literal: String) throws(JSONParseError) {
        let start = position
        for expected in literal.utf8 {
            guard position < bytes.count else { throw error(.unexpectedEnd) }
            guard bytes[position] == expected else { throw error(.unexpectedCharacter(bytes[start]), at: start) }
            position += 1
        }
    }

    private mutating func expect(_ byte: UInt8) throws(JSONParseError) {
        guard try consumeIf(byte) else { throw error(.unexpectedCharacter(bytes[position])) }
    }

    /// Consumes `byte` if it is next; throws at the end of input.
    private mutating func consumeIf(_ byte: UInt8) throws(JSONParseError) -> Bool {
        guard position < bytes.count else { throw error(.unexpectedEnd) }
        guard bytes[position] == byte else { return false }
        position += 1
        return true
    }

    private func error(_ reason: JSONParseError.Reason, at offset: Int? = nil) -> JSONParseError {
        let offset = min(offset ?? position, bytes.count)
        var line = 1
        var lineStart = 0
        for index in 0..<offset where bytes[index] == 0x0A {
            line += 1
            lineStart = index + 1
        }
        return JSONParseError(reason: reason, offset: offset, line: line, column: offset - lineStart + 1)
    }
}
