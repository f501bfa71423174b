// A bounded pool. Its bookkeeping is a value-type state machine (PoolState) whose event methods
// return actions; PostgresPool performs them outside the lock. A connection found dead is dropped
// on check-in and its slot reused for a fresh one, which is how the pool recovers after a restart.
// A checkout waits at most the pool's deadline: while the server is down or unreachable a caller learns it
// within that bound (a retryable `checkoutTimeout`) instead of queueing behind connects that cannot succeed.
// The pool's load (tasks waiting, how long the oldest has waited, whether connects fail) is what callers
// measure to refuse work before it queues (the API's admission).
import Synchronization

/// The pool's bookkeeping, free of I/O: which connections are idle, lent or being opened, and who waits.
struct PoolState<Connection> {
    enum Action {
        /// Hand this connection to this waiter.
        case lend(Connection, to: Int)
        /// Open a new connection (its slot is already counted in `connecting`).
        case connect
        /// Fail these waiters.
        case fail([Int], PostgresError)
        /// This waiter's task was cancelled.
        case cancelled(Int)
        /// Drop these connections (dead, or the pool is closing).
        case close([Connection])
    }

    let capacity: Int
    private(set) var idle: [Connection] = []
    private(set) var lent = 0
    private(set) var connecting = 0
    private(set) var waiters: [Int] = []
    /// When each waiter queued; the oldest is `waiters.first`.
    private(set) var queuedAt: [Int: ContinuousClock.Instant] = [:]
    private(set) var closed = false
    /// The last attempt to open a connection failed and none opened since: the server looks down or unreachable.
    private(set) var unreachable = false

    /// Connections open or being opened; never above `capacity`.
    var open: Int { idle.count + lent + connecting }

    init(capacity: Int) { self.capacity = capacity }

    /// A task asks for a connection.
    mutating func checkout(waiter: Int, at now: ContinuousClock.Instant = .now) -> [Action] {
        if closed { return [.fail([waiter], PostgresError(kind: .poolClosed, message: "the pool is closed"))] }
        if let connection = idle.popLast() {
            lent += 1
            return [.lend(connection, to: waiter)]
        }
        waiters.append(waiter)
        queuedAt[waiter] = now
        return connectIfNeeded()
    }

    /// A waiter's checkout deadline passed: it fails with `checkoutTimeout` unless it was served meanwhile.
    mutating func expire(waiter: Int, after limit: Duration) -> [Action] {
        guard let index = waiters.firstIndex(of: waiter) else { return [] }
        waiters.remove(at: index)
        queuedAt[waiter] = nil
        let cause = unreachable ? "the database server cannot be reached" : "every connection stayed busy"
        var error = PostgresError(kind: .checkoutTimeout, message: "no database connection within \(limit) (\(cause))")
        error.hint = "retry after a backoff; nothing was sent"
        error.notSent = true
        return [.fail([waiter], error)]
    }

    /// How long the oldest waiter has waited (zero when none waits).
    func oldestWait(now: ContinuousClock.Instant = .now) -> Duration {
        guard let first = waiters.first, let since = queuedAt[first] else { return .zero }
        return now - since
    }

    /// A task gives its connection back; `alive` is false when it broke.
    mutating func checkin(_ connection: Connection, alive: Bool) -> [Action] {
        lent -= 1
        guard alive, !closed else { return [.close([connection])] + connectIfNeeded() }
        return offer(connection)
    }

    /// A connection opened.
    mutating func connected(_ connection: Connection) -> [Action] {
        connecting -= 1
        unreachable = false
        if closed { return [.close([connection])] }
        return offer(connection)
    }

    /// Opening a connection failed: the oldest waiter gets the error, and if more wait than
    /// connections are being opened, another attempt starts (so no waiter waits forever).
    mutating func connectFailed(_ error: PostgresError) -> [Action] {
        connecting -= 1
        unreachable = true
        guard let first = takeFirstWaiter() else { return [] }
        return [.fail([first], error)] + connectIfNeeded()
    }

    /// A waiting task was cancelled.
    mutating func cancel(waiter: Int) -> [Action] {
        guard let index = waiters.firstIndex(of: waiter) else { return [] }
        waiters.remove(at: index)
        queuedAt[waiter] = nil
        return [.cancelled(waiter)]
    }

