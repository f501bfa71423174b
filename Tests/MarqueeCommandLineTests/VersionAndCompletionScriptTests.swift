import Testing

@testable import MarqueeCommandLine

/// `--version` on a root that has one, and the completion scripts written from a command tree.
@Suite struct VersionAndCompletionScriptTests {
    static let tree = Command(
        "tool", summary: "A tool.", version: "tool 1.0 (commit abc)",
        subcommands: [
            Command(
                "app", summary: "Apps.",
                subcommands: [
                    Command(
                        "add", summary: "Add one.",
                        arguments: [.option("environment", help: "Where.", choices: ["development", "production"]), .flag("yes", help: "Yes.")]
                    ) { _ in }
                ])
        ])

    @Test func versionIsAnsweredByTheRootOnlyAndHelpEndsWithTheCommands() throws {
        let parser = CommandParser(root: Self.tree, environment: [:])
        guard case .help(let version) = try parser.parse(["--version"]) else {
            Issue.record("--version is not answered")
            return
        }
        #expect(version == "tool 1.0 (commit abc)")
        #expect(throws: UsageError.self) { try parser.parse(["app", "--version"]) }
        guard case .help(let help) = try parser.parse(["--help"]) else {
            Issue.record("--help is not help")
            return
        }
        // Scripts read every line after `Commands:` as a command.
        #expect(help.components(separatedBy: "\nCommands:\n").last == "  app  Apps.")
        #expect(help.contains("  --version  "))
    }

    @Test func everyShellGetsEveryPathFlagAndChoice() throws {
        for shell in CompletionScript.shells {
            let script = try #require(CompletionScript.script(for: Self.tree, shell: shell))
            for word in ["'tool app'", "'tool app add'", "environment", "yes", "development", "production", "version"] {
                #expect(script.contains(word), "the \(shell) script lacks \(word)")
            }
        }
        #expect(CompletionScript.script(for: Self.tree, shell: "tcsh") == nil)
    }
}
