// The public connection: a Sendable façade over a LibPQConnection that lives on its own thread.
// Every call is a job on that thread; the awaiting task is resumed through a continuation.
import Foundation
import Synchronization

/// Where and how to connect: a URL (or conninfo string) parsed by libpq, or key/value settings.
public struct PostgresConfiguration: Sendable {
    var settings: [(String, String)]
    var expandDatabase: Bool

    /// A `postgresql://user@host:port/db?sslmode=...` URL or a `host=... dbname=...` string; libpq parses it.
    public init(url: String) {
        settings = [("dbname", url)]
        expandDatabase = true
    }

    /// libpq connection keywords (`host`, `port`, `dbname`, `user`, `password`, `sslmode`, ...), used as given.
    public init(settings: [String: String]) {
        self.settings = settings.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        expandDatabase = false
    }

    /// The same server and credentials with another setting (a later value overrides an earlier one).
    public func setting(_ keyword: String, _ value: String) -> PostgresConfiguration {
        var copy = self
        copy.settings.append((keyword, value))
        return copy
    }

    /// The same server, with libpq's timeouts set so that a server gone away is noticed within about `seconds`:
    /// `connect_timeout` (at least 2 s, libpq's minimum) for a connect nobody answers, `tcp_user_timeout` for a
    /// statement whose packets nobody acknowledges, and keepalives for an idle connection (LISTEN) that went silent.
    public func noticingOutagesWithin(seconds: Int) -> PostgresConfiguration {
        let bound = max(1, seconds)
        return setting("connect_timeout", "\(max(2, bound))").setting("tcp_user_timeout", "\(bound * 1000)")
            .setting("keepalives_idle", "\(bound)").setting("keepalives_interval", "1").setting("keepalives_count", "3")
    }

    /// The same server and credentials, another database.
    public func database(_ name: String) -> PostgresConfiguration {
        setting("dbname", name)
    }
}

/// A notification received by LISTEN.
public struct PostgresNotification: Sendable, Equatable {
    public let channel: String
    public let payload: String
    /// The backend process that sent it.
    public let backendPID: Int32
}

/// Transaction isolation levels for `withTransaction`.
public enum PostgresIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

/// One PostgreSQL session. Calls are serialized; use a `PostgresPool` to share connections between tasks.
public final class PostgresConnection: Sendable {
    private let thread: ConnectionThread
    // Touched only by jobs on `thread`, one at a time.
    nonisolated(unsafe) private let connection: LibPQConnection
    private let broken = Atomic<Bool>(false)
    private let inTransaction = Atomic<Bool>(false)
    /// The server process serving this session.
    public let backendPID: Int32

    private init(thread: ConnectionThread, connection: LibPQConnection) {
        self.thread = thread
        self.connection = connection
        self.backendPID = connection.backendPID
    }

    /// Connects on a new connection thread.
    public static func connect(_ configuration: PostgresConfiguration) async throws -> PostgresConnection {
        let thread = ConnectionThread(name: "marquee-db")  // not "postgres": PostgreSQL's own processes are named that
        do {
            let box = try await thread.run {
                UncheckedBox(
                    try LibPQConnection(
                        settings: configuration.settings,
                        expandDatabase: configuration.expandDatabase))
            }
            return PostgresConnection(thread: thread, connection: box.value)
        } catch {
            thread.stop()
            throw error
        }
    }

    /// Connects to a URL (see `PostgresConfiguration(url:)`).
    public static func connect(url: String) async throws -> PostgresConnection {
        try await connect(PostgresConfiguration(url: url))
    }

    deinit {
        let connection = UncheckedBox(self.connection)
        thread.submit { connection.value.finish() }  // PQfinish runs on the connection's own thread
        thread.stop()
    }

    /// The connection's own thread as a task executor. Code that runs many statements back to back
    /// on this connection can run there with `withTaskExecutorPreference(connection.taskExecutor)`:
    /// each statement then costs no thread hop. Keep CPU-heavy work off it; it serves only this connection.
    public var taskExecutor: any TaskExecutor { thread }

