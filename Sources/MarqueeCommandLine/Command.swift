// A small declarative command-line parser for `marquee`: a tree of commands, each with options, flags
// and positional arguments, generated `--help`, environment-variable fallbacks, and usage errors that
// name the argument. No third-party packages can be fetched here, so this replaces swift-argument-parser.

/// One argument a command accepts.
public struct Argument: Sendable {
    public enum Kind: Sendable, Equatable {
        /// `--name VALUE` (or `--name=VALUE`); `repeatable` collects every occurrence.
        case option(valueName: String, repeatable: Bool)
        /// `--name`, true when present.
        case flag
        /// A bare word, in declaration order.
        case positional
    }

    public let name: String
    public let kind: Kind
    public let help: String
    /// An environment variable read when the option is absent.
    public let environment: String?
    public let defaultValue: String?
    public let isRequired: Bool
    /// The values allowed, if the option is an enumeration.
    public let choices: [String]?

    /// `--name VALUE`.
    public static func option(
        _ name: String, value: String = "VALUE", help: String, environment: String? = nil,
        default defaultValue: String? = nil, required: Bool = false, choices: [String]? = nil, repeatable: Bool = false
    ) -> Argument {
        Argument(
            name: name, kind: .option(valueName: value, repeatable: repeatable), help: help, environment: environment,
            defaultValue: defaultValue, isRequired: required, choices: choices)
    }

    /// `--name`.
    public static func flag(_ name: String, help: String) -> Argument {
        Argument(name: name, kind: .flag, help: help, environment: nil, defaultValue: nil, isRequired: false, choices: nil)
    }

    /// A positional argument.
    public static func positional(_ name: String, help: String, required: Bool = true) -> Argument {
        Argument(name: name, kind: .positional, help: help, environment: nil, defaultValue: nil, isRequired: required, choices: nil)
    }
}

/// A command: either a group of subcommands or a leaf that runs.
public struct Command: Sendable {
    public let name: String
    public let summary: String
    public let discussion: String?
    public let arguments: [Argument]
    public let subcommands: [Command]
    public let run: (@Sendable (ParsedArguments) async throws -> Void)?
    /// A command that reads its own flags (given every word after its name) and prints this help text.
    public let ownHelp: String?
    /// What `--version` prints (a group only: the root).
    public let version: String?
    let runWithWords: (@Sendable ([String]) async throws -> Void)?

    /// A group: `marquee app ...`; with a `version`, `marquee --version` prints it.
    public init(_ name: String, summary: String, discussion: String? = nil, version: String? = nil, subcommands: [Command]) {
        self.name = name
        self.summary = summary
        self.discussion = discussion
        self.arguments = []
        self.subcommands = subcommands
        self.run = nil
        self.ownHelp = nil
        self.version = version
        self.runWithWords = nil
    }

    /// A leaf that parses its own flags, e.g. one whose configuration type already reads them.
    public init(
        _ name: String, summary: String, helpText: String, runWithWords: @escaping @Sendable ([String]) async throws -> Void
    ) {
        self.name = name
        self.summary = summary
        self.discussion = nil
        self.arguments = []
        self.subcommands = []
        self.run = nil
        self.ownHelp = helpText
        self.version = nil
        self.runWithWords = runWithWords
    }

    /// A leaf: `marquee app add --bundle ...`. `--help` is added to every leaf, and `--json` unless `json` is
    /// false (a command that prints no result, such as `serve`, which logs until it is stopped).
    public init(
        _ name: String, summary: String, discussion: String? = nil, arguments: [Argument], json: Bool = true,
        run: @escaping @Sendable (ParsedArguments) async throws -> Void
    ) {
        self.name = name
        self.summary = summary
        self.discussion = discussion
        self.arguments = arguments + (json ? [.flag("json", help: "Print the result as JSON.")] : [])
        self.subcommands = []
        self.run = run
        self.ownHelp = nil
        self.version = nil
        self.runWithWords = nil
    }
}

/// The arguments of one invocation, after parsing and validation.
public struct ParsedArguments: Sendable {
    /// The command path, e.g. `["marquee", "app", "add"]`.
    public let commandPath: [String]
    private let values: [String: [String]]
    private let flags: Set<String>

    init(commandPath: [String], values: [String: [String]], flags: Set<String>) {
        self.commandPath = commandPath
        self.values = values
        self.flags = flags
    }

    /// The value of an option or positional (after environment and default), if any.
    public func string(_ name: String) -> String? { values[name]?.last }

    /// Every value of a repeatable option.
    public func strings(_ name: String) -> [String] { values[name] ?? [] }

    /// Whether a flag was given.
    public func flag(_ name: String) -> Bool { flags.contains(name) }

    /// `--json` was given.
    public var json: Bool { flag("json") }

    /// The value of a required option (declared `required: true`, so parsing already checked it).
    public func required(_ name: String) throws(UsageError) -> String {
        guard let value = string(name) else { throw UsageError("missing --\(name)", commandPath: commandPath) }
        return value
    }

    /// An integer option, checked against a range.
    public func int(_ name: String, in range: ClosedRange<Int> = Int.min...Int.max) throws(UsageError) -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            let bounds = range == Int.min...Int.max ? "" : " from \(range.lowerBound) to \(range.upperBound)"
            throw UsageError("--\(name) takes a whole number\(bounds), not '\(text)'", commandPath: commandPath)
        }
        return value
    }

    /// A number of seconds (decimals allowed), checked against a range.
    public func seconds(_ name: String, in range: ClosedRange<Double> = 0...Double.greatestFiniteMagnitude) throws(UsageError) -> Double? {
        guard let text = string(name) else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            let bounds =
                range.upperBound == .greatestFiniteMagnitude ? " of at least \(range.lowerBound)" : " from \(range.lowerBound) to \(range.upperBound)"
            throw UsageError("--\(name) takes a number of seconds\(bounds), not '\(text)'", commandPath: commandPath)
        }
        return value
    }
}

/// The command line is wrong: what is wrong, the argument at fault, and which command's `--help` to read.
public struct UsageError: Error, Sendable, CustomStringConvertible {
    public let message: String
    /// The option (without `--`) or positional (lowercase) at fault; by default the first `--option` the
    /// message names, if any.
    public let field: String?
    public let commandPath: [String]

    public init(_ message: String, field: String? = nil, commandPath: [String]) {
        self.message = message
        self.field = field ?? Self.firstOption(in: message)
        self.commandPath = commandPath
    }

    /// Where to read on: `See 'marquee key create --help'.`
    public var hint: String { "See '\(commandPath.joined(separator: " ")) --help'." }

    public var description: String { "\(message)\n\(hint)" }

    /// `scope` in "missing --scope (or set ...)"; nil when the message names no option.
    static func firstOption(in message: String) -> String? {
        guard let range = message.range(of: "--") else { return nil }
        let name = message[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "-" }
        return name.isEmpty ? nil : String(name)
    }
}
