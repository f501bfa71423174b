// Every command's --help lists the exit codes it uses (issue 48): the README promises it of every command,
// and an operator reads them there before scripting a command.
import MarqueeCommandLine
import MarqueeCore
import Testing

@testable import MarqueeCommands

@Suite struct HelpExitCodeTests {
    /// Every command path of the tree, groups included, from the root.
    static func paths(_ command: Command, _ path: [String] = []) -> [[String]] {
        [path] + command.subcommands.flatMap { paths($0, path + [$0.name]) }
    }

    static func help(_ path: [String]) throws -> String {
        guard case .help(let text) = try CommandParser(root: marqueeCommand, environment: [:]).parse(path + ["--help"]) else {
            Issue.record("\(path) --help is not help")
            return ""
        }
        return text
    }

    @Test func everyCommandsHelpListsItsExitCodes() throws {
        let paths = Self.paths(marqueeCommand)
        #expect(paths.count > 40, "\(paths.count) commands")
        for path in paths {
            let help = try Self.help(path)
            #expect(help.contains("Exit codes:\n  0   success"), "marquee \(path.joined(separator: " ")) --help lists no exit codes")
        }
    }

    /// `serve` prints no result, so it takes no --json, and its help does not offer one.
    @Test func serveHasNoJSONFlag() throws {
        let serve = try Self.help(["serve"])
        #expect(!serve.contains("--json"), "\(serve)")
        #expect(serve.contains("78  configuration is missing or invalid"), "\(serve)")
        #expect(throws: UsageError.self) { try CommandParser(root: marqueeCommand, environment: [:]).parse(["serve", "--json"]) }
        for path in [["migrate"], ["key", "create"], ["openapi"], ["simulator"], ["app", "add"]] {
            #expect(try Self.help(path).contains("64  the command line is wrong"), "\(path)")
        }
    }
}

/// One spelling across commands (issue 48): an alert's sound is --alert-sound everywhere (update and end keep
/// --sound as its older spelling), and --api-key says which scope the command needs.
@Suite struct CommandSpellingTests {
    @Test func theAlertSoundHasOneSpellingAndTheKeyItsScope() async throws {
        for path in [["event", "update"], ["event", "end"], ["event", "start"]] {
            #expect(try HelpExitCodeTests.help(path).contains("--alert-sound NAME"), "\(path)")
        }
        for path in [["event", "update"], ["event", "end"], ["event", "reschedule"], ["event", "cancel"]] {
            #expect(try HelpExitCodeTests.help(path).contains("An API key of scope ingest (a feed's) or admin"), "\(path)")
        }
        for path in [["event", "create"], ["event", "start"], ["channel", "delete"], ["status"]] {
            let help = try HelpExitCodeTests.help(path)
            #expect(help.contains("An API key of scope admin") && !help.contains("usually"), "\(path)")
        }
        let parser = CommandParser(root: marqueeCommand, environment: [:])
        guard case .run(_, let both) = try parser.parse(["event", "update", "1", "--patch", "{}", "--alert-sound", "a", "--sound", "b"]),
            case .run(_, let older) = try parser.parse(["event", "update", "1", "--alert-title", "T", "--alert-body", "B", "--sound", "ping"])
        else {
            Issue.record("not a run")
            return
        }
        await #expect(throws: UsageError.self) { try await EventCommands.alert(APIInput(both)) }
        #expect(try await EventCommands.alert(APIInput(older)) == ["title": "T", "body": "B", "sound": "ping"])
    }
}
