// Checking a payload used to parse it into a JSONValue tree: a fifth of the simulator's time under load, nearly
// all of it allocation. The simulator asks one question of a payload: does MarqueeCore's strict parser accept it,
// with a top level that is an object holding an `aps` object? This scanner answers it in one pass over the bytes,
// allocating nothing. It applies the parser's rules (RFC 8259 syntax, UTF-8 validated as `String(validating:)`
// does, no control characters in strings, no lone surrogate escape, no duplicate key, at most
// `JSONValue.maximumDepth` levels) and says `undecided` where matching the parser would need more than a scan
// (numbers that could overflow a double; keys with escapes or non-ASCII characters, which Swift compares after
// decoding and by canonical equivalence; very many keys in one object): the caller then parses. Tests compare its verdicts with the parser's on valid, invalid and mutated payloads.
import MarqueeCore

/// The scanner's answer about one payload.
public enum PayloadVerdict: Equatable {
    /// The parser accepts the payload, and its top level is an object whose `aps` is an object.
    case apsObject
    /// The parser refuses the payload, or accepts it without an `aps` object at its top level.
    case rejected
    /// The scanner cannot tell cheaply; parse the payload.
    case undecided
}

/// A single-pass, allocation-free check of a push payload; see the comment at the top of this file.
public struct PayloadScanner {
    /// Keys remembered at once for duplicate checks, over all open objects; beyond this the verdict is `undecided`.
    static let keyCapacity = 128
    /// A number longer than this (sign included) may overflow a double; so may any exponent: both are `undecided`.
    static let maximumPlainNumberLength = 300

    private enum Stop: Error {
        case invalid
        case undecided
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    /// Start and end offsets of the keys of the objects being scanned, innermost object last.
    private let keys: UnsafeMutableBufferPointer<(start: Int, end: Int)>
    private var keyCount = 0
    private var position = 0
    private var depth = 0

    private init(bytes: UnsafeBufferPointer<UInt8>, keys: UnsafeMutableBufferPointer<(start: Int, end: Int)>) {
        self.bytes = bytes
        self.keys = keys
    }

    /// The verdict on `payload`.
    public static func verdict(_ payload: [UInt8]) -> PayloadVerdict {
        payload.withUnsafeBufferPointer { bytes in
            withUnsafeTemporaryAllocation(of: (start: Int, end: Int).self, capacity: keyCapacity) { keys in
                var scanner = PayloadScanner(bytes: bytes, keys: keys)
                do throws(Stop) {
                    return try scanner.scanDocument() ? .apsObject : .rejected
                } catch .invalid {
                    return .rejected
                } catch {
                    return .undecided
                }
            }
        }
    }

    /// Scans the whole text; true when its top level is an object with an `aps` object.
    private mutating func scanDocument() throws(Stop) -> Bool {
        skipWhitespace()
        var apsIsObject = false
        if position < bytes.count, bytes[position] == UInt8(ascii: "{") {
            apsIsObject = try scanObject(findingAPS: true)
        } else {
            try scanValue()
        }
        skipWhitespace()
        guard position == bytes.count else { throw .invalid }
        return apsIsObject
    }

    private mutating func scanValue() throws(Stop) {
        guard position < bytes.count else { throw .invalid }
        switch bytes[position] {
        case UInt8(ascii: "{"): _ = try scanObject(findingAPS: false)
        case UInt8(ascii: "["): try scanArray()
        case UInt8(ascii: "\""): _ = try scanString()
        case UInt8(ascii: "t"): try expectLiteral("true")
        case UInt8(ascii: "f"): try expectLiteral("false")
        case UInt8(ascii: "n"): try expectLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try scanNumber()
        default: throw .invalid
        }
    }

    /// Scans an object from its `{`; with `findingAPS`, returns whether its `aps` member is an object.
    private mutating func scanObject(findingAPS: Bool) throws(Stop) -> Bool {
        try enterContainer()
        let firstKey = keyCount
        defer { keyCount = firstKey }
        var apsIsObject = false
        skipWhitespace()
        if try consumeIf(UInt8(ascii: "}")) {
            depth -= 1
            return false
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw .invalid }
            let start = position + 1
            // A key with an escape or a non-ASCII character could equal another written differently: the parser decides.
            guard try scanString() else { throw .undecided }
            let key = (start: start, end: position - 1)
            try remember(key, after: firstKey)
            skipWhitespace()
            try expect(UInt8(ascii: ":"))
            skipWhitespace()
            if findingAPS, isAPS(key) {
                apsIsObject = position < bytes.count && bytes[position] == UInt8(ascii: "{")
            }
            try scanValue()
            skipWhitespace()
            if try consumeIf(UInt8(ascii: "}")) { break }
            try expect(UInt8(ascii: ","))
        }
        depth -= 1
        return apsIsObject
    }

    private mutating func scanArray() throws(Stop) {
        try enterContainer()
        skipWhitespace()
        if try consumeIf(UInt8(ascii: "]")) {
            depth -= 1
            return
        }
        while true {
            skipWhitespace()
            try scanValue()
            skipWhitespace()
            if try consumeIf(UInt8(ascii: "]")) { break }
            try expect(UInt8(ascii: ","))
        }
        depth -= 1
    }

    /// As the parser: at most `JSONValue.maximumDepth` arrays and objects open at once.
    private mutating func enterContainer() throws(Stop) {
        guard depth < JSONValue.maximumDepth else { throw .invalid }
        depth += 1
        position += 1
    }

