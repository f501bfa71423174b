// The heartbeat that makes claims end with their holder. serve renews its `instance_heartbeats` row every
// `interval` for `ttl` ahead; the dispatcher's claims of an instance whose row lapsed are free at once
// (OutboxRepository's claim), so a kill -9 freezes the channels it held for the TTL, not for the claim
// lease. The renewals must not stall while the process is alive, or its claims would be taken from a
// healthy holder: the loop runs on a database connection of its own, and on that connection's thread
// (its task executor), never waiting for a pooled connection nor for Swift's cooperative pool, which
// has one thread per core and can be busy under load. It starts before the dispatcher claims anything
// and stops after the dispatcher has finished, lapsing the row, so what is left is free at once.
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// How often serve renews its heartbeat, and for how long each renewal holds.
public struct InstanceHeartbeatConfiguration: Sendable, Equatable {
    /// How long a renewal says the instance is alive; default 5 s. The claims of an instance that died
    /// are free this long after its last renewal at the latest.
    public var ttl: TimeInterval = 5
    /// How often it is renewed; default 1 s (a few renewals can fail before the row lapses).
    public var interval: Duration = .seconds(1)
    /// Wait before connecting again after the heartbeat's connection failed; default 250 ms.
    public var reconnectDelay: Duration = .milliseconds(250)

    public init() {}
}

/// Keeps this instance's `instance_heartbeats` row alive from a connection and a thread of its own.
public final class InstanceHeartbeat: Sendable {
    public let instance: String
    public let configuration: InstanceHeartbeatConfiguration
    private let database: PostgresConfiguration
    private let logger: Logger
    private let repository = InstanceHeartbeatRepository()
    private let loop = Mutex<Task<Void, Never>?>(nil)
    /// Successful renewals so far (tests and logs).
    private let renewals = Atomic<Int>(0)

    public init(
        instance: String, database: PostgresConfiguration, configuration: InstanceHeartbeatConfiguration = .init(),
        logger: Logger
    ) {
        self.instance = instance
        self.database = database
        self.configuration = configuration
        self.logger = logger.with(["service": "heartbeat"])
    }

    /// Renewals that reached the database so far.
    public var renewalCount: Int { renewals.load(ordering: .relaxed) }

    /// Writes the first beat (throws when the database cannot take it, so nothing is claimed without one)
    /// and starts the renewals.
    public func start() async throws {
        let connection = try await PostgresConnection.connect(database)
        try await repository.beat(instance: instance, ttl: configuration.ttl, on: connection)
        renewals.add(1, ordering: .relaxed)
        logger.info("heartbeat started", ["instance": .string(instance), "ttl_seconds": .double(configuration.ttl)])
        loop.withLock { $0 = Task.detached { [self] in await run(startingWith: connection) } }
    }

    /// Stops renewing and lapses the row (what this instance still claims is free at once).
    public func stop() async {
        guard
            let task = loop.withLock({ task in
                defer { task = nil }
                return task
            })
        else { return }
        task.cancel()
        await task.value
    }

    /// Renews on one connection after another until cancelled, then lapses the row.
    private func run(startingWith first: PostgresConnection) async {
        var connection: PostgresConnection? = first
        var failures = 0
        while !Task.isCancelled {
            if connection == nil {
                do {
                    connection = try await PostgresConnection.connect(database)
                } catch {
                    failures += 1
                    if failures == 1 { logger.warning("heartbeat connection failed; retrying", ["error": .string("\(error)")]) }
                    try? await Task.sleep(for: configuration.reconnectDelay)
                    continue
                }
            }
            let current = connection!
            // Sleeps and statements on the connection's own thread, whatever the cooperative pool is doing.
            failures = await withTaskExecutorPreference(current.taskExecutor) { await renew(on: current, failures: failures) }
            if current.isBroken { connection = nil }
        }
        do {
            let last: PostgresConnection
            if let connection { last = connection } else { last = try await PostgresConnection.connect(database) }
            try await repository.lapse(instance: instance, on: last)
            logger.info("heartbeat stopped; what this instance claimed is free to others", ["instance": .string(instance)])
        } catch {
            logger.warning(
                "heartbeat not lapsed; it runs out on its own",
                [
                    "error": .string("\(error)"),
                    "ttl_seconds": .double(configuration.ttl),
                ])
        }
    }

    /// Beats every `interval` on `connection` until cancelled or until the connection breaks; returns the
    /// failures in a row at that point (the first of a streak is logged, and the recovery).
    private func renew(on connection: PostgresConnection, failures start: Int) async -> Int {
        var failures = start
        while !Task.isCancelled && !connection.isBroken {
            guard (try? await Task.sleep(for: configuration.interval)) != nil else { break }
            do {
                try await repository.beat(instance: instance, ttl: configuration.ttl, on: connection)
                renewals.add(1, ordering: .relaxed)
                if failures > 0 { logger.info("heartbeat renewed again", ["instance": .string(instance), "failures": .int(failures)]) }
                failures = 0
            } catch {
                failures += 1
                if failures == 1 {
                    logger.warning("heartbeat renewal failed; retrying", ["instance": .string(instance), "error": .string("\(error)")])
                }
            }
        }
        return failures
    }
}
