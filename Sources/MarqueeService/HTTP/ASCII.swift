// Byte helpers for the request path's header checks (API keys, content types), which compare bytes
// instead of going through Foundation's string functions.

/// ASCII bytes.
enum ASCII {
    /// The byte with A to Z lowercased; any other byte as it is.
    static func lowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }
}