    /// Adds a key of the innermost object, refusing one already seen in it (the parser refuses duplicate keys).
    private mutating func remember(_ key: (start: Int, end: Int), after firstKey: Int) throws(Stop) {
        let length = key.end - key.start
        for index in firstKey..<keyCount {
            let other = keys[index]
            guard other.end - other.start == length else { continue }
            var offset = 0
            while offset < length, bytes[key.start + offset] == bytes[other.start + offset] { offset += 1 }
            if offset == length { throw .invalid }
        }
        guard keyCount < keys.count else { throw .undecided }
        keys[keyCount] = key
        keyCount += 1
    }

    private func isAPS(_ key: (start: Int, end: Int)) -> Bool {
        key.end - key.start == 3 && bytes[key.start] == UInt8(ascii: "a") && bytes[key.start + 1] == UInt8(ascii: "p")
            && bytes[key.start + 2] == UInt8(ascii: "s")
    }

    // MARK: - Strings

    /// Scans a string from its opening quote to just past its closing one; true when it is plain ASCII without escapes.
    private mutating func scanString() throws(Stop) -> Bool {
        position += 1
        var plain = true
        while true {
            // Runs of plain characters, the bulk of any payload, in a tight loop over locals.
            var index = position
            while index < bytes.count, case let byte = bytes[index], byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\""),
                byte != UInt8(ascii: "\\")
            {
                index += 1
            }
            position = index
            guard position < bytes.count else { throw .invalid }
            switch bytes[position] {
            case UInt8(ascii: "\""):
                position += 1
                return plain
            case UInt8(ascii: "\\"):
                plain = false
                try scanEscape()
            case 0x80...:
                plain = false
                try scanUTF8Sequence(lead: bytes[position])
            default:  // a control character
                throw .invalid
            }
        }
    }

    private mutating func scanEscape() throws(Stop) {
        position += 1
        guard position < bytes.count else { throw .invalid }
        let letter = bytes[position]
        position += 1
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            return
        case UInt8(ascii: "u"):
            let unit = try scanHex4()
            if (0xD800...0xDBFF).contains(unit) {
                guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                else { throw .invalid }
                position += 2
                guard (0xDC00...0xDFFF).contains(try scanHex4()) else { throw .invalid }
            } else if (0xDC00...0xDFFF).contains(unit) {
                throw .invalid
            }
        default:
            throw .invalid
        }
    }

    private mutating func scanHex4() throws(Stop) -> UInt16 {
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard position < bytes.count else { throw .invalid }
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw .invalid
            }
            value = value << 4 | UInt16(digit)
            position += 1
        }
        return value
    }

    /// One well-formed UTF-8 sequence from its lead byte (Unicode table 3-7: no overlong form, no surrogate,
    /// nothing above U+10FFFF), as `String(validating:)` checks it.
    private mutating func scanUTF8Sequence(lead: UInt8) throws(Stop) {
        let continuations: Int
        var second: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: continuations = 1
        case 0xE0:
            continuations = 2
            second = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF: continuations = 2
        case 0xED:
            continuations = 2
            second = 0x80...0x9F
        case 0xF0:
            continuations = 3
            second = 0x90...0xBF
        case 0xF1...0xF3: continuations = 3
        case 0xF4:
            continuations = 3
            second = 0x80...0x8F
        default: throw .invalid
        }
        guard position + continuations < bytes.count, second.contains(bytes[position + 1]) else { throw .invalid }
        for offset in stride(from: 2, through: continuations, by: 1) where !(0x80...0xBF).contains(bytes[position + offset]) {
            throw .invalid
        }
        position += continuations + 1
    }

    // MARK: - Numbers and literals

    /// RFC 8259 number syntax. The parser turns every number into an Int64 or a finite double and refuses one that
    /// overflows: a plain number of at most `maximumPlainNumberLength` characters never does; others are `undecided`.
    private mutating func scanNumber() throws(Stop) {
        let start = position
        _ = try consumeIf(UInt8(ascii: "-"))
        guard position < bytes.count, isDigit(bytes[position]) else { throw .invalid }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            skipDigits()
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else { throw .invalid }
            skipDigits()
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard position < bytes.count, isDigit(bytes[position]) else { throw .invalid }
            throw .undecided
        }
        // A digit straight after a leading zero ("01") is not a number.
        if position < bytes.count, isDigit(bytes[position]) { throw .invalid }
        guard position - start <= Self.maximumPlainNumberLength else { throw .undecided }
    }

    private mutating func skipDigits() {
        while position < bytes.count, isDigit(bytes[position]) { position += 1 }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private mutating func expectLiteral(_ literal: StaticString) throws(Stop) {
        let count = literal.utf8CodeUnitCount
        guard position + count <= bytes.count else { throw .invalid }
        let text = literal.utf8Start
        for offset in 0..<count where bytes[position + offset] != text[offset] { throw .invalid }
        position += count
    }

    // MARK: - Small steps

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func expect(_ byte: UInt8) throws(Stop) {
        guard try consumeIf(byte) else { throw .invalid }
    }

    /// Consumes `byte` if it is next; the end of the text is invalid (something must follow).
    private mutating func consumeIf(_ byte: UInt8) throws(Stop) -> Bool {
        guard position < bytes.count else { throw .invalid }
        guard bytes[position] == byte else { return false }
        position += 1
        return true
    }
}
