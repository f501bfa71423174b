// API keys: `mq_<id>_<secret>`. The id (12 hex characters) finds the stored row; the secret (32 random
// bytes, base64url) is never stored, only SHA-256(salt ‖ secret) with a per-key random salt, compared in
// constant time. The secret has 256 bits of entropy, so a slow password hash would add nothing.
import Crypto

/// What an API key may do. `admin` includes everything `ingest`, `tokens` and `status` may do.
public enum APIScope: String, Sendable, CaseIterable, Codable {
    /// Feed ingesters: updates and ends.
    case ingest
    /// App backends: token registration and event state.
    case tokens
    /// Operators: everything.
    case admin
    /// The status page: reads `GET /v1/status` and `GET /v1/status/board`, changes nothing.
    case status

    /// Whether a key with this scope may use a route that needs `required`.
    public func permits(_ required: APIScope) -> Bool {
        self == .admin || self == required
    }
}

/// A freshly made key: the text is shown to the operator once; the rest is stored.
public struct NewAPIKey: Sendable {
    /// The whole key, `mq_<id>_<secret>`: print once, never store or log.
    public let text: String
    public let id: String
    public let salt: [UInt8]
    public let hash: [UInt8]

    /// Makes a random key.
    public static func generate() -> NewAPIKey {
        let id = Hex.encode(SecureRandom.bytes(6))
        let secret = Base64URL.encode(SecureRandom.bytes(32))
        let salt = SecureRandom.bytes(16)
        return NewAPIKey(text: "mq_\(id)_\(secret)", id: id, salt: salt, hash: APIKeyText.hash(secret: secret, salt: salt))
    }
}

/// A key as presented by a client, split into its id and secret.
public struct APIKeyText: Sendable {
    public let id: String
    let secret: String

    /// Parses `mq_<id>_<secret>`; nil when the text is not shaped like a Marquee key: `mq_`, 12 hexadecimal
    /// digits, `_`, and 43 base64url characters (32 bytes). Checked byte by byte, on every request, so
    /// nothing is decoded: the secret is only ever hashed.
    public init?(_ text: some StringProtocol) {
        let bytes = Array(text.utf8)
        guard bytes.count == 59, bytes[0] == UInt8(ascii: "m"), bytes[1] == UInt8(ascii: "q"), bytes[2] == UInt8(ascii: "_"),
            bytes[15] == UInt8(ascii: "_"), bytes[3..<15].allSatisfy(Self.isHexDigit),
            bytes[16...].allSatisfy(Self.isBase64URLCharacter)
        else { return nil }
        id = String(decoding: bytes[3..<15], as: UTF8.self)
        secret = String(decoding: bytes[16...], as: UTF8.self)
    }

    /// Parses an `Authorization: Bearer <key>` header value (the scheme in any case).
    public init?(authorization: String) {
        let scheme = Array("bearer ".utf8)
        let utf8 = authorization.utf8
        guard utf8.count > scheme.count,
            zip(utf8, scheme).allSatisfy({ byte, expected in ASCII.lowercased(byte) == expected })
        else { return nil }
        self.init(Substring(authorization.utf8.dropFirst(scheme.count).drop { $0 == UInt8(ascii: " ") }))
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(ASCII.lowercased(byte))
    }

    private static func isBase64URLCharacter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    /// Whether this key matches a stored salt and hash, in constant time.
    public func matches(salt: [UInt8], hash: [UInt8]) -> Bool {
        constantTimeEquals(APIKeyText.hash(secret: secret, salt: salt), hash)
    }

    static func hash(secret: String, salt: [UInt8]) -> [UInt8] {
        SHA256.hash(salt + Array(secret.utf8))
    }
}
