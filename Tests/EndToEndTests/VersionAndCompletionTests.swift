import Foundation
import MarqueeTestSupport
import Testing

/// `marquee --version` (VERSION and the commit built) and `marquee completion`, as the built binary prints them.
@Suite(.enabled(if: MarqueeProcess.available))
struct VersionAndCompletionTests {
    /// Runs a program to completion; its standard output, and its exit status.
    static func run(_ program: String, _ arguments: [String], in directory: URL = MarqueeProcess.repositoryRoot) throws -> (String, Int32) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let output = FileManager.default.temporaryDirectory.appending(path: "marquee-run-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        process.waitUntilExit()
        return (try String(contentsOf: output, encoding: .utf8), process.terminationStatus)
    }

    @Test func versionIsTheVersionFileAndTheCommitBuilt() async throws {
        let root = MarqueeProcess.repositoryRoot
        let version = try String(contentsOf: root.appending(path: "VERSION"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(version.wholeMatch(of: /[0-9]+\.[0-9]+\.[0-9]+/) != nil)
        var commit = "unknown"
        if FileManager.default.fileExists(atPath: root.appending(path: ".git").path) {
            let (head, status) = try Self.run("/usr/bin/git", ["rev-parse", "HEAD"])
            #expect(status == 0)
            commit = head.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let printed = try await MarqueeProcess.run(["--version"], databaseURL: nil)
        #expect(printed.status == 0)
        #expect(printed.stdout == "marquee \(version) (commit \(commit))\n")
        #expect(try await MarqueeProcess.run(["--help"], databaseURL: nil).stdout.contains("--version"))
    }

    /// The embedding tool reads a branch from a loose ref, from packed-refs, a detached HEAD, and says `unknown` without .git.
    @Test func theEmbeddedCommitComesFromHeadAndTheRefItNames() throws {
        let tool = MarqueeProcess.repositoryRoot.appending(path: ".build/debug/SourceEmbedder").path
        let folder = FileManager.default.temporaryDirectory.appending(path: "marquee-version-\(UUID().uuidString)")
        let git = folder.appending(path: "git")
        try FileManager.default.createDirectory(at: git.appending(path: "refs/heads"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let versionFile = folder.appending(path: "VERSION")
        try "1.2.3\n".write(to: versionFile, atomically: true, encoding: .utf8)
        let output = folder.appending(path: "out.swift")
        func embedded() throws -> String {
            let (_, status) = try Self.run(tool, ["version", output.path, versionFile.path, git.path])
            #expect(status == 0)
            let source = try String(contentsOf: output, encoding: .utf8)
            #expect(source.contains("let embeddedVersion: String = \"1.2.3\""))
            return try #require(source.firstMatch(of: /embeddedCommit: String = "([^"]*)"/)).1.description
        }
        let (loose, packed) = (String(repeating: "a", count: 40), String(repeating: "b", count: 40))
        #expect(try embedded() == "unknown")
        try "ref: refs/heads/main\n".write(to: git.appending(path: "HEAD"), atomically: true, encoding: .utf8)
        try "# pack-refs with: peeled\n\(packed) refs/heads/main\n".write(to: git.appending(path: "packed-refs"), atomically: true, encoding: .utf8)
        #expect(try embedded() == packed)
        try "\(loose)\n".write(to: git.appending(path: "refs/heads/main"), atomically: true, encoding: .utf8)
        #expect(try embedded() == loose)
        try "\(packed)\n".write(to: git.appending(path: "HEAD"), atomically: true, encoding: .utf8)
        #expect(try embedded() == packed)
    }

    /// The bash script completes a command, a subcommand, a flag and an option's choices.
    @Test func bashCompletesCommandsSubcommandsAndFlags() async throws {
        let script = try await MarqueeProcess.run(["completion", "bash"], databaseURL: nil)
        #expect(script.status == 0)
        let file = FileManager.default.temporaryDirectory.appending(path: "marquee-completion-\(UUID().uuidString).bash")
        try script.stdout.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        /// What the completion function offers for the words typed, the last one being completed.
        func complete(_ words: [String]) throws -> [String] {
            let array = words.map { "'\($0)'" }.joined(separator: " ")
            let (output, status) = try Self.run(
                "/bin/bash",
                ["-c", "source '\(file.path)'; COMP_WORDS=(\(array)); COMP_CWORD=\(words.count - 1); _marquee; printf '%s\\n' \"${COMPREPLY[@]}\""])
            #expect(status == 0)
            return output.split(separator: "\n").map(String.init).sorted()
        }
        #expect(try complete(["marquee", "ap"]) == ["apns", "app"])
        #expect(try complete(["marquee", "app", "a"]) == ["add"])
        #expect(try complete(["marquee", "app", "add", "--bu"]) == ["--bundle"])
        #expect(try complete(["marquee", "app", "add", "--environment", ""]) == ["development", "production", "sandbox"])
        #expect(try complete(["marquee", "event", "list", "--kind", "m"]) == ["match"])
        #expect(try complete(["marquee", "serve", "--listen", "127.0.0.1:0", "--grace"]) == ["--grace-period"])
        #expect(try complete(["marquee", "completion", "--h"]) == ["--help"])
        #expect(try complete(["marquee", "--ver"]) == ["--version"])
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
