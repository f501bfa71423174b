// API keys: `mq_<id>_<secret>`. The id (12 hex characters) finds the stored row; the secret (32 random
// bytes, base64url) is never stored, only SHA-256(salt ‖ secret) with a per-key random salt, compared in
// constant time. The secret has 256 bits of entropy, so a slow password hash would add nothing.
import Crypto

/// What an API key may do. `admin` includes everything `ingest` and `tokens` may do.
public enum APIScope: String, Sendable, CaseIterable, Codable {
    /// Feed ingesters: updates and ends.
    case ingest
    /// App backends: token registration and event state.
    case tokens
    /// Operators: everything.
    case admin

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

    /// Parses `mq_<id>_<secret>`; nil when the text is not shaped like a Marquee key.
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "_", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "mq", parts[1].count == 12, Hex.decode(parts[1]) != nil,
              parts[2].count == 43, Base64URL.decode(parts[2]) != nil else { return nil }
        id = String(parts[1])
        secret = String(parts[2])
    }

    /// Parses an `Authorization: Bearer <key>` header value.
    public init?(authorization: String) {
        let prefix = "bearer "
        guard authorization.count > prefix.count, authorization.prefix(prefix.count).lowercased() == prefix else { return nil }
        self.init(authorization.dropFirst(prefix.count).trimmingPrefix(while: { $0 == " " }))
    }

    /// Whether this key matches a stored salt and hash, in constant time.
    public func matches(salt: [UInt8], hash: [UInt8]) -> Bool {
        constantTimeEquals(APIKeyText.hash(secret: secret, salt: salt), hash)
    }

    static func hash(secret: String, salt: [UInt8]) -> [UInt8] {
        SHA256.hash(salt + Array(secret.utf8))
    }
}
