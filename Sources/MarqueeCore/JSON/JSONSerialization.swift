// Compact, deterministic JSON output: no whitespace, object keys in insertion order, strings as
// UTF-8 with only the escapes JSON requires, doubles in Swift's shortest round-trip form ("3.0",
// "0.1", "1e+20"), so an int stays an int and a double a double after a round trip.
// A non-finite double (which the parser never produces) is written as null.

import Foundation

extension JSONValue {
    /// The compact JSON text as UTF-8 bytes.
    public var jsonBytes: [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(64)
        write(into: &output)
        return output
    }

    /// The compact JSON text.
    public var jsonString: String { String(decoding: jsonBytes, as: UTF8.self) }

    /// The same value with every object's keys sorted: two texts of one JSON value (other whitespace, another
    /// key order) have the same `sortingKeys().jsonBytes`. Numbers stay as parsed (`1` and `1.0` differ).
    public func sortingKeys() -> JSONValue {
        switch self {
        case .array(let elements):
            return .array(elements.map { $0.sortingKeys() })
        case .object(let object):
            var sorted = JSONObject()
            for key in object.keys.sorted() { sorted[key] = object[key]?.sortingKeys() }
            return .object(sorted)
        default:
            return self
        }
    }

    /// The compact JSON text as Data.
    public var jsonData: Data { Data(jsonBytes) }

    /// The size in bytes of the compact JSON text: what APNs measures against its limits.
    public var byteCount: Int { jsonBytes.count }

    func write(into output: inout [UInt8]) {
        switch self {
        case .null:
            output.append(contentsOf: "null".utf8)
        case .bool(let value):
            output.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value):
            output.append(contentsOf: String(value).utf8)
        case .double(let value):
            output.append(contentsOf: (value.isFinite ? value.description : "null").utf8)
        case .string(let value):
            Self.writeString(value, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                element.write(into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            for (index, member) in object.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, into: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(into: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func writeString(_ string: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0..<0x20:
                output.append(contentsOf: "\\u00".utf8)
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0xF)])
            default:
                output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
