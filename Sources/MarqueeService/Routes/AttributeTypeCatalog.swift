// Attribute types are read on hot paths (this API's GET, and every ingested update later), and a
// registered type never changes: another document under its name is refused (409). So lookups are cached
// briefly in memory. What the cache can make stale, for at most `cacheDuration` per instance: a type
// whose app was removed is still served, and a name just registered for a second app on another
// instance is not yet seen as ambiguous. Misses are never cached, so a new type is visible at once.
import MarqueeCore
import MarqueeStore
import Synchronization

/// Cached reads of attribute types.
public final class AttributeTypeCatalog: Sendable {
    public let repository: AttributeTypeRepository
    public let cacheDuration: Duration
    private struct Entry {
        let types: [StoredAttributeType]
        let fetched: ContinuousClock.Instant
    }
    /// Keyed by name and app id (nil: every app).
    private let cache = Mutex<[String: Entry]>([:])
    private static let maximumEntries = 10_000

    public init(repository: AttributeTypeRepository, cacheDuration: Duration = .seconds(10)) {
        self.repository = repository
        self.cacheDuration = cacheDuration
    }

    /// The type `name` of one app.
    public func find(name: String, appID: Int) async throws -> StoredAttributeType? {
        try await cached(name: name, appID: appID) {
            try await repository.find(name: name, appID: appID).map { [$0] } ?? []
        }.first
    }

    /// The type with this id (events refer to their type by id).
    public func find(id: Int) async throws -> StoredAttributeType? {
        try await cached(name: "#\(id)", appID: nil) { try await repository.find(id: id).map { [$0] } ?? [] }.first
    }

    /// The types named `name` over all apps.
    public func find(name: String) async throws -> [StoredAttributeType] {
        try await cached(name: name, appID: nil) { try await repository.find(name: name) }
    }

    /// Registers a type (never cached until read).
    public func register(_ type: ActivityType, appID: Int) async throws -> AttributeTypeRegistration {
        let outcome = try await repository.register(type, appID: appID)
        // A name known for one app may now be ambiguous: forget the all-apps entry.
        cache.withLock { _ = $0.removeValue(forKey: Self.key(type.name, nil)) }
        return outcome
    }

    /// Replaces a type's freshness policy; this instance's cached reads of it are forgotten (another instance
    /// serves the old one for up to `cacheDuration`).
    public func setPolicy(typeID: Int, _ settings: FreshnessSettings, apiKeyID: Int?) async throws -> StoredAttributeType? {
        let updated = try await repository.setPolicy(typeID: typeID, settings, apiKeyID: apiKeyID)
        cache.withLock { $0.removeAll() }
        return updated
    }

    private func cached(name: String, appID: Int?, load: () async throws -> [StoredAttributeType]) async throws -> [StoredAttributeType] {
        let key = Self.key(name, appID)
        let now = ContinuousClock.now
        if let entry = cache.withLock({ $0[key] }), now - entry.fetched < cacheDuration { return entry.types }
        let types = try await load()
        if !types.isEmpty {
            cache.withLock { cache in
                if cache.count >= Self.maximumEntries { cache.removeAll() }
                cache[key] = Entry(types: types, fetched: now)
            }
        }
        return types
    }

    private static func key(_ name: String, _ appID: Int?) -> String { "\(appID.map(String.init) ?? "*")/\(name)" }
}
