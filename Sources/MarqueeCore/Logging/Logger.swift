// A small structured logger: one line per record, JSON lines or logfmt (chosen at start), with a sink
// closure so the executable decides where lines go. Secrets have no way in by accident: device tokens
// are shortened with `LogValue.deviceToken`, and JWTs and keys travel in `Redacted`, which never prints.

import Foundation

/// A structured logger value: level, base metadata, format and sink.
public struct Logger: Sendable {
    /// Severity, lowest first.
    public enum Level: String, Sendable, Comparable, CaseIterable, Codable {
        case debug, info, notice, warning, error

        public static func < (lhs: Level, rhs: Level) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    /// Line format.
    public enum Format: String, Sendable, CaseIterable, Codable {
        /// `{"ts":"…","level":"info","msg":"…","key":value}`
        case json
        /// `ts=… level=info msg="…" key=value`
        case logfmt
    }

    public var level: Level
    public let format: Format
    /// Metadata added to every record, before the record's own.
    public private(set) var metadata: [(key: String, value: LogValue)]
    private let clock: any WallClock
    private let sink: @Sendable (String) -> Void

    /// `sink` receives each line without its trailing newline.
    public init(
        level: Level = .info, format: Format = .logfmt, clock: any WallClock = SystemWallClock(),
        metadata: KeyValuePairs<String, LogValue> = [:], sink: @escaping @Sendable (String) -> Void
    ) {
        self.level = level
        self.format = format
        self.clock = clock
        self.metadata = metadata.map { ($0.key, $0.value) }
        self.sink = sink
    }

    /// A logger with more base metadata (a key already present is replaced).
    public func with(_ extra: KeyValuePairs<String, LogValue>) -> Logger {
        var copy = self
        for (key, value) in extra {
            copy.metadata.removeAll { $0.key == key }
            copy.metadata.append((key, value))
        }
        return copy
    }

    public func isEnabled(_ level: Level) -> Bool { level >= self.level }

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        guard isEnabled(level) else { return }
        sink(line(level: level, message: message(), metadata: metadata))
    }

    public func debug(_ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        log(.debug, message(), metadata)
    }

    public func info(_ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        log(.info, message(), metadata)
    }

    public func notice(_ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        log(.notice, message(), metadata)
    }

    public func warning(_ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        log(.warning, message(), metadata)
    }

    public func error(_ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        log(.error, message(), metadata)
    }

    /// The record's line: time, level and message, the logger's metadata, then the record's own.
    private func line(level: Level, message: String, metadata extra: KeyValuePairs<String, LogValue>) -> String {
        let time = ActivityDate.formatISO8601(milliseconds: ActivityDate.milliseconds(of: clock.now))
        switch format {
        case .json:
            var object: JSONObject = ["ts": .string(time), "level": .string(level.rawValue), "msg": .string(message)]
            for (key, value) in metadata { object[key] = value.json }
            for (key, value) in extra { object[key] = value.json }
            return JSONValue.object(object).jsonString
        case .logfmt:
            var line = "ts=\(time) level=\(level.rawValue) msg=\(LogValue.string(message).logfmt)"
            for (key, value) in metadata { line += " \(Self.logfmtKey(key))=\(value.logfmt)" }
            for (key, value) in extra { line += " \(Self.logfmtKey(key))=\(value.logfmt)" }
            return line
        }
    }

    private static func logfmtKey(_ key: String) -> String {
        if !key.isEmpty, key.utf8.allSatisfy({ $0 > 0x20 && $0 != UInt8(ascii: "=") && $0 != UInt8(ascii: "\"") }) { return key }
        let cleaned = key.unicodeScalars.map { $0.value > 0x20 && $0 != "=" && $0 != "\"" ? Character($0) : "_" }
        return cleaned.isEmpty ? "_" : String(cleaned)
    }
}

/// A metadata value. Build secrets only through `deviceToken(_:)` or `Redacted`.
public enum LogValue: Sendable, Equatable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
    ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral
{
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    public static func int(_ value: Int) -> LogValue { .int(Int64(value)) }

    /// The first 8 characters of a device or push-to-start token, then "…": enough to correlate, not to send.
    public static func deviceToken(_ token: String) -> LogValue {
        .string(token.count > 8 ? String(token.prefix(8)) + "…" : token)
    }

    /// A secret: always logged as `<redacted>`.
    public static func redacted<Value>(_ secret: Redacted<Value>) -> LogValue { .string(Redacted<Value>.placeholder) }

    var json: JSONValue {
        switch self {
        case .string(let value): .string(value)
        case .int(let value): .int(value)
        case .double(let value): .double(value)
        case .bool(let value): .bool(value)
        }
    }

    var logfmt: String {
        switch self {
        case .int(let value): return String(value)
        case .double(let value): return value.description
        case .bool(let value): return String(value)
        case .string(let value):
            let needsQuotes = value.isEmpty || value.unicodeScalars.contains { $0.value <= 0x20 || $0 == "=" || $0 == "\"" || $0 == "\\" }
            return needsQuotes ? JSONValue.string(value).jsonString : value
        }
    }
}

/// A secret (a JWT, a private key, an API key) that prints as `<redacted>` in every description,
/// interpolation and dump. Read it only through `value`, at the point of use.
public struct Redacted<Value: Sendable>: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    static var placeholder: String { "<redacted>" }

    public let value: Value

    public init(_ value: Value) { self.value = value }

    public var description: String { Self.placeholder }
    public var debugDescription: String { Self.placeholder }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
