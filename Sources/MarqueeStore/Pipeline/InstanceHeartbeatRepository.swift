// Instance heartbeats (Sql/0021): each running serve renews a row that says it is alive for a few seconds
// ahead. The outbox claim statement reads the lapsed rows, so the claims of an instance that died (kill -9,
// a lost host) are free at once instead of after their lease. The renewals run on a connection of their
// own (`InstanceHeartbeat` in MarqueeService), so they never wait behind other work for a pooled one.
import Foundation
import Postgres

/// The `instance_heartbeats` rows: renew, lapse and purge.
public struct InstanceHeartbeatRepository: Sendable {
    public init() {}

    /// Says that `instance` is alive until `ttl` seconds from now (the database's clock, or `now`).
    public func beat(instance: String, ttl: TimeInterval, now: Date? = nil, on connection: PostgresConnection) async throws {
        try await connection.execute(
            """
            INSERT INTO instance_heartbeats AS h (instance, alive_until)
            VALUES (\(instance), coalesce(\(now), now()) + make_interval(secs => \(ttl)))
            ON CONFLICT (instance) DO UPDATE SET alive_until = EXCLUDED.alive_until
            """)
    }

    /// Says that `instance` is gone (a graceful stop): what it still claims is free at once.
    public func lapse(instance: String, on connection: PostgresConnection) async throws {
        try await connection.execute(
            """
            UPDATE instance_heartbeats SET alive_until = least(alive_until, now()) WHERE instance = \(instance)
            """)
    }

    /// Deletes the rows of instances that lapsed more than `age` seconds ago; returns how many.
    public func purge(lapsedFor age: TimeInterval, pool: PostgresPool) async throws -> Int {
        try await pool.execute(
            """
            DELETE FROM instance_heartbeats WHERE alive_until < now() - make_interval(secs => \(age))
            """)
    }

    /// When `instance` is alive until, if it has a row.
    public func aliveUntil(instance: String, pool: PostgresPool) async throws -> Date? {
        try await pool.query("SELECT alive_until FROM instance_heartbeats WHERE instance = \(instance)")
            .first.map { try $0.decode(Date.self, column: "alive_until") }
    }

    /// The part of a claim statement that finds the instances whose heartbeat lapsed by `now`: an array
    /// computed once per statement (an InitPlan), not a probe per claimed row.
    static func lapsedInstances(now: Date?) -> PostgresQuery {
        "ARRAY(SELECT h.instance FROM instance_heartbeats h WHERE h.alive_until <= coalesce(\(now), now()))"
    }
}
