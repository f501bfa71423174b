// `marquee completion bash|zsh|fish`: a completion script written from the command tree `--help` reads, so it
// always knows the commands, subcommands and flags of this binary.
import MarqueeCommandLine
import MarqueeCore

enum CompletionCommand {
    static let command: Command = Command(
        "completion", summary: "Print a shell completion script: bash, zsh or fish.",
        discussion: """
            bash:  source <(marquee completion bash)          (or save it under /etc/bash_completion.d/marquee)
            zsh:   source <(marquee completion zsh)           (after compinit; or save it as _marquee in $fpath)
            fish:  marquee completion fish | source           (or save it as ~/.config/fish/completions/marquee.fish)

            \(ExitCode.help([.success, .usage]))
            """,
        arguments: [.positional("shell", help: "The shell: \(CompletionScript.shells.joined(separator: ", ")).")]
    ) { arguments in
        let shell = try arguments.required("shell")
        guard let script = CompletionScript.script(for: marqueeCommand, shell: shell) else {
            throw UsageError(
                "SHELL must be one of \(CompletionScript.shells.joined(separator: ", ")), not '\(shell)'", field: "shell",
                commandPath: arguments.commandPath)
        }
        if arguments.json {
            Terminal.print(JSONValue.object(["shell": .string(shell), "script": .string(script)]).jsonString)
        } else {
            // print adds the newline the script ends with.
            Terminal.print(String(script.dropLast()))
        }
    }
}
