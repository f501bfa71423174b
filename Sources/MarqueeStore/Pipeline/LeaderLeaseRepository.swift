// Leader election by a lease row with an expiry and a fencing number. A lease is just a row, so it
// survives connection loss (no advisory lock tied to a session) and a dead leader's lease expires on
// its own. Every takeover raises the fencing number; leader writes go through `fenced`, which checks
// the caller still holds the lease with its number and keeps the row share-locked until commit, so
// a takeover cannot slip in between the check and the write.
import Foundation
import Postgres

/// A lease held by this process: present its fencing number with every leader write.
public struct LeaseGrant: Sendable, Equatable {
    public var name: String
    public var holder: String
    /// Raised on every takeover; a write carrying an older number is refused.
    public var fencing: Int64
    public var expiresAt: Date
}

/// Named leader leases: acquire, renew, release, and writes fenced by the lease.
public struct LeaderLeaseRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Takes the lease if it is free, expired, or already ours (then it is renewed, same fencing);
    /// returns nil while another holder's lease runs. A takeover raises the fencing number.
    public func acquire(name: String, holder: String, duration: TimeInterval, now: Date? = nil) async throws -> LeaseGrant? {
        let rows = try await pool.query(
            """
            INSERT INTO leader_leases AS l (name, holder, fencing, acquired_at, renewed_at, expires_at)
            VALUES (\(name), \(holder), 1, coalesce(\(now), now()), coalesce(\(now), now()),
                    coalesce(\(now), now()) + make_interval(secs => \(duration)))
            ON CONFLICT (name) DO UPDATE SET
                holder = EXCLUDED.holder,
                fencing = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.acquired_at
                               THEN l.fencing ELSE l.fencing + 1 END,
                acquired_at = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.acquired_at
                                   THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
                renewed_at = EXCLUDED.renewed_at,
                expires_at = EXCLUDED.expires_at
            WHERE l.expires_at <= EXCLUDED.acquired_at OR l.holder = EXCLUDED.holder
            RETURNING fencing, expires_at
            """)
        guard let row = rows.first else { return nil }
        return LeaseGrant(
            name: name, holder: holder, fencing: try row.decode(Int64.self, column: "fencing"),
            expiresAt: try row.decode(Date.self, column: "expires_at"))
    }

    /// Extends a lease still held with this fencing number; nil when it was lost (stop leader work).
    public func renew(_ grant: LeaseGrant, duration: TimeInterval, now: Date? = nil) async throws -> LeaseGrant? {
        let rows = try await pool.query(
            """
            UPDATE leader_leases SET renewed_at = coalesce(\(now), now()),
                expires_at = coalesce(\(now), now()) + make_interval(secs => \(duration))
            WHERE name = \(grant.name) AND holder = \(grant.holder) AND fencing = \(grant.fencing)
              AND expires_at > coalesce(\(now), now())
            RETURNING expires_at
            """)
        guard let row = rows.first else { return nil }
        var renewed = grant
        renewed.expiresAt = try row.decode(Date.self, column: "expires_at")
        return renewed
    }

    /// Gives the lease up (shutdown): it expires now, so another instance takes it at once. The row
    /// stays, so fencing numbers keep increasing.
    public func release(_ grant: LeaseGrant) async throws {
        try await pool.execute(
            """
            UPDATE leader_leases SET expires_at = greatest(acquired_at, now())
            WHERE name = \(grant.name) AND holder = \(grant.holder) AND fencing = \(grant.fencing)
            """)
    }

    /// The current lease row, if any: (holder, fencing, expiry).
    public func current(name: String) async throws -> LeaseGrant? {
        try await pool.query("SELECT holder, fencing, expires_at FROM leader_leases WHERE name = \(name)").first.map { row in
            LeaseGrant(
                name: name, holder: try row.decode(String.self, column: "holder"),
                fencing: try row.decode(Int64.self, column: "fencing"),
                expiresAt: try row.decode(Date.self, column: "expires_at"))
        }
    }

    /// Runs `body` in a transaction only while `grant` still holds (same holder and fencing, not
    /// expired at `now`); the lease row stays share-locked until commit, so no takeover interleaves.
    /// Throws `leaseNotHeld` otherwise, having run nothing.
    public func fenced<T: Sendable>(
        _ grant: LeaseGrant, now: Date? = nil,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await pool.withTransaction { tx in
            try await Self.requireHeld(grant, now: now, on: tx)
            return try await body(tx)
        }
    }

    /// Throws `leaseNotHeld` unless `grant` still holds; share-locks the lease row until the
    /// transaction ends. Repositories call it first in their own transaction for a `fence:` argument.
    static func requireHeld(_ grant: LeaseGrant?, now: Date?, on tx: PostgresConnection) async throws {
        guard let grant else { return }
        let held = try await tx.query(
            """
            SELECT 1 AS held FROM leader_leases
            WHERE name = \(grant.name) AND holder = \(grant.holder) AND fencing = \(grant.fencing)
              AND expires_at > coalesce(\(now), now())
            FOR SHARE
            """)
        guard !held.isEmpty else { throw PipelineError.leaseNotHeld(name: grant.name) }
    }

    /// Runs one statement under the lease (see `fenced`); returns the rows it affected.
    @discardableResult
    public func executeFenced(_ grant: LeaseGrant, _ query: PostgresQuery, now: Date? = nil) async throws -> Int {
        try await fenced(grant, now: now) { try await $0.execute(query) }
    }
}
