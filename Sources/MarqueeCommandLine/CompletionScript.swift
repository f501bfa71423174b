// Shell completion scripts for bash, zsh and fish, written from the same command tree as `--help`, so a command,
// a subcommand, a flag or an option's choices added to the tree completes without touching a script. Each script
// walks the words typed so far down the tree to a command path, then offers that command's subcommands, or its
// flags, or the choices of the option just typed (files for an option of free value).

/// What a command path completes to, flattened from a command tree.
struct CompletionEntry {
    /// The words from the root, e.g. `marquee app add`.
    let path: String
    /// Subcommand names, for a group.
    let subcommands: [(name: String, summary: String)]
    /// `--name` flags and options of a leaf, with whether each takes a value and its choices.
    let options: [(name: String, takesValue: Bool, choices: [String], help: String)]
}

/// Writes completion scripts for a command tree.
public enum CompletionScript {
    /// The shells a script can be written for.
    public static let shells = ["bash", "zsh", "fish"]

    /// The script for `shell` (one of `shells`), or nil for another shell.
    public static func script(for root: Command, shell: String) -> String? {
        switch shell {
        case "bash": bash(root)
        case "zsh": zsh(root)
        case "fish": fish(root)
        default: nil
        }
    }

    static func entries(_ root: Command) -> [CompletionEntry] {
        var entries: [CompletionEntry] = []
        func walk(_ command: Command, path: String) {
            var options: [(name: String, takesValue: Bool, choices: [String], help: String)] = []
            if let ownHelp = command.ownHelp {
                // A command that reads its own flags lists them in its help text.
                var seen: Set<String> = []
                for match in ownHelp.matches(of: /(?m)^\s+--([a-z0-9][a-z0-9-]*)( [A-Z])?/) where seen.insert(String(match.1)).inserted {
                    options.append((String(match.1), match.2 != nil, [], ""))
                }
            }
            for argument in command.arguments {
                switch argument.kind {
                case .flag: options.append((argument.name, false, [], argument.help))
                case .option: options.append((argument.name, true, argument.choices ?? [], argument.help))
                case .positional: break
                }
            }
            options.append(("help", false, [], "Show this help."))
            if command.version != nil { options.append(("version", false, [], "Print the version and the commit built.")) }
            entries.append(CompletionEntry(path: path, subcommands: command.subcommands.map { ($0.name, $0.summary) }, options: options))
            for sub in command.subcommands { walk(sub, path: path + " " + sub.name) }
        }
        walk(root, path: root.name)
        return entries
    }

    /// The shell-safe function name of a program.
    private static func function(_ root: Command) -> String {
        "_" + root.name.map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined()
    }

    /// Single-quoted for a POSIX shell.
    private static func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

    /// The words one command path offers: its subcommands, else its flags.
    private static func words(_ entry: CompletionEntry) -> String {
        (entry.subcommands.map(\.name) + entry.options.map { "--" + $0.name }).joined(separator: " ")
    }

    static func bash(_ root: Command) -> String {
        let entries = entries(root)
        let name = function(root)
        var lines = [
            "# bash completion for \(root.name), written by '\(root.name) completion bash'.",
            "# Load it with: source <(\(root.name) completion bash)",
            "\(name)() {",
            "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path=\(quoted(root.name)) i",
            "  for ((i = 1; i < COMP_CWORD; i++)); do",
            "    case \"$path ${COMP_WORDS[i]}\" in",
        ]
        let groups = entries.filter { $0.path != root.name }.map { quoted($0.path) }
        if !groups.isEmpty { lines.append("      \(groups.joined(separator: "|"))) path=\"$path ${COMP_WORDS[i]}\" ;;") }
        lines += ["    esac", "  done", "  case \"$path $prev\" in"]
        for entry in entries {
            for option in entry.options where option.takesValue {
                let action =
                    option.choices.isEmpty
                    ? "COMPREPLY=($(compgen -f -- \"$cur\"))"
                    : "COMPREPLY=($(compgen -W \(quoted(option.choices.joined(separator: " "))) -- \"$cur\"))"
                lines.append("    \(quoted(entry.path + " --" + option.name))) \(action); return ;;")
            }
        }
        lines += ["  esac", "  case \"$path\" in"]
        for entry in entries {
            lines.append("    \(quoted(entry.path))) COMPREPLY=($(compgen -W \(quoted(words(entry))) -- \"$cur\")) ;;")
        }
        lines += ["  esac", "}", "complete -F \(name) \(root.name)", ""]
        return lines.joined(separator: "\n")
    }

    static func zsh(_ root: Command) -> String {
        let entries = entries(root)
        let name = function(root)
        var lines = [
            "#compdef \(root.name)",
            "# zsh completion for \(root.name), written by '\(root.name) completion zsh'.",
            "# Load it with: source <(\(root.name) completion zsh), or save it as _\(root.name) in a directory of $fpath.",
            "\(name)() {",
            "  local path_=\(quoted(root.name)) word i",
            "  local -a candidates",
            "  for ((i = 2; i < CURRENT; i++)); do",
            "    word=${words[i]}",
            "    case \"$path_ $word\" in",
        ]
        let groups = entries.filter { $0.path != root.name }.map { quoted($0.path) }
        if !groups.isEmpty { lines.append("      \(groups.joined(separator: "|"))) path_=\"$path_ $word\" ;;") }
        lines += ["    esac", "  done", "  case \"$path_ ${words[CURRENT-1]}\" in"]
        for entry in entries {
            for option in entry.options where option.takesValue {
                let action =
                    option.choices.isEmpty ? "_files" : "candidates=(\(option.choices.map(quoted).joined(separator: " "))); compadd -a candidates"
                lines.append("    \(quoted(entry.path + " --" + option.name))) \(action); return ;;")
            }
        }
        lines += ["  esac", "  case \"$path_\" in"]
        for entry in entries {
            let candidates = (entry.subcommands.map(\.name) + entry.options.map { "--" + $0.name }).map(quoted).joined(separator: " ")
            lines.append("    \(quoted(entry.path))) candidates=(\(candidates)) ;;")
        }
        lines += ["  esac", "  compadd -a candidates", "}", "compdef \(name) \(root.name)", ""]
        return lines.joined(separator: "\n")
    }

    static func fish(_ root: Command) -> String {
        let entries = entries(root)
        let pathFunction = "__\(function(root).dropFirst())_path"
        var lines = [
            "# fish completion for \(root.name), written by '\(root.name) completion fish'.",
            "# Load it with: \(root.name) completion fish | source",
            "function \(pathFunction)",
            "    set -l path \(quoted(root.name))",
            "    for word in (commandline -opc)[2..-1]",
            "        switch \"$path $word\"",
        ]
        let groups = entries.filter { $0.path != root.name }.map { quoted($0.path) }
        if !groups.isEmpty {
            lines += ["            case \(groups.joined(separator: " "))", "                set path \"$path $word\""]
        }
        lines += ["        end", "    end", "    echo $path", "end", "complete -c \(root.name) -f"]
        for entry in entries {
            let condition = "-n \(quoted("test (\(pathFunction)) = \(quoted(entry.path))"))"
            for sub in entry.subcommands {
                lines.append("complete -c \(root.name) \(condition) -a \(quoted(sub.name)) -d \(quoted(sub.summary))")
            }
            for option in entry.options {
                var line = "complete -c \(root.name) \(condition) -l \(option.name)"
                if option.takesValue { line += option.choices.isEmpty ? " -r -F" : " -x -a \(quoted(option.choices.joined(separator: " ")))" }
                if !option.help.isEmpty { line += " -d \(quoted(option.help))" }
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
