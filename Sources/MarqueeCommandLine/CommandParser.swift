// Walks the command tree with the words of the command line and checks every argument.
import Foundation

/// What the command line asks for.
public enum Invocation: Sendable {
    /// Print this help text and exit 0.
    case help(String)
    /// Run the command.
    case run(Command, ParsedArguments)
    /// Run a command that reads its own flags.
    case runWithWords(Command, [String])
}

/// Parses a command line against a command tree.
public struct CommandParser: Sendable {
    public let root: Command
    public let environment: [String: String]

    public init(root: Command, environment: [String: String]) {
        self.root = root
        self.environment = environment
    }

    /// `words` excludes the program name.
    public func parse(_ words: [String]) throws(UsageError) -> Invocation {
        var command = root
        var path = [root.name]
        var remaining = words[...]
        // Descend through groups.
        while !command.subcommands.isEmpty {
            guard let word = remaining.first else { return .help(HelpFormatter.help(for: command, path: path)) }
            if word == "--help" || word == "-h" || word == "help" { return .help(HelpFormatter.help(for: command, path: path)) }
            if word == "--version", let version = command.version { return .help(version) }
            guard let next = command.subcommands.first(where: { $0.name == word }) else {
                let known = command.subcommands.map(\.name).joined(separator: ", ")
                throw UsageError("unknown command '\(word)' (commands: \(known))", commandPath: path)
            }
            command = next
            path.append(word)
            remaining = remaining.dropFirst()
        }
        if let ownHelp = command.ownHelp {
            if remaining.contains("--help") || remaining.contains("-h") { return .help(ownHelp) }
            return .runWithWords(command, Array(remaining))
        }
        if remaining.contains("--help") || remaining.contains("-h") {
            return .help(HelpFormatter.help(for: command, path: path))
        }
        return .run(command, try parseArguments(Array(remaining), of: command, path: path))
    }

    private func parseArguments(_ words: [String], of command: Command, path: [String]) throws(UsageError) -> ParsedArguments {
        var values: [String: [String]] = [:]
        var flags: Set<String> = []
        let positionals = command.arguments.filter { $0.kind == .positional }
        var positionalIndex = 0
        var index = 0
        var optionsEnded = false
        while index < words.count {
            let word = words[index]
            index += 1
            if !optionsEnded && word == "--" {
                optionsEnded = true
                continue
            }
            if !optionsEnded && word.hasPrefix("--") {
                var name = String(word.dropFirst(2))
                var inlineValue: String?
                if let equals = name.firstIndex(of: "=") {
                    inlineValue = String(name[name.index(after: equals)...])
                    name = String(name[..<equals])
                }
                guard let argument = command.arguments.first(where: { $0.name == name && $0.kind != .positional }) else {
                    throw UsageError("unknown option --\(name)", commandPath: path)
                }
                switch argument.kind {
                case .flag:
                    guard inlineValue == nil else { throw UsageError("--\(name) takes no value", commandPath: path) }
                    flags.insert(name)
                case .option(let valueName, let repeatable):
                    let value: String
                    if let inlineValue {
                        value = inlineValue
                    } else {
                        guard index < words.count else { throw UsageError("--\(name) needs a \(valueName)", commandPath: path) }
                        value = words[index]
                        index += 1
                    }
                    if !repeatable && values[name] != nil {
                        throw UsageError("--\(name) given twice", commandPath: path)
                    }
                    values[name, default: []].append(value)
                case .positional:
                    break
                }
                continue
            }
            guard positionalIndex < positionals.count else {
                throw UsageError("unexpected argument '\(word)'", commandPath: path)
            }
            values[positionals[positionalIndex].name] = [word]
            positionalIndex += 1
        }
        for argument in command.arguments where argument.kind != .flag {
            if values[argument.name] == nil {
                if let variable = argument.environment, let value = environment[variable], !value.isEmpty {
                    values[argument.name] = [value]
                } else if let value = argument.defaultValue {
                    values[argument.name] = [value]
                }
            }
            let display = argument.kind == .positional ? argument.name.uppercased() : "--\(argument.name)"
            if argument.isRequired && values[argument.name] == nil {
                let hint = argument.environment.map { " (or set \($0))" } ?? ""
                throw UsageError("missing \(display)\(hint)", field: argument.name, commandPath: path)
            }
            if let choices = argument.choices {
                for value in values[argument.name] ?? [] where !choices.contains(value) {
                    throw UsageError(
                        "\(display) must be one of \(choices.joined(separator: ", ")), not '\(value)'", field: argument.name,
                        commandPath: path)
                }
            }
        }
        return ParsedArguments(commandPath: path, values: values, flags: flags)
    }
}

/// Renders `--help` text.
enum HelpFormatter {
    static func help(for command: Command, path: [String]) -> String {
        var lines: [String] = []
        let usageTail: String
        if !command.subcommands.isEmpty {
            usageTail = " COMMAND [--help]"
        } else {
            let positionals = command.arguments.filter { $0.kind == .positional }
                .map { $0.isRequired ? $0.name.uppercased() : "[\($0.name.uppercased())]" }
            usageTail = (positionals.isEmpty ? "" : " " + positionals.joined(separator: " ")) + " [OPTIONS]"
        }
        lines.append("Usage: \(path.joined(separator: " "))\(usageTail)")
        lines.append("")
        lines.append(command.summary)
        if let discussion = command.discussion {
            lines.append("")
            lines.append(discussion)
        }
        if !command.subcommands.isEmpty {
            // Before the commands, which end the text: scripts read every line after `Commands:` as a command.
            if command.version != nil {
                lines.append("")
                lines.append("Options:")
                lines.append("  --version  Print the version and the commit built.")
                lines.append("  --help     Show this help.")
            }
            lines.append("")
            lines.append("Commands:")
            let width = command.subcommands.map(\.name.count).max() ?? 0
            for sub in command.subcommands {
                lines.append("  \(sub.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(sub.summary)")
            }
        } else {
            let rows: [(String, String)] =
                command.arguments.map { argument in
                    let left: String
                    switch argument.kind {
                    case .option(let valueName, _): left = "--\(argument.name) \(valueName)"
                    case .flag: left = "--\(argument.name)"
                    case .positional: left = argument.name.uppercased()
                    }
                    var right = argument.help
                    if let choices = argument.choices { right += " (\(choices.joined(separator: "|")))" }
                    if argument.isRequired { right += " [required]" }
                    if let value = argument.defaultValue { right += " [default: \(value)]" }
                    if let variable = argument.environment { right += " [env: \(variable)]" }
                    if case .option(_, true) = argument.kind { right += " [repeatable]" }
                    return (left, right)
                } + [("--help", "Show this help.")]
            let width = rows.map(\.0.count).max() ?? 0
            lines.append("")
            lines.append("Options:")
            for (left, right) in rows {
                lines.append("  \(left.padding(toLength: width, withPad: " ", startingAt: 0))  \(right)")
            }
        }
        return lines.joined(separator: "\n")
    }
}
