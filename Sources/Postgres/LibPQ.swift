// The owner of a libpq connection handle and of result handles. Everything here is synchronous and
// blocking: it runs only on a connection's own thread (ConnectionThread), never on Swift's
// cooperative pool. `check` is the one place that turns libpq's return codes into PostgresError.
internal import CLibPQ
import Foundation

/// Owns one PGconn; not thread-safe, used only from its connection thread.
final class LibPQConnection {
    private let handle: OpaquePointer

    /// Connects (blocking). `keywords`/`values` go to PQconnectdbParams; with `expandDatabase` the
    /// first `dbname` may be a URL or a conninfo string, which libpq itself parses.
    init(settings: [(String, String)], expandDatabase: Bool) throws {
        // Defaults first, so the URL or the caller's settings override them: give up on an unreachable
        // server after 10 s, and notice a silently dead peer (a LISTEN connection waits forever) in ~1 min.
        let defaults = [
            ("connect_timeout", "10"), ("keepalives_idle", "30"), ("keepalives_interval", "10"),
            ("keepalives_count", "3"),
        ]
        let all = defaults + settings + [("client_encoding", "UTF8")]
        let keywords = all.map { strdup($0.0) }
        let values = all.map { strdup($0.1) }
        defer { for pointer in keywords + values { free(pointer) } }
        let keywordPointers = keywords.map { UnsafePointer($0) } + [nil]
        let valuePointers = values.map { UnsafePointer($0) } + [nil]
        guard let connection = PQconnectdbParams(keywordPointers, valuePointers, expandDatabase ? 1 : 0) else {
            throw PostgresError(
                kind: .connectionFailed, sqlState: .sqlClientUnableToEstablishConnection,
                message: "out of memory allocating a connection")
        }
        handle = connection
        guard PQstatus(connection) == CONNECTION_OK else {
            var error = PostgresError(
                kind: .connectionFailed, sqlState: .sqlClientUnableToEstablishConnection,
                message: lastErrorMessage)
            error.hint = "check the database URL or settings and that the server is running"
            throw error
        }
        PQsetNoticeProcessor(connection, { _, _ in }, nil)  // NOTICEs are not errors; don't print them
        // Fixed output formats, so text decoding is exact whatever the server's defaults are.
        _ = try execute(script: "SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, YMD'; SET extra_float_digits TO 3")
    }

    private var finished = false

    /// Closes the connection now (the owner's last call); deinit closes it otherwise.
    func finish() {
        guard !finished else { return }
        finished = true
        PQfinish(handle)
    }

    deinit { finish() }

