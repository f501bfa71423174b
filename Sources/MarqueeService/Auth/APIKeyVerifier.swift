// Checks `Authorization: Bearer mq_<id>_<secret>` against api_keys. Rows are cached by key id for a short
// time (10 s by default), so a hot route does not query the database per request; the secret is still
// hashed and compared in constant time on every request. The price: a key revoked with `marquee key
// revoke` keeps working for at most the cache duration on each instance.
import Foundation
import MarqueeStore
import Synchronization

/// A key that passed verification.
public struct VerifiedAPIKey: Sendable, Equatable {
    /// The public key id.
    public let keyID: String
    public let scopes: [APIScope]
    /// nil: the key works for every app.
    public let appID: Int?
    /// The row id in `api_keys` (what idempotency keys and updates refer to); nil for keys not stored there.
    public let databaseID: Int?

    public init(keyID: String, scopes: [APIScope], appID: Int?, databaseID: Int? = nil) {
        self.keyID = keyID
        self.scopes = scopes
        self.appID = appID
        self.databaseID = databaseID
    }

    /// Whether the key may use a route that needs `scope`.
    public func permits(_ scope: APIScope) -> Bool { scopes.contains { $0.permits(scope) } }
}

/// Where the verifier finds stored keys (the database, or a table in tests).
public protocol APIKeyLookup: Sendable {
    func key(id: String) async throws -> StoredAPIKey?
    /// Records a use; failures are ignored.
    func touch(id: String) async
}

extension APIKeyRepository: APIKeyLookup {
    public func key(id: String) async throws -> StoredAPIKey? { try await find(keyID: id) }
    public func touch(id: String) async { try? await touch(keyID: id) }
}

/// Verifies API keys with a short-lived cache of stored rows.
public final class APIKeyVerifier: Sendable {
    /// How long a stored row is trusted: the longest a revoked key keeps working.
    public let cacheDuration: Duration
    private let lookup: any APIKeyLookup
    private let cache = Mutex<[String: (row: StoredAPIKey, fetched: ContinuousClock.Instant)]>([:])
    private static let maximumCachedKeys = 10_000

    public init(lookup: any APIKeyLookup, cacheDuration: Duration = .seconds(10)) {
        self.lookup = lookup
        self.cacheDuration = cacheDuration
    }

    /// The verified key, or `APIError.unauthorized` for a missing, malformed, unknown, revoked or wrong key.
    public func verify(authorization: String?) async throws -> VerifiedAPIKey {
        guard let authorization, let presented = APIKeyText(authorization: authorization) else { throw APIError.unauthorized }
        let now = ContinuousClock.now
        let cached = cache.withLock { cache in cache[presented.id].flatMap { now - $0.fetched < cacheDuration ? $0 : nil } }
        let row: StoredAPIKey?
        if let cached {
            row = cached.row
        } else {
            row = try await lookup.key(id: presented.id)
            // Only stored rows are cached: made-up ids cannot push real keys out, and a new key works at once.
            if let row {
                cache.withLock { cache in
                    if cache.count >= Self.maximumCachedKeys { cache.removeAll() }
                    cache[presented.id] = (row, now)
                }
            }
            if let row, !row.isRevoked, presented.matches(salt: row.salt, hash: row.hash) { await lookup.touch(id: presented.id) }
        }
        guard let row, !row.isRevoked, presented.matches(salt: row.salt, hash: row.hash) else { throw APIError.unauthorized }
        return VerifiedAPIKey(
            keyID: row.keyID, scopes: row.scopes.compactMap(APIScope.init(rawValue:)), appID: row.appID,
            databaseID: row.id)
    }

    /// Forgets every cached row (the next request of each key reads the database).
    public func clearCache() { cache.withLock { $0.removeAll() } }
}