    /// The pool shuts down: waiters fail, idle connections close, lent ones close on check-in.
    mutating func close() -> [Action] {
        closed = true
        let failed = waiters
        let closing = idle
        waiters = []
        queuedAt = [:]
        idle = []
        return [.fail(failed, PostgresError(kind: .poolClosed, message: "the pool is closed")), .close(closing)]
    }

    private mutating func offer(_ connection: Connection) -> [Action] {
        if waiters.isEmpty {
            idle.append(connection)
            return []
        }
        lent += 1
        return [.lend(connection, to: takeFirstWaiter()!)]
    }

    private mutating func takeFirstWaiter() -> Int? {
        guard !waiters.isEmpty else { return nil }
        let first = waiters.removeFirst()
        queuedAt[first] = nil
        return first
    }

    private mutating func connectIfNeeded() -> [Action] {
        guard !closed, waiters.count > connecting, open < capacity else { return [] }
        connecting += 1
        return [.connect]
    }
}

/// A bounded set of connections, each lent to one task at a time.
public final class PostgresPool: Sendable {
    private struct Locked {
        var state: PoolState<PostgresConnection>
        var continuations: [Int: CheckedContinuation<PostgresConnection, Error>] = [:]
        /// Waiters whose cancellation ran before they queued (the handler can run first).
        var cancelledEarly: Set<Int> = []
        var nextWaiter = 0
        /// The deadline timers of queued waiters (`checkoutTimeout`).
        var timers: [Int: Task<Void, Never>] = [:]
    }

    private let configuration: PostgresConfiguration
    private let locked: Mutex<Locked>
    /// The longest a task waits for a connection before `checkoutTimeout` (nil: as long as it takes).
    public let checkoutTimeout: Duration?

    /// A pool that opens at most `maxConnections` connections, lazily. A task waits at most `checkoutTimeout`
    /// for one (nil: without a bound).
    public init(configuration: PostgresConfiguration, maxConnections: Int = 10, checkoutTimeout: Duration? = nil) {
        precondition(maxConnections > 0, "a pool needs at least one connection")
        self.configuration = configuration
        self.checkoutTimeout = checkoutTimeout
        self.locked = Mutex(Locked(state: PoolState(capacity: maxConnections)))
    }

