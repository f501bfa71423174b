// Long work runs as services with `run(until:)`. A service group starts them together; on SIGTERM or
// SIGINT it asks all of them to stop (they stop taking new work and finish what they hold), waits up to a
// deadline, then cancels whatever is still running. The first service to fail stops the rest.
import Dispatch
import Foundation
import MarqueeCore
import Synchronization

/// A request to stop gracefully, observable from any task.
public final class ShutdownSignal: Sendable {
    private let state = Mutex<(triggered: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    public init() {}

    /// Asks every waiter to stop; idempotent.
    public func trigger() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.triggered else { return [] }
            state.triggered = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    public var isTriggered: Bool { state.withLock { $0.triggered } }

    /// Returns once the signal is triggered.
    public func wait() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state -> Bool in
                if state.triggered { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }
}

/// A long-running part of the daemon.
public protocol Service: Sendable {
    var name: String { get }
    /// Runs until `shutdown` is triggered (then stops taking work, finishes or releases what it holds,
    /// and returns) or until cancelled (then returns promptly).
    func run(until shutdown: ShutdownSignal) async throws
}

/// Runs services together and shuts them down gracefully.
public struct ServiceGroup: Sendable {
    public let services: [any Service]
    public let shutdown: ShutdownSignal
    /// How long services get to finish after a shutdown request before they are cancelled.
    public let gracePeriod: Duration
    public let logger: Logger

    /// Turns `signals` into `shutdown.trigger()` from now on, instead of their default action (the end of the
    /// process); cancel the sources returned to stop handling them.
    public static func handleSignals(_ signals: [Int32], shutdown: ShutdownSignal, logger: Logger) -> [any DispatchSourceSignal] {
        signals.map { signalNumber in
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { [shutdown, logger] in
                logger.notice("shutdown requested", ["signal": .int(Int64(signalNumber))])
                shutdown.trigger()
            }
            source.resume()
            return source
        }
    }

    public init(services: [any Service], shutdown: ShutdownSignal = ShutdownSignal(), gracePeriod: Duration = .seconds(30), logger: Logger) {
        self.services = services
        self.shutdown = shutdown
        self.gracePeriod = gracePeriod
        self.logger = logger
    }

    /// Runs every service; returns when all have stopped. SIGTERM and SIGINT trigger the shutdown (a process that
    /// handles them from earlier passes none here, having called `handleSignals` itself).
    public func run(handlingSignals signals: [Int32] = [SIGTERM, SIGINT]) async throws {
        let sources = Self.handleSignals(signals, shutdown: shutdown, logger: logger)
        defer { for source in sources { source.cancel() } }

        // Child tasks return true for a service and false for the watchdog, which, once shutdown is asked
        // for, gives the services their grace period and then has them cancelled.
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for service in services {
                group.addTask { [shutdown, logger] in
                    do {
                        try await service.run(until: shutdown)
                        logger.info("service stopped", ["service": .string(service.name)])
                        return true
                    } catch is CancellationError where shutdown.isTriggered {
                        logger.info("service cancelled", ["service": .string(service.name)])
                        return true
                    } catch {
                        logger.error("service failed", ["service": .string(service.name), "error": .string("\(error)")])
                        shutdown.trigger()
                        throw error
                    }
                }
            }
            group.addTask { [shutdown, gracePeriod, logger] in
                await shutdown.wait()
                try? await Task.sleep(for: gracePeriod)
                if !Task.isCancelled {
                    logger.warning("grace period over; cancelling services", ["seconds": .int(gracePeriod.components.seconds)])
                }
                return false
            }
            var running = services.count
            var firstError: (any Error)?
            while running > 0 {
                do {
                    if try await group.next() == true { running -= 1 } else { group.cancelAll() }
                } catch {
                    running -= 1
                    if firstError == nil { firstError = error }
                    group.cancelAll()
                }
            }
            // Every service has stopped: release the watchdog.
            shutdown.trigger()
            group.cancelAll()
            if let firstError { throw firstError }
        }
    }
}