    /// True while a transaction block (BEGIN without COMMIT/ROLLBACK) is open, failed or not.
    public var isInTransaction: Bool { inTransaction.load(ordering: .relaxed) }

    /// True once a call found the connection dead; a pool then replaces it.
    public var isBroken: Bool { broken.load(ordering: .relaxed) }

    /// Runs `body` with the libpq connection on its thread, marking the connection broken if it died.
    private func withLibPQ<T: Sendable>(_ body: @escaping @Sendable (LibPQConnection) throws -> T) async throws -> T {
        let connection = UncheckedBox(self.connection)
        do {
            return try await thread.run { [self] in
                defer { inTransaction.store(!connection.value.isIdle, ordering: .relaxed) }
                return try body(connection.value)
            }
        } catch let error as PostgresError where error.kind == .connectionLost {
            broken.store(true, ordering: .relaxed)
            throw error
        }
    }

    /// Checks, without sending anything, that the server has not closed the connection.
    func isAlive() async -> Bool {
        do {
            try await withLibPQ { try $0.checkAlive() }
            return true
        } catch {
            return false
        }
    }

    // MARK: Statements

    /// Runs a statement and returns its rows; interpolated values are bound as `$n` parameters.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        PostgresRows(storage: try await withLibPQ { try $0.execute(query) })
    }

    /// Runs a statement and returns the number of rows it affected (0 when it reports none).
    @discardableResult
    public func execute(_ query: PostgresQuery) async throws -> Int {
        try await self.query(query).affectedRows ?? 0
    }

    /// Runs SQL text that may hold several statements (simple protocol), e.g. a migration file.
    /// Several statements sent together run in one implicit transaction unless they contain their own.
    public func executeScript(_ script: PostgresQuery) async throws {
        guard script.binds.isEmpty else {
            throw PostgresError.misuse("a script cannot bind parameters; use query() for statements with values")
        }
        let sql = script.sql
        _ = try await withLibPQ { try $0.execute(script: sql) }
    }

    /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it throws (then rethrows).
    @discardableResult
    public func withTransaction<T: Sendable>(
        isolation: PostgresIsolation? = nil,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        if let isolation {
            try await executeScript(PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation.rawValue)"))
        } else {
            try await executeScript("BEGIN")
        }
        let value: T
        do {
            value = try await body(self)
        } catch {
            if !isBroken { try? await executeScript("ROLLBACK") }
            throw error
        }
        try await executeScript("COMMIT")
        return value
    }

    // MARK: COPY

    /// Streams rows into `COPY table (columns) FROM STDIN` (text format); returns the rows copied.
    /// `body` writes rows to the writer, which sends them in large buffers. If `body` throws, the COPY
    /// is aborted (nothing is copied) and the error is rethrown.
    @discardableResult
    public func copyFrom(
        _ statement: PostgresQuery,
        bufferSize: Int = 1 << 20,
        _ body: (PostgresCopyWriter) async throws -> Void
    ) async throws -> Int {
        guard statement.binds.isEmpty else {
            throw PostgresError.misuse("COPY cannot bind parameters; use \\(identifier:) for table and column names")
        }
        let sql = statement.sql
        try await withLibPQ { try $0.startCopy(sql) }
        let writer = PostgresCopyWriter(connection: self, bufferSize: bufferSize)
        do {
            try await body(writer)
            try await writer.finish()
        } catch {
            try? await writer.drain()
            if !isBroken {
                _ = try? await withLibPQ { try $0.endCopy(abortMessage: "aborted by the client: \(error)") }
            }
            throw error
        }
        return try await withLibPQ { try $0.endCopy(abortMessage: nil) }
    }

    func putCopyData(_ bytes: [UInt8]) async throws {
        try await withLibPQ { try $0.putCopyData(bytes) }
    }
}

/// Holds a non-Sendable value that is only ever touched by one thread at a time.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
