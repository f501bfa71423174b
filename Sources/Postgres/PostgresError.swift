// Errors typed by SQLSTATE. libpq ships no SQLSTATE constants (errcodes.h is server-only), so the
// codes this module and its callers branch on are defined here, each saying whether a retry can help.

/// A five-character PostgreSQL SQLSTATE code, with named constants for the ones Marquee acts on.
public struct SQLState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The two-character class, e.g. "23" for integrity constraint violations.
    public var errorClass: Substring { rawValue.prefix(2) }

    // Class 08: connection exceptions.
    public static let connectionException = SQLState(rawValue: "08000")
    public static let connectionDoesNotExist = SQLState(rawValue: "08003")
    public static let connectionFailure = SQLState(rawValue: "08006")
    public static let sqlClientUnableToEstablishConnection = SQLState(rawValue: "08001")
    // Class 23: integrity constraint violations.
    public static let notNullViolation = SQLState(rawValue: "23502")
    public static let foreignKeyViolation = SQLState(rawValue: "23503")
    public static let uniqueViolation = SQLState(rawValue: "23505")
    public static let checkViolation = SQLState(rawValue: "23514")
    public static let exclusionViolation = SQLState(rawValue: "23P01")
    // Class 22: data exceptions.
    public static let invalidTextRepresentation = SQLState(rawValue: "22P02")
    public static let numericValueOutOfRange = SQLState(rawValue: "22003")
    // Class 25 / 40: transactions.
    public static let inFailedSQLTransaction = SQLState(rawValue: "25P02")
    public static let serializationFailure = SQLState(rawValue: "40001")
    public static let deadlockDetected = SQLState(rawValue: "40P01")
    // Class 42: syntax and access rules.
    public static let syntaxError = SQLState(rawValue: "42601")
    public static let undefinedTable = SQLState(rawValue: "42P01")
    public static let undefinedColumn = SQLState(rawValue: "42703")
    public static let undefinedFunction = SQLState(rawValue: "42883")
    public static let duplicateTable = SQLState(rawValue: "42P07")
    public static let duplicateObject = SQLState(rawValue: "42710")
    // Class 53 / 55 / 57: resources, object state, operator intervention.
    public static let tooManyConnections = SQLState(rawValue: "53300")
    public static let lockNotAvailable = SQLState(rawValue: "55P03")
    public static let objectInUse = SQLState(rawValue: "55006")
    public static let queryCanceled = SQLState(rawValue: "57014")
    public static let adminShutdown = SQLState(rawValue: "57P01")
    public static let crashShutdown = SQLState(rawValue: "57P02")
    public static let cannotConnectNow = SQLState(rawValue: "57P03")
    // Class 0A / 26: statements the session no longer has or cannot run.
    public static let featureNotSupported = SQLState(rawValue: "0A000")
    public static let invalidSQLStatementName = SQLState(rawValue: "26000")
    // Class XX: internal errors.
    public static let internalError = SQLState(rawValue: "XX000")

    /// True when running the same work again (in a new transaction, maybe on a new connection) can succeed.
    public var isRetryable: Bool {
        switch self {
        case .serializationFailure, .deadlockDetected, .tooManyConnections, .lockNotAvailable,
            .adminShutdown, .crashShutdown, .cannotConnectNow:
            return true
        default:
            return errorClass == "08"
        }
    }
}

/// An error from the Postgres module: a server error with its SQLSTATE, a lost connection, or a decoding failure.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, broadly; `sqlState` has the details for server errors.
    public enum Kind: Sendable, Equatable {
        /// The server rejected the statement; see `sqlState`.
        case server
        /// Could not connect (bad URL, server down, authentication failed).
        case connectionFailed
        /// The connection broke during or before the call; retry on a new connection.
        case connectionLost
        /// A column's value could not be decoded to the requested Swift type.
        case decoding
        /// The API was used in a way that cannot work (e.g. binds in a script, COPY misuse).
        case misuse
        /// The pool was closed.
        case poolClosed
        /// No connection of the pool came free (or could be opened) within its checkout deadline: the server is
        /// down, unreachable or overloaded. Nothing was sent; retry after a backoff.
        case checkoutTimeout
    }

    public let kind: Kind
    /// The SQLSTATE the server sent, or the client-side equivalent for connection errors.
    public let sqlState: SQLState?
    /// The primary message.
    public let message: String
    public var detail: String?
    public var hint: String?
    /// The constraint, table and column the server named, if any (useful for violations).
    public var constraint: String?
    public var table: String?
    public var column: String?
    /// True when the connection failed before the statement reached the server, so any retry is safe.
    var notSent = false

    init(kind: Kind, sqlState: SQLState? = nil, message: String) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
    }

    /// True when the same work may succeed if retried (after a backoff, in a new transaction).
    public var isRetryable: Bool {
        switch kind {
        case .connectionLost, .connectionFailed, .checkoutTimeout: return true
        case .server: return sqlState?.isRetryable ?? false
        case .decoding, .misuse, .poolClosed: return false
        }
    }

    public var description: String {
        var text = "postgres \(kind)"
        if let sqlState { text += " [\(sqlState)]" }
        text += ": \(message)"
        if let detail { text += " detail=\(detail)" }
        if let hint { text += " hint=\(hint)" }
        if let constraint { text += " constraint=\(constraint)" }
        if isRetryable { text += " (retryable)" }
        return text
    }

    static func decoding(column: String, type: Any.Type, columnType: String) -> PostgresError {
        var error = PostgresError(
            kind: .decoding,
            message: "column \"\(column)\" (\(columnType)) cannot be decoded as \(type)")
        error.column = column
        return error
    }

    static func misuse(_ message: String) -> PostgresError {
        PostgresError(kind: .misuse, message: message)
    }
}
