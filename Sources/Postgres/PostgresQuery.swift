import Foundation

// A statement whose interpolated values become `$n` bind parameters, so a value can never change the
// SQL text. The only ways to splice text into the SQL are `\(identifier:)`, which quotes,
// `PostgresStaticSQL`, text fixed when the program is written (a literal, or the raw values of an enumeration's
// cases: the named state sets of the lifecycles), and the explicitly unsafe `\(unsafeRaw:)` /
// `init(unsafeSQL:)`, meant for DDL and migration scripts.

/// SQL text plus its bind parameters, written as a string literal with interpolated values.
///
///     try await conn.query("SELECT * FROM t WHERE id = \(id) AND name = \(name)")  // $1, $2
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The SQL text with `$1`, `$2`... placeholders.
    public private(set) var sql: String
    /// The values bound to the placeholders, in order.
    public private(set) var binds: [PostgresData]

    public init(stringLiteral value: String) {
        self.sql = value
        self.binds = []
    }

    public init(stringInterpolation: StringInterpolation) {
        self.sql = stringInterpolation.sql
        self.binds = stringInterpolation.binds
    }

    /// SQL taken verbatim, e.g. a migration file. Never build this from untrusted input.
    public init(unsafeSQL sql: String) {
        self.sql = sql
        self.binds = []
    }

    /// The SQL with placeholders; bound values are never printed (they may be secrets).
    public var description: String { binds.isEmpty ? sql : "\(sql) [\(binds.count) binds]" }

    /// Builds the SQL text and the bind list from a string literal with interpolations.
    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        var sql = ""
        var binds: [PostgresData] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        /// Binds a value as the next `$n` parameter.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value) {
            binds.append(value.postgresData)
            sql += "$\(binds.count)"
        }

        /// Binds an optional value; nil is bound as NULL.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            binds.append(value.postgresData)
            sql += "$\(binds.count)"
        }

        /// Inserts a quoted identifier (table, column, channel name): `"name"` with `"` doubled.
        public mutating func appendInterpolation(identifier: String) {
            sql += quoteIdentifier(identifier)
        }

        /// Inserts text fixed when the program was written.
        public mutating func appendInterpolation(_ fragment: PostgresStaticSQL) {
            sql += fragment.text
        }

        /// Inserts text verbatim into the SQL. Only for trusted fragments such as DDL; never for values.
        public mutating func appendInterpolation(unsafeRaw text: String) {
            sql += text
        }

        /// Appends another query, renumbering its placeholders after the ones already bound.
        public mutating func appendInterpolation(fragment: PostgresQuery) {
            let offset = binds.count
            binds += fragment.binds
            // A fragment without binds has no placeholders to shift (a state list, a CASE of literals).
            sql += offset == 0 || fragment.binds.isEmpty ? fragment.sql : renumberPlaceholders(fragment.sql, by: offset)
        }
    }
}

/// SQL text fixed when the program is written, spliced into a statement as text rather than bound as a
/// parameter. A state list written this way lets the planner prove a partial index's predicate in a generic
/// plan, which a bound array cannot ("parameterized query clauses do not work with a partial index",
/// PostgreSQL 15 §11.8, https://www.postgresql.org/docs/15/indexes-partial.html).
///
///     static let live = PostgresStaticSQL.list(ChannelLifecycle.broadcastingStates)  // ('open', 'ending')
///     try await conn.query("SELECT id FROM channels WHERE state IN \(live) AND app_id = \(appID)")
public struct PostgresStaticSQL: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The SQL text.
    public let text: String

    /// A string literal of the program.
    public init(_ literal: StaticString) {
        text = literal.description
    }

    /// A string literal of the program, written where a `PostgresStaticSQL` is expected.
    public init(stringLiteral literal: StaticString) {
        self.init(literal)
    }

    /// `('a', 'b')`: the raw values of cases of an enumeration (a fixed set written in the program) as a
    /// parenthesized list of SQL string literals, for `IN`. The list must not be empty. Hot statements splice
    /// these on every call, so they are built without Foundation and specialized where they are used.
    @inlinable
    public static func list<Value: RawRepresentable & CaseIterable>(_ values: some Sequence<Value>) -> PostgresStaticSQL
    where Value.RawValue == String {
        var text = "("
        for value in values {
            if text.utf8.count > 1 { text += ", " }
            text += quoteLiteral(value.rawValue)
        }
        precondition(text.utf8.count > 1, "an SQL IN list needs at least one value")
        return PostgresStaticSQL(text: text + ")")
    }

    /// `'a'`: the raw value of one case of an enumeration as an SQL string literal.
    @inlinable
    public static func literal<Value: RawRepresentable & CaseIterable>(_ value: Value) -> PostgresStaticSQL
    where Value.RawValue == String {
        PostgresStaticSQL(text: quoteLiteral(value.rawValue))
    }

    @usableFromInline
    init(text: String) { self.text = text }

    public var description: String { text }
}

/// `'text'` with embedded quotes doubled.
@usableFromInline
func quoteLiteral(_ text: String) -> String {
    quoted(text, by: "'", dropping: nil)
}

/// `"name"` with embedded quotes doubled; a NUL is dropped (PostgreSQL identifiers cannot hold it).
func quoteIdentifier(_ name: String) -> String {
    quoted(name, by: "\"", dropping: "\u{0}")
}

/// `text` between two `quote`s, each `quote` inside doubled and each `dropped` left out.
@usableFromInline
func quoted(_ text: String, by quote: Unicode.Scalar, dropping dropped: Unicode.Scalar?) -> String {
    let mark = UInt8(ascii: quote)
    let skip = dropped.map { UInt8(ascii: $0) }
    if !text.utf8.contains(where: { $0 == mark || $0 == skip }) { return String(quote) + text + String(quote) }
    var bytes: [UInt8] = [mark]
    bytes.reserveCapacity(text.utf8.count + 2)
    for byte in text.utf8 where byte != skip {
        bytes.append(byte)
        if byte == mark { bytes.append(mark) }
    }
    bytes.append(mark)
    return String(decoding: bytes, as: UTF8.self)
}

/// Shifts every `$n` outside quotes and `--` comments by `offset`. Fragments are written by this module's callers,
/// so a simple scan that skips '...', "..." and comments to the end of their line is enough (an apostrophe in a
/// comment must not open a quote).
private func renumberPlaceholders(_ sql: String, by offset: Int) -> String {
    var result = ""
    var quote: Character?
    var index = sql.startIndex
    while index < sql.endIndex {
        let char = sql[index]
        if let open = quote {
            if char == open { quote = nil }
            result.append(char)
            index = sql.index(after: index)
        } else if char == "-", sql[sql.index(after: index)...].first == "-" {
            let end = sql[index...].firstIndex(of: "\n") ?? sql.endIndex
            result += sql[index..<end]
            index = end
        } else if char == "'" || char == "\"" {
            quote = char
            result.append(char)
            index = sql.index(after: index)
        } else if char == "$" {
            var end = sql.index(after: index)
            while end < sql.endIndex, sql[end].isASCII, sql[end].isNumber { end = sql.index(after: end) }
            if let number = Int(sql[sql.index(after: index)..<end]) {
                result += "$\(number + offset)"
            } else {
                result += sql[index..<end]
            }
            index = end == index ? sql.index(after: index) : end
        } else {
            result.append(char)
            index = sql.index(after: index)
        }
    }
    return result
}