    var lastErrorMessage: String {
        String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var isBroken: Bool { PQstatus(handle) != CONNECTION_OK }

    /// True when no transaction block is open (nor a failed one).
    var isIdle: Bool { PQtransactionStatus(handle) == PQTRANS_IDLE }

    var backendPID: Int32 { PQbackendPID(handle) }

    /// Reads what the server sent while idle (without blocking), so a connection the server closed
    /// (restart, idle timeout) is known to be dead before a statement is sent on it.
    /// A zero-timeout poll first: a healthy idle connection has nothing to read, and that costs one
    /// syscall. Otherwise two reads: the first may return the server's goodbye, only the next sees EOF.
    func checkAlive() throws {
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        if !isBroken, poll(&descriptor, 1, 0) == 0 { return }
        if PQconsumeInput(handle) == 0 || PQconsumeInput(handle) == 0 || isBroken {
            var error = PostgresError(
                kind: .connectionLost, sqlState: .connectionFailure,
                message: "connection lost: \(lastErrorMessage)")
            error.notSent = true
            throw error
        }
    }

    /// Statements prepared on this session, by SQL text and parameter types.
    private var prepared: [StatementKey: String] = [:]
    private var preparedCount = 0
    private static let preparedLimit = 256

    private struct StatementKey: Hashable {
        let sql: String
        let types: [Oid]
    }

    /// The parameters of a statement as libpq takes them: text values (binary for bytes) in one buffer.
    private struct Parameters {
        var types: [Oid]
        var lengths: [Int32]
        var formats: [Int32]
        var offsets: [Int?]
        var storage: [UInt8]

        init(_ query: PostgresQuery) {
            let count = query.binds.count
            types = [Oid](repeating: 0, count: count)
            lengths = [Int32](repeating: 0, count: count)
            formats = [Int32](repeating: 0, count: count)
            offsets = [Int?](repeating: nil, count: count)
            storage = []
            for (index, bind) in query.binds.enumerated() {
                types[index] = bind.oid
                switch bind.storage {
                case .null:
                    break
                case .bytes(let bytes):
                    offsets[index] = storage.count
                    storage.append(contentsOf: bytes)
                    lengths[index] = Int32(bytes.count)
                    formats[index] = 1
                default:
                    offsets[index] = storage.count
                    bind.appendText(to: &storage)
                    lengths[index] = Int32(storage.count - offsets[index]!)
                    storage.append(0)
                }
            }
            storage.append(0)  // never empty, so baseAddress is never nil
        }

        /// Calls `body` with the value pointers (nil for NULL).
        func withValues<T>(_ body: ([UnsafePointer<CChar>?]) -> T) -> T {
            storage.withUnsafeBytes { buffer in
                let base = buffer.baseAddress!
                return body(offsets.map { offset in offset.map { base.advanced(by: $0).assumingMemoryBound(to: CChar.self) } })
            }
        }
    }

    /// The name the statement is prepared under on this session, and whether it must be prepared first
    /// (nil: past the limit, run unnamed).
    private func preparedName(for query: PostgresQuery, types: [Oid]) -> (name: String, isNew: Bool)? {
        let key = StatementKey(sql: query.sql, types: types)
        if let name = prepared[key] { return (name, false) }
        guard prepared.count < Self.preparedLimit else { return nil }
        preparedCount += 1
        let name = "marquee_\(preparedCount)"
        prepared[key] = name
        return (name, true)
    }

    /// Runs one statement with `$n` parameters (extended protocol, text results). A statement is
    /// prepared on first use and then only bound and executed, which saves the server a parse and
    /// plan per call (the first 256 distinct statements of a session; the rest go unnamed).
    func execute(_ query: PostgresQuery) throws -> PostgresResultStorage {
        try checkAlive()
        let parameters = Parameters(query)
        let count = Int32(query.binds.count)
        var name = preparedName(for: query, types: parameters.types)
        if let (newName, isNew) = name, isNew {
            do {
                _ = try check(PQprepare(handle, newName, query.sql, count, parameters.types))
            } catch {
                forget(query, types: parameters.types)
                throw error
            }
        }
        func run() -> OpaquePointer? {
            parameters.withValues { values in
                if let (name, _) = name {
                    return PQexecPrepared(handle, name, count, values, parameters.lengths, parameters.formats, 0)
                }
                return PQexecParams(handle, query.sql, count, parameters.types, values, parameters.lengths, parameters.formats, 0)
            }
        }
        do {
            return try check(run())
        } catch let error as PostgresError where name != nil && Self.invalidatesPrepared(error) {
            // The session lost its statements (DISCARD ALL) or a table changed shape under a cached
            // plan. Forget them; outside a transaction the statement can simply run again.
            forgetPrepared(after: error, query, types: parameters.types)
            guard PQtransactionStatus(handle) == PQTRANS_IDLE else { throw error }
            name = nil
            return try check(run())
        }
    }

    private func forget(_ query: PostgresQuery, types: [Oid]) {
        prepared[StatementKey(sql: query.sql, types: types)] = nil
    }

    private func forgetPrepared(after error: PostgresError, _ query: PostgresQuery, types: [Oid]) {
        if error.sqlState == .invalidSQLStatementName { prepared.removeAll() } else { forget(query, types: types) }
    }

    private static func invalidatesPrepared(_ error: PostgresError) -> Bool {
        error.sqlState == .invalidSQLStatementName
            || (error.sqlState == .featureNotSupported && error.message.contains("cached plan"))
    }

    /// Runs SQL that may hold several statements (simple protocol, no parameters), e.g. a migration.
    func execute(script: String) throws -> PostgresResultStorage {
        try checkAlive()
        return try check(PQexec(handle, script))
    }

    // MARK: COPY FROM STDIN

    func startCopy(_ sql: String) throws {
        try checkAlive()
        let result = PQexec(handle, sql)
        if let result, PQresultStatus(result) == PGRES_COPY_IN {
            PQclear(result)
            return
        }
        _ = try check(result)  // throws the server's error, if that is why
        throw PostgresError.misuse("the statement did not start COPY FROM STDIN: \(sql)")
    }

    func putCopyData(_ bytes: [UInt8]) throws {
        let status = bytes.withUnsafeBytes { buffer in
            PQputCopyData(handle, buffer.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(buffer.count))
        }
        if status != 1 { throw connectionError() }
    }

    /// Ends COPY (`abortMessage` non-nil makes the server fail it) and returns the rows copied.
    func endCopy(abortMessage: String?) throws -> Int {
        if PQputCopyEnd(handle, abortMessage) != 1 { throw connectionError() }
        var rows = 0
        var firstError: Error?
        while let result = PQgetResult(handle) {
            do {
                let storage = try check(result)
                rows = storage.affectedRows ?? rows
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        if let firstError { throw firstError }
        return rows
    }

    // MARK: LISTEN

    var socket: Int32 { PQsocket(handle) }

    /// Consumes input and returns the notifications received so far; throws when the connection broke.
    func drainNotifications() throws -> [PostgresNotification] {
        if PQconsumeInput(handle) == 0 { throw connectionError() }
        var notifications: [PostgresNotification] = []
        while let pointer = PQnotifies(handle) {
            let notify = pointer.pointee
            notifications.append(
                PostgresNotification(
                    channel: String(cString: notify.relname),
                    payload: String(cString: notify.extra),
                    backendPID: notify.be_pid))
            PQfreemem(pointer)
        }
        return notifications
    }

    // MARK: Errors

    private func connectionError() -> PostgresError {
        PostgresError(kind: .connectionLost, sqlState: .connectionFailure, message: "connection lost: \(lastErrorMessage)")
    }

    /// Turns a PGresult into storage or a typed error (taking ownership of the result either way).
    func check(_ result: OpaquePointer?) throws -> PostgresResultStorage {
        guard let result else {
            throw isBroken ? connectionError() : PostgresError(kind: .server, message: lastErrorMessage)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY, PGRES_COPY_IN:
            return PostgresResultStorage(result)
        default:
            defer { PQclear(result) }
            func field(_ code: Character) -> String? {
                guard let value = PQresultErrorField(result, Int32(code.asciiValue!)) else { return nil }
                return String(cString: value)
            }
            let message =
                field("M")
                ?? String(cString: PQresultErrorMessage(result))
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let sqlState = field("C").map(SQLState.init(rawValue:))
            var error: PostgresError
            if isBroken {
                error = PostgresError(
                    kind: .connectionLost, sqlState: sqlState ?? .connectionFailure,
                    message: message.isEmpty ? "connection lost: \(lastErrorMessage)" : message)
            } else {
                error = PostgresError(kind: .server, sqlState: sqlState, message: message)
            }
            error.detail = field("D")
            error.hint = field("H")
            error.constraint = field("n")
            error.table = field("t")
            error.column = field("c")
            throw error
        }
    }
}

/// Owns one PGresult. A result is immutable once built, so reading it from any thread is safe.
final class PostgresResultStorage: @unchecked Sendable {
    private let result: OpaquePointer
    let rowCount: Int
    let columnNames: [String]
    let columnTypes: [UInt32]
    let columnIndex: [String: Int]
    let affectedRows: Int?

    init(_ result: OpaquePointer) {
        self.result = result
        rowCount = Int(PQntuples(result))
        let columns = Int(PQnfields(result))
        columnNames = (0..<columns).map { String(cString: PQfname(result, Int32($0))) }
        columnTypes = (0..<columns).map { PQftype(result, Int32($0)) }
        var index: [String: Int] = [:]
        for (position, name) in columnNames.enumerated() where index[name] == nil { index[name] = position }
        columnIndex = index
        affectedRows = Int(String(cString: PQcmdTuples(result)))
    }

    deinit { PQclear(result) }

    func isNull(row: Int, column: Int) -> Bool {
        PQgetisnull(result, Int32(row), Int32(column)) == 1
    }

    func text(row: Int, column: Int) -> String {
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        let pointer = UnsafeRawPointer(PQgetvalue(result, Int32(row), Int32(column))!)
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }
}