    /// Lends a connection to `body` and takes it back afterwards (a broken one is replaced).
    /// A connection that died while idle (e.g. the server restarted) is noticed before `body` runs
    /// and swapped for another. Nonisolated code in `body` runs on the connection's own thread (it is
    /// idle while lent), so its statements cost no thread hop; actor-isolated code keeps its actor.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            let connection = try await checkout()
            let outcome: Result<T, Error>? = await withTaskExecutorPreference(connection.taskExecutor) {
                // A zero-timeout poll on the connection's own thread; nothing has been sent yet, so
                // a dead connection can be replaced without running any of `body` twice.
                if attempt <= locked.withLock({ $0.state.capacity }), !(await connection.isAlive()) { return nil }
                do {
                    return .success(try await body(connection))
                } catch {
                    return .failure(error)
                }
            }
            await checkin(connection)
            if let outcome { return try outcome.get() }
        }
    }

    /// Runs `body` in a transaction on a pooled connection: COMMIT on return, ROLLBACK on throw.
    @discardableResult
    public func withTransaction<T: Sendable>(
        isolation: PostgresIsolation? = nil,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { try await $0.withTransaction(isolation: isolation, body) }
    }

    /// Runs one statement on a pooled connection. If the connection turns out to have died before
    /// the statement was sent (e.g. after a server restart), it is retried once on a fresh one.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await withConnectionOnceMoreIfNotSent { try await $0.query(query) }
    }

    /// `withConnection`, run once more on a fresh connection when the first had died before anything
    /// was sent (so nothing of `body` reached the server).
    private func withConnectionOnceMoreIfNotSent<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await withConnection(body)
        } catch let error as PostgresError where error.notSent {
            return try await withConnection(body)
        }
    }

    /// Runs one statement and returns the number of rows it affected.
    @discardableResult
    public func execute(_ query: PostgresQuery) async throws -> Int {
        try await self.query(query).affectedRows ?? 0
    }

    /// Closes idle connections and fails waiters; connections in use close when returned.
    public func close() {
        perform(locked.withLock { $0.state.close() })
    }

    /// Counts for tests and metrics: connections open (or opening), idle, and tasks waiting.
    public var statistics: (open: Int, idle: Int, waiting: Int) {
        locked.withLock { ($0.state.open, $0.state.idle.count, $0.state.waiters.count) }
    }

    /// What waits on the pool now: read on every request by an admission check, so it costs one lock.
    public var load: PostgresPoolLoad {
        let now = ContinuousClock.now
        return locked.withLock {
            PostgresPoolLoad(
                capacity: $0.state.capacity, waiting: $0.state.waiters.count, oldestWait: $0.state.oldestWait(now: now),
                unreachable: $0.state.unreachable)
        }
    }

    // MARK: Internals

    private func checkout() async throws -> PostgresConnection {
        let waiter = locked.withLock { locked in
            locked.nextWaiter += 1
            return locked.nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let actions = locked.withLock { locked -> [PoolState<PostgresConnection>.Action] in
                    locked.continuations[waiter] = continuation
                    if locked.cancelledEarly.remove(waiter) != nil { return [.cancelled(waiter)] }
                    let actions = locked.state.checkout(waiter: waiter)
                    if let limit = checkoutTimeout, locked.state.queuedAt[waiter] != nil {
                        locked.timers[waiter] = Task { [weak self] in
                            guard (try? await Task.sleep(for: limit)) != nil, let self else { return }
                            perform(self.locked.withLock { $0.state.expire(waiter: waiter, after: limit) })
                        }
                    }
                    return actions
                }
                perform(actions)
            }
        } onCancel: {
            perform(
                locked.withLock { locked in
                    guard locked.continuations[waiter] != nil else {
                        locked.cancelledEarly.insert(waiter)
                        return []
                    }
                    return locked.state.cancel(waiter: waiter)
                })
        }
    }

    /// Takes a connection back; a transaction its borrower left open is rolled back first, so the
    /// next borrower never inherits it.
    private func checkin(_ connection: PostgresConnection) async {
        if connection.isInTransaction, !connection.isBroken {
            try? await connection.executeScript("ROLLBACK")
        }
        let alive = !connection.isBroken && !connection.isInTransaction
        perform(locked.withLock { $0.state.checkin(connection, alive: alive) })
    }

    private func perform(_ actions: [PoolState<PostgresConnection>.Action]) {
        for action in actions { perform(action) }
    }

    private func perform(_ action: PoolState<PostgresConnection>.Action) {
        switch action {
        case .close:
            break  // a connection closes when its last reference goes
        case .lend(let connection, let waiter):
            let (continuation, timer) = locked.withLock { ($0.continuations.removeValue(forKey: waiter), $0.timers.removeValue(forKey: waiter)) }
            timer?.cancel()
            continuation?.resume(returning: connection)
        case .fail(let waiters, let error):
            let (continuations, timers) = locked.withLock { locked in
                (waiters.compactMap { locked.continuations.removeValue(forKey: $0) }, waiters.compactMap { locked.timers.removeValue(forKey: $0) })
            }
            for timer in timers { timer.cancel() }
            for continuation in continuations { continuation.resume(throwing: error) }
        case .cancelled(let waiter):
            let (continuation, timer) = locked.withLock { ($0.continuations.removeValue(forKey: waiter), $0.timers.removeValue(forKey: waiter)) }
            timer?.cancel()
            continuation?.resume(throwing: CancellationError())
        case .connect:
            let configuration = self.configuration
            Task {
                let actions: [PoolState<PostgresConnection>.Action]
                do {
                    let connection = try await PostgresConnection.connect(configuration)
                    actions = locked.withLock { $0.state.connected(connection) }
                } catch {
                    let failure =
                        error as? PostgresError
                        ?? PostgresError(kind: .connectionFailed, message: String(describing: error))
                    actions = locked.withLock { $0.state.connectFailed(failure) }
                }
                perform(actions)
            }
        }
    }
}

/// What waits on a pool at one moment.
public struct PostgresPoolLoad: Sendable, Equatable {
    /// The most connections the pool opens.
    public let capacity: Int
    /// Tasks waiting for a connection.
    public let waiting: Int
    /// How long the oldest of them has waited (zero when none waits).
    public let oldestWait: Duration
    /// The last attempt to open a connection failed and none opened since.
    public let unreachable: Bool

    public init(capacity: Int, waiting: Int, oldestWait: Duration, unreachable: Bool) {
        self.capacity = capacity
        self.waiting = waiting
        self.oldestWait = oldestWait
        self.unreachable = unreachable
    }
}
