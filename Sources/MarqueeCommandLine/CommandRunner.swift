// Runs a command tree: parses, prints help, runs the command, and turns every error into a message on
// stderr (or a JSON error on stdout with --json) and a documented exit code.
import Foundation
import MarqueeCore

/// A command failed in a way it can explain: a message, an exit code, and JSON details for `--json`.
public struct CommandFailure: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let exitCode: ExitCode
    /// A machine-readable code, e.g. `channel_not_registered`.
    public let code: String
    public let field: String?
    /// More members of the `error` object for `--json`, e.g. the HTTP status and request id of a refused request.
    public let details: JSONObject

    public init(_ message: String, exitCode: ExitCode = .failure, code: String = "failed", field: String? = nil, details: JSONObject = [:]) {
        self.message = message
        self.exitCode = exitCode
        self.code = code
        self.field = field
        self.details = details
    }

    public var description: String { message }

    /// `{"error": {"code", "message", "field", ...}}`, what `--json` prints for a failure.
    public var json: JSONValue {
        var error: JSONObject = ["code": .string(code), "message": .string(message)]
        // Always present, `null` when no argument is at fault: the API's shape (`{"error": {"code", "message", "field"}}`).
        error["field"] = field.map(JSONValue.string) ?? .null
        for (key, value) in details { error[key] = value }
        return ["error": .object(error)]
    }
}

/// Runs a command tree for `main`.
public enum CommandRunner {
    /// Parses `arguments` (without the program name), runs the command and returns the exit code.
    public static func run(
        _ root: Command, arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment
    ) async -> ExitCode {
        let parser = CommandParser(root: root, environment: environment)
        let invocation: Invocation
        do {
            invocation = try parser.parse(arguments)
        } catch {
            // The words could not be parsed, so neither could --json: it counts where it would as an option.
            report(error, json: arguments.prefix { $0 != "--" }.contains("--json"), program: root.name)
            return .usage
        }
        switch invocation {
        case .help(let text):
            Terminal.print(text)
            return .success
        case .runWithWords(let command, let words):
            do {
                try await command.runWithWords?(words)
                return .success
            } catch let failure as CommandFailure {
                Terminal.error("\(root.name): \(failure.message)")
                return failure.exitCode
            } catch {
                Terminal.error("\(root.name): \(error)")
                return .software
            }
        case .run(let command, let parsed):
            do {
                try await command.run?(parsed)
                return .success
            } catch let failure as CommandFailure {
                report(failure, parsed: parsed, program: root.name)
                return failure.exitCode
            } catch let usage as UsageError {
                report(usage, json: parsed.json, program: root.name)
                return .usage
            } catch {
                report(CommandFailure("\(error)", exitCode: .software, code: "internal"), parsed: parsed, program: root.name)
                return .software
            }
        }
    }

    /// A usage error: with --json, one JSON error (`code: usage`, the argument at fault as `field`) on standard
    /// output; the `--help` hint always goes to standard error.
    private static func report(_ usage: UsageError, json: Bool, program: String) {
        if json {
            Terminal.print(CommandFailure(usage.message, exitCode: .usage, code: "usage", field: usage.field).json.jsonString)
            Terminal.error(usage.hint)
        } else {
            Terminal.error("\(program): \(usage)")
        }
    }

    private static func report(_ failure: CommandFailure, parsed: ParsedArguments, program: String) {
        if parsed.json {
            Terminal.print(failure.json.jsonString)
        } else {
            Terminal.error("\(program): \(failure.message)")
        }
    }
}
