// The ids the simulator reads and issues: request ids (canonical UUIDs), channel ids (base64) and the ids it
// generates for its answers. Request ids are generated on every answer, so they come from SplitMix64 over a
// counter seeded once from the system generator: no system call per id (Foundation's `UUID()` on Linux reads
// /dev/urandom on every call).
import Synchronization

enum SimulatorIdentifiers {
    /// A canonical UUID, 8-4-4-4-12 hexadecimal digits (`apns-request-id`, `apns-id`). Apple writes them lowercase;
    /// as RFC 4122 says of UUID text, either case is read.
    static func isCanonicalUUID(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == 36 else { return false }
        var index = 0
        for byte in utf8 {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else if !isHexDigit(byte) {
                return false
            }
            index += 1
        }
        return true
    }

    /// Standard base64 with its padding, as APNs issues channel ids ("A base64-encoded string"): the alphabet,
    /// a length that is a multiple of 4, and `=` only at the end (at most two).
    static func isBase64(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count % 4 == 0 else { return false }
        var padding = 0
        for byte in utf8 {
            if byte == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0, isBase64Letter(byte) else { return false }
        }
        return padding <= 2
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte | 0x20)
    }

    private static func isBase64Letter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "+"), UInt8(ascii: "/"):
            true
        default: false
        }
    }

    /// A new random (version 4) UUID in lowercase, for answers whose request gave none and for `apns-unique-id`.
    static func randomUUID() -> String {
        let halves = (next(), next())
        // One allocation: the 36 characters are written straight into the string's storage.
        return String(unsafeUninitializedCapacity: 36) { buffer in
            withUnsafeBytes(of: halves) { raw in
                let digits: StaticString = "0123456789abcdef"
                var out = 0
                for index in 0..<16 {
                    var byte = raw[index]
                    if index == 6 { byte = (byte & 0x0F) | 0x40 }
                    if index == 8 { byte = (byte & 0x3F) | 0x80 }
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        buffer[out] = UInt8(ascii: "-")
                        out += 1
                    }
                    buffer[out] = digits.utf8Start[Int(byte >> 4)]
                    buffer[out + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    out += 2
                }
                return out
            }
        }
    }

    private static let counter = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    /// SplitMix64 over the process-wide counter: distinct counter values give distinct outputs.
    private static func next() -> UInt64 {
        var value = counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
