import MarqueeCommandLine
import Testing

private let add = Command(
    "add", summary: "Register an app.",
    arguments: [
        .option("bundle", value: "ID", help: "Bundle id.", required: true),
        .option("environment", help: "APNs environment.", default: "development", choices: ["development", "production"]),
        .option("database-url", value: "URL", help: "PostgreSQL URL.", environment: "MARQUEE_DATABASE_URL", required: true),
        .option("topic", help: "A topic.", repeatable: true),
        .option("limit", help: "Page size."),
        .flag("dry-run", help: "Only say what would happen."),
    ]
) { _ in }

private let show = Command("show", summary: "Show an app.", arguments: [.positional("id", help: "App id.")]) { _ in }
private let root = Command("marquee", summary: "Marquee.", subcommands: [Command("app", summary: "Apps.", subcommands: [add, show])])

private func parse(_ words: [String], environment: [String: String] = [:]) throws -> Invocation {
    try CommandParser(root: root, environment: environment).parse(words)
}

private func arguments(_ words: [String], environment: [String: String] = ["MARQUEE_DATABASE_URL": "postgresql://db"]) throws -> ParsedArguments {
    guard case .run(_, let parsed) = try parse(words, environment: environment) else {
        Issue.record("expected a runnable command")
        throw UsageError("no command", commandPath: [])
    }
    return parsed
}

private func usageMessage(_ words: [String], environment: [String: String] = ["MARQUEE_DATABASE_URL": "postgresql://db"]) -> String? {
    do {
        _ = try CommandParser(root: root, environment: environment).parse(words)
        return nil
    } catch {
        return error.message
    }
}

@Suite struct CommandParserTests {
    @Test func optionsFlagsRepeatsAndInlineValues() throws {
        let parsed = try arguments([
            "app", "add", "--bundle", "com.example.app", "--environment=production",
            "--topic", "a", "--topic", "b", "--dry-run", "--json",
        ])
        #expect(parsed.commandPath == ["marquee", "app", "add"])
        #expect(parsed.string("bundle") == "com.example.app")
        #expect(parsed.string("environment") == "production")
        #expect(parsed.strings("topic") == ["a", "b"])
        #expect(parsed.flag("dry-run"))
        #expect(parsed.json)
    }

    @Test func environmentAndDefaultsFillWhatIsAbsent() throws {
        let parsed = try arguments(["app", "add", "--bundle", "b"])
        #expect(parsed.string("database-url") == "postgresql://db")
        #expect(parsed.string("environment") == "development")
        #expect(!parsed.flag("dry-run"))
        let explicit = try arguments(["app", "add", "--bundle", "b", "--database-url", "postgresql://other"])
        #expect(explicit.string("database-url") == "postgresql://other")
    }

    @Test func usageErrorsNameTheArgument() {
        #expect(usageMessage(["app", "add"]) == "missing --bundle")
        #expect(usageMessage(["app", "add", "--bundle", "b"], environment: [:]) == "missing --database-url (or set MARQUEE_DATABASE_URL)")
        #expect(
            usageMessage(["app", "add", "--bundle", "b", "--environment", "staging"])
                == "--environment must be one of development, production, not 'staging'")
        #expect(usageMessage(["app", "add", "--bundle", "b", "--color"]) == "unknown option --color")
        #expect(usageMessage(["app", "add", "--bundle"]) == "--bundle needs a ID")
        #expect(usageMessage(["app", "add", "--bundle", "a", "--bundle", "b"]) == "--bundle given twice")
        #expect(usageMessage(["app", "add", "--bundle", "b", "--dry-run=yes"]) == "--dry-run takes no value")
        #expect(usageMessage(["app", "remove"]) == "unknown command 'remove' (commands: add, show)")
        #expect(usageMessage(["app", "show", "1", "2"]) == "unexpected argument '2'")
        #expect(usageMessage(["app", "show"]) == "missing ID")
    }

    @Test func integersAreCheckedAgainstTheirRange() throws {
        let parsed = try arguments(["app", "add", "--bundle", "b", "--limit", "500"])
        #expect(throws: UsageError.self) { try parsed.int("limit", in: 1...100) }
        #expect(try arguments(["app", "add", "--bundle", "b", "--limit", "50"]).int("limit", in: 1...100) == 50)
        #expect(throws: UsageError.self) { try arguments(["app", "add", "--bundle", "b", "--limit", "x"]).int("limit") }
    }

    @Test func positionalsAfterDoubleDashAreNotOptions() throws {
        let parsed = try arguments(["app", "show", "--", "--odd-id"])
        #expect(parsed.string("id") == "--odd-id")
    }

    @Test func helpIsPrintedForEveryLevel() throws {
        guard case .help(let top) = try parse([]) else {
            Issue.record("expected help")
            return
        }
        #expect(top.contains("Usage: marquee COMMAND"))
        #expect(top.contains("app  Apps."))
        guard case .help(let group) = try parse(["app", "--help"]) else {
            Issue.record("expected help")
            return
        }
        #expect(group.contains("add   Register an app."))
        guard case .help(let leaf) = try parse(["app", "add", "--bundle", "x", "--help"]) else {
            Issue.record("expected help")
            return
        }
        #expect(leaf.contains("--bundle ID"))
        #expect(leaf.contains("[required]"))
        #expect(leaf.contains("(development|production) [default: development]"))
        #expect(leaf.contains("[env: MARQUEE_DATABASE_URL]"))
        #expect(leaf.contains("--json"))
    }
}

@Suite struct OwnFlagsCommandTests {
    private let root = Command(
        "marquee", summary: "Marquee.",
        subcommands: [
            Command("simulator", summary: "Run it.", helpText: "usage: marquee simulator [options]") { _ in }
        ])

    @Test func everyWordAfterTheNameIsHandedOver() throws {
        guard
            case .runWithWords(let command, let words) = try CommandParser(root: root, environment: [:])
                .parse(["simulator", "--quota", "5", "--relaxed", "--", "x"])
        else {
            Issue.record("expected the command to get its words")
            return
        }
        #expect(command.name == "simulator")
        #expect(words == ["--quota", "5", "--relaxed", "--", "x"])
    }

    @Test func helpIsTheCommandsOwnText() throws {
        guard case .help(let text) = try CommandParser(root: root, environment: [:]).parse(["simulator", "--quota", "5", "--help"]) else {
            Issue.record("expected help")
            return
        }
        #expect(text == "usage: marquee simulator [options]")
    }
}
