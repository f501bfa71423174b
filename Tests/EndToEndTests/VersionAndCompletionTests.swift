import Foundation
import MarqueeTestSupport
import Testing

/// `marquee --version` (VERSION and the commit built) and `marquee completion`, as the built binary prints them.
@Suite(.enabled(if: MarqueeProcess.available))
struct VersionAndCompletionTests {
    /// Runs a program to completion, waiting on a thread of its own (never on the cooperative pool); its standard
    /// output, and its exit status.
    static func run(_ program: String, _ arguments: [String]) async throws -> (String, Int32) {
        let run = try await ChildProcess.run(program, arguments, directory: RepositoryCheckout.root.path, stderr: .discarded)
        return (run.stdout, run.status)
    }

    @Test func versionIsTheVersionFileAndTheCommitBuilt() async throws {
        let root = RepositoryCheckout.root
        let version = try String(contentsOf: root.appending(path: "VERSION"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(version.wholeMatch(of: /[0-9]+\.[0-9]+\.[0-9]+/) != nil)
        var commit = "unknown"
        if FileManager.default.fileExists(atPath: root.appending(path: ".git").path) {
            let (head, status) = try await Self.run("/usr/bin/git", ["rev-parse", "HEAD"])
            #expect(status == 0)
            commit = head.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let printed = try await MarqueeProcess.run(["--version"], databaseURL: nil)
        #expect(printed.status == 0)
        #expect(printed.stdout == "marquee \(version) (commit \(commit))\n")
        #expect(try await MarqueeProcess.run(["--help"], databaseURL: nil).stdout.contains("--version"))
    }

    /// The embedding tool reads a branch from a loose ref, from packed-refs, a detached HEAD, and says `unknown` without .git.
    @Test func theEmbeddedCommitComesFromHeadAndTheRefItNames() async throws {
        let tool = BuiltProducts.path(of: "SourceEmbedder")
        let folder = FileManager.default.temporaryDirectory.appending(path: "marquee-version-\(UUID().uuidString)")
        let git = folder.appending(path: "git")
        try FileManager.default.createDirectory(at: git.appending(path: "refs/heads"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let versionFile = folder.appending(path: "VERSION")
        try "1.2.3\n".write(to: versionFile, atomically: true, encoding: .utf8)
        let output = folder.appending(path: "out.swift")
        func embedded() async throws -> String {
            let (_, status) = try await Self.run(tool, ["version", output.path, versionFile.path, git.path])
            #expect(status == 0)
            let source = try String(contentsOf: output, encoding: .utf8)
            #expect(source.contains("let embeddedVersion: String = \"1.2.3\""))
            return try #require(source.firstMatch(of: /embeddedCommit: String = "([^"]*)"/)).1.description
        }
        let (loose, packed) = (String(repeating: "a", count: 40), String(repeating: "b", count: 40))
        #expect(try await embedded() == "unknown")
        try "ref: refs/heads/main\n".write(to: git.appending(path: "HEAD"), atomically: true, encoding: .utf8)
        try "# pack-refs with: peeled\n\(packed) refs/heads/main\n".write(to: git.appending(path: "packed-refs"), atomically: true, encoding: .utf8)
        #expect(try await embedded() == packed)
        try "\(loose)\n".write(to: git.appending(path: "refs/heads/main"), atomically: true, encoding: .utf8)
        #expect(try await embedded() == loose)
        try "\(packed)\n".write(to: git.appending(path: "HEAD"), atomically: true, encoding: .utf8)
        #expect(try await embedded() == packed)
    }

    /// The bash script completes a command, a subcommand, a flag and an option's choices.
    @Test func bashCompletesCommandsSubcommandsAndFlags() async throws {
        let script = try await MarqueeProcess.run(["completion", "bash"], databaseURL: nil)
        #expect(script.status == 0)
        let file = FileManager.default.temporaryDirectory.appending(path: "marquee-completion-\(UUID().uuidString).bash")
        try script.stdout.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        // One bash for every case: each line of its output is what the completion function offers for one line of
        // words (the last word being completed).
        let cases: [(words: [String], offered: [String])] = [
            (["marquee", "ap"], ["apns", "app"]),
            (["marquee", "app", "a"], ["add"]),
            (["marquee", "app", "add", "--bu"], ["--bundle"]),
            (["marquee", "app", "add", "--environment", ""], ["development", "production", "sandbox"]),
            (["marquee", "event", "list", "--kind", "m"], ["match"]),
            (["marquee", "serve", "--listen", "127.0.0.1:0", "--grace"], ["--grace-period"]),
            (["marquee", "completion", "--h"], ["--help"]),
            (["marquee", "--ver"], ["--version"]),
            (["marquee", "app", "--"], ["--help"]),
        ]
        var program = "source '\(file.path)'\n"
        for (words, _) in cases {
            program += "COMP_WORDS=(\(words.map { "'\($0)'" }.joined(separator: " "))); COMP_CWORD=\(words.count - 1); COMPREPLY=(); _marquee\n"
            program += "printf '%s\\n' \"$(printf '%s ' \"${COMPREPLY[@]}\")\"\n"
        }
        let (output, status) = try await Self.run("/bin/bash", ["-c", program])
        #expect(status == 0)
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == cases.count, "\(output)")
        for ((words, offered), line) in zip(cases, lines) {
            let got = line.split(separator: " ").map(String.init).sorted()
            #expect(got == offered, "completing \(words.joined(separator: " ")) offers \(got)")
        }
    }

    /// zsh and fish get the same tree.
    @Test func zshAndFishScriptsNameTheSameCommands() async throws {
        for shell in ["zsh", "fish"] {
            let script = try await MarqueeProcess.run(["completion", shell], databaseURL: nil)
            #expect(script.status == 0)
            for word in ["'marquee app add'", "bundle", "'marquee channel reconcile'", "completion"] {
                #expect(script.stdout.contains(word), "the \(shell) script lacks \(word)")
            }
        }
        let wrong = try await MarqueeProcess.run(["completion", "tcsh"], databaseURL: nil)
        #expect(wrong.status == 64)
    }
}
