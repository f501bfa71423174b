import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// What scripts rely on (issue 17): with --json every command prints one JSON document on stdout, on good
/// input and bad; without it, stdout carries only the data, so `$(marquee ...)` captures nothing else.
// One test at a time: each starts serve processes and a simulator, and the whole suite runs in parallel.
@Suite(.serialized, .enabled(if: MarqueeProcess.available))
struct CLIOutputTests {
    /// Runs the CLI against one harness: its database, its serve (the API commands) and its simulator (apns).
    struct CLI {
        let h: BroadcastHarness

        var environment: [String: String] {
            let files = h.simulator.files
            return h.simulator.environmentVariables.merging([
                "MARQUEE_URL": "http://127.0.0.1:\(h.ports[0])", "MARQUEE_API_KEY": h.adminKey,
                "MARQUEE_APNS_TEAM_ID": files.teamID, "MARQUEE_APNS_KEY_ID": files.keyID, "MARQUEE_APNS_KEY_FILE": files.signingKeyFile,
                "MARQUEE_APNS_BUNDLE": BroadcastHarness.bundleID,
            ]) { $1 }
        }

        func run(_ words: [String]) async throws -> ChildProcess.Outcome {
            try await MarqueeProcess.run(words, databaseURL: h.databaseURL, environment: environment)
        }

        /// Runs `words --json` and returns the one JSON document it printed (recording an issue otherwise).
        @discardableResult
        func json(_ words: [String], succeeds: Bool = true) async throws -> JSONValue {
            let result = try await run(words + ["--json"])
            if succeeds { #expect(result.status == 0, "\(words): exit \(result.status): \(result.stderr)") }
            // The parser refuses anything after the first value, so this is one document and nothing else.
            return try #require(try? JSONValue(parsing: result.stdout), "\(words): stdout is not one JSON document: \(result.stdout)")
        }

        /// Every command that runs and exits (`serve` and `simulator` run until stopped), found from `--help`.
        func leafCommands(_ path: [String] = []) async throws -> [[String]] {
            let help = try await run(path + ["--help"]).stdout
            guard let commands = help.components(separatedBy: "\nCommands:\n").dropFirst().first else { return [path] }
            var leaves: [[String]] = []
            for line in commands.split(separator: "\n") {
                guard let name = line.split(separator: " ").first.map(String.init), !["serve", "simulator"].contains(name) else { continue }
                leaves += try await leafCommands(path + [name])
            }
            return leaves
        }
    }

    @Test func everyCommandPrintsOneJSONDocumentOnGoodAndBadInput() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLI(h: h)
            let leaves = try await cli.leafCommands()
            #expect(leaves.count == 40 && leaves.contains(["apns", "channels", "create"]), "\(leaves)")
            var covered: Set<[String]> = []
            func good(_ words: [String], succeeds: Bool = true) async throws -> JSONValue {
                if let leaf = leaves.first(where: { words.starts(with: $0) }) { covered.insert(leaf) }
                return try await cli.json(words, succeeds: succeeds)
            }

            _ = try await good(["migrate"])
            let key = try await good(["key", "create", "--scope", "ingest", "--name", "feed"])
            _ = try await good(["key", "list"])
            _ = try await good(["key", "revoke", try #require(key["id"]?.stringValue)])
            let files = h.simulator.files
            let other = try await good([
                "app", "add", "--bundle", "com.example.other", "--environment", "sandbox", "--team-id", files.teamID,
                "--key-id", files.keyID, "--key-file", files.signingKeyFile,
            ])
            #expect(other["environment"] == "development", "sandbox is Apple's name for development: \(other)")
            let otherID = try #require(other["id"]?.intValue)
            _ = try await good(["app", "list"])
            _ = try await good(["app", "show", String(otherID)])
            _ = try await good(["app", "remove", String(otherID), "--yes"])
            _ = try await InstallationRepository(pool: h.pool).register(
                InstallationRegistration(appID: h.appID, installationID: "cli-phone"),
                previousTokenRetention: 60)
            _ = try await good(["installation", "show", "cli-phone"])
            _ = try await good(["installation", "show", "nobody"], succeeds: false)
            _ = try await good(["installation", "stats", "--app", String(h.appID)])
            let dump = FileManager.default.temporaryDirectory.appending(path: "marquee-cli-\(UUID().uuidString).csv")
            try "installationId,registeredAt\ncli-imported,2026-11-01T10:00:00Z\n".write(to: dump, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: dump) }
            let imported = try await good(["installation", "import", dump.path, "--app", String(h.appID)])
            #expect(imported["created"] == 1, "\(imported)")

            let registered = try await good([
                "attribute-type", "create", "--app", String(h.appID), "--name", "CLIAttributes", "--attributes", #"{"home":"string"}"#,
                "--content-state", #"{"score":"int"}"#,
            ])
            #expect(registered["name"] == "CLIAttributes", "\(registered)")
            _ = try await good(["attribute-type", "list", "--app", String(h.appID)])
            _ = try await good(["attribute-type", "show", "CLIAttributes"])
            let policy = try await good(["attribute-type", "policy", "CLIAttributes", "--freshness", #"{"staleAfter":300}"#])
            #expect(policy["policy"] == ["staleAfter": 300], "\(policy)")

            let start = BroadcastHarness.iso(Date().addingTimeInterval(-60))
            let created = try await good([
                "event", "create", "--app", String(h.appID), "--external-id", "cli-json", "--kind", "match",
                "--attribute-type", "MatchAttributes", "--starts-at", start,
                "--attributes", #"{"homeTeam":"Arsenal","awayTeam":"Chelsea"}"#,
                "--content-state", MatchState().input.jsonString,
            ])
            let event = try #require(created["id"]?.intValue)
            let channel = try await h.openChannel(of: Int(event))
            let channelRow = try await h.count("SELECT id AS n FROM channels WHERE apns_channel_id = \(channel)")
            _ = try await good(["event", "list"])
            _ = try await good(["event", "show", String(event)])
            _ = try await good(["event", "update", String(event), "--patch", #"{"homeScore":1}"#])
            let moved = try await good(["event", "reschedule", String(event), "--ends-at", BroadcastHarness.iso(Date().addingTimeInterval(3 * 3600))])
            #expect(moved["warnings"] == [], "\(moved)")
            let edited = try await good(["event", "edit", String(event), "--topic", "team:arsenal", "--topic", "cup:fa"])
            #expect(edited["topics"] == ["team:arsenal", "cup:fa"], "\(edited)")
            let fresh = try await good(["event", "edit", String(event), "--freshness", #"{"staleAfter": 300}"#])
            #expect(fresh["freshness"] == ["staleAfter": 300], "\(fresh)")
            let run = try await good(["event", "start", String(event), "--alert-title", "Kick-off", "--alert-body", "Arsenal v Chelsea"])
            #expect(run["kind"] == "manual", "\(run)")
            let runs = try await good(["event", "starts", String(event)])
            // The automatic run of this live event without a start alert is there too, skipped as no_alert.
            #expect(runs["runs"]?.arrayValue?.contains { $0["id"] == run["id"] } == true, "\(runs)")
            _ = try await good(["channel", "list"])
            _ = try await good(["channel", "show", String(channelRow)])
            _ = try await good(["channel", "reconcile", "--dry-run"])
            _ = try await good(["channel", "sweep"])
            _ = try await good(["status"])
            // Refused by the server (the channel is not lost): still one JSON document.
            let refused = try await good(["channel", "recreate", String(event)], succeeds: false)
            #expect(refused["error"]?["code"] == "conflict", "\(refused)")
            _ = try await good(["event", "end", String(event)])
            try await h.waitUntil("the end is broadcast") { try await h.event(Int(event))["status"] == "ended" }
            _ = try await good(["channel", "delete", String(channelRow), "--yes"])
            let calledOff = try await h.createEvent("cli-cancel")
            let cancelled = try await good(["event", "cancel", String(calledOff), "--patch", #"{"lastScorer":"called off"}"#])
            #expect(cancelled["event"]?["status"] == "cancelled" && cancelled["broadcast"] == false, "\(cancelled)")

            let made = try await good(["apns", "channels", "create", "--storage-policy", "mostRecent"])
            let apnsChannel = try #require(made["channelId"]?.stringValue)
            _ = try await good(["apns", "channels", "read", "--channel", apnsChannel])
            _ = try await good(["apns", "channels", "list"])
            // A payload the app decodes (the harness decodes every broadcast the simulator took).
            let state = String(decoding: try JSONEncoder().encode(MatchState()), as: UTF8.self)
            _ = try await good([
                "apns", "broadcast", "--channel", apnsChannel, "--payload",
                #"{"aps":{"event":"update","timestamp":1,"content-state":"# + state + "}}",
            ])
            _ = try await good(["apns", "channels", "delete", "--channel", apnsChannel])
            _ = try await good(
                [
                    "apns", "push", "--token", String(repeating: "ab", count: 32),
                    "--payload", #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#,
                ], succeeds: false)
            _ = try await good(["openapi"])
            #expect(try await good(["completion", "bash"])["script"]?.stringValue?.contains("complete -F _marquee marquee") == true)
            #expect(Set(leaves).subtracting(covered).isEmpty, "commands with no good case here: \(Set(leaves).subtracting(covered))")

            // Bad input on every command: one JSON error naming the argument at fault; the --help hint on stderr.
            for leaf in leaves {
                let result = try await cli.run(leaf + ["--no-such-option", "--json"])
                #expect(result.status == 64, "\(leaf): \(result.stderr)")
                let error = (try? JSONValue(parsing: result.stdout))?["error"]
                #expect(error?["code"] == "usage" && error?["field"] == "no-such-option", "\(leaf): \(result.stdout)")
                #expect(result.stderr.contains("--help"), "\(leaf): \(result.stderr)")
                let message = error?["message"]?.stringValue ?? ""
                #expect(!message.contains("See '"), "\(leaf): the hint belongs on stderr")
            }
            // The ones the operator hit: a missing required option, and a missing database URL.
            for (words, field) in [(["key", "create"], "scope"), (["apns", "channels", "create"], "storage-policy")] {
                let result = try await cli.run(words + ["--json"])
                #expect(result.status == 64)
                #expect((try? JSONValue(parsing: result.stdout))?["error"]?["field"] == .string(field), "\(words): \(result.stdout)")
            }
            let noDatabase = try await MarqueeProcess.run(["key", "list", "--json"], databaseURL: nil)
            #expect(noDatabase.status == 64)
            #expect((try? JSONValue(parsing: noDatabase.stdout))?["error"]?["field"] == "database-url", "\(noDatabase.stdout)")
        }
    }

    @Test func stdoutCarriesOnlyTheData() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLI(h: h)
            func lines(_ result: ChildProcess.Outcome) -> [Substring] { result.stdout.split(separator: "\n") }

            // KEY=$(marquee key create ...): the key alone, and it works.
            let created = try await cli.run(["key", "create", "--scope", "admin", "--name", "ops"])
            #expect(created.status == 0 && lines(created).count == 1, "\(created.stdout)")
            #expect(created.stderr.contains("shown only once"))
            let key = String(lines(created).first ?? "")
            let status = try await LoopbackHTTP.request(port: h.ports[0], "GET", "/v1/status", headers: ["Authorization": "Bearer \(key)"])
            #expect(status.status == 200)

            // CH=$(marquee apns channels create ...): the id alone; read and list print data lines only.
            let made = try await cli.run(["apns", "channels", "create", "--storage-policy", "mostRecent"])
            #expect(made.status == 0 && lines(made).count == 1, "\(made.stdout)")
            #expect(made.stderr.contains("accepted: 201"), "\(made.stderr)")
            let channel = String(lines(made).first ?? "")
            let read = try await cli.run(["apns", "channels", "read", "--channel", channel])
            #expect(lines(read) == ["storage policy: mostRecent", "push type: LiveActivity"], "\(read.stdout)")
            let listed = try await cli.run(["apns", "channels", "list"])
            #expect(lines(listed).contains(Substring(channel)) && lines(listed).allSatisfy { !$0.hasPrefix("accepted") }, "\(listed.stdout)")

            // A dry run's "nothing changed" is a note for a person.
            let dry = try await cli.run(["channel", "reconcile", "--dry-run"])
            #expect(dry.status == 0 && !dry.stdout.contains("dry run") && dry.stderr.contains("(dry run: nothing changed)"), "\(dry.stdout)")

            // `event list | tail -1` is an event, not a hint.
            for index in 0..<2 { _ = try await h.createEvent("listed-\(index)") }
            let page = try await cli.run(["event", "list", "--limit", "1"])
            #expect(lines(page).count == 2 && !page.stdout.contains("more:"), "\(page.stdout)")
            #expect(page.stderr.contains("more: --cursor"), "\(page.stderr)")
        }
    }

    /// `app remove` left live channels at APNs holding quota, out of reach of reconcile: it refuses while the app
    /// has channels there, and with --delete-channels deletes them first. Scripts must say --yes.
    @Test func removingAnAppWithChannelsAtAPNsNeedsDeleteChannels() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLI(h: h)
            let event = try await h.createEvent("removed", startsAt: Date().addingTimeInterval(-60))
            let channel = try await h.openChannel(of: event)
            let app = String(h.appID)

            let refused = try await cli.run(["app", "remove", app, "--yes", "--json"])
            #expect(refused.status == 1)
            let error = (try? JSONValue(parsing: refused.stdout))?["error"]
            #expect(error?["code"] == "app_has_channels" && error?["field"] == "delete-channels", "\(refused.stdout)")
            #expect(error?["message"]?.stringValue?.contains("1 channel(s) at APNs (open 1)") == true, "\(refused.stdout)")
            #expect(h.simulator.engine.channel(id: channel) != nil)
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM apps") == 1)
            let unconfirmed = try await cli.run(["app", "remove", app, "--delete-channels", "--json"])
            #expect(unconfirmed.status == 64, "\(unconfirmed.stdout)")
            #expect((try? JSONValue(parsing: unconfirmed.stdout))?["error"]?["field"] == "yes", "\(unconfirmed.stdout)")
            #expect(h.simulator.engine.channel(id: channel) != nil)

            let removed = try await cli.run(["app", "remove", app, "--yes", "--delete-channels", "--json"])
            #expect(removed.status == 0, "\(removed.stdout)\(removed.stderr)")
            #expect(h.simulator.engine.channel(id: channel) == nil, "the channel is still at APNs")
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM apps") == 0)
        }
    }

    /// `event list --all` prints each page as it arrives; a Ctrl-C keeps what was printed and says where to resume.
    @Test func aCtrlCDuringEventListAllKeepsWhatWasPrintedAndSaysWhereToResume() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLI(h: h)
            let first = try await h.createEvent("page-0", startsAt: Date().addingTimeInterval(7 * 86400))
            try await h.pool.execute(
                """
                INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy, starts_at, ends_at, topics)
                SELECT app_id, 'page-' || n, kind, attribute_type_id, attributes, storage_policy, starts_at + n * interval '1 minute',
                       ends_at + n * interval '1 minute', topics
                FROM events, generate_series(1, 299) AS n WHERE id = \(first)
                """)
            let listing = try MarqueeProcess.start(["event", "list", "--all", "--limit", "1"], databaseURL: nil, environment: cli.environment)
            try await h.waitUntil("the first pages are printed") { listing.stdout.split(separator: "\n").count >= 4 }
            listing.signal(SIGINT)
            #expect(await listing.wait() == 130)
            let rows = listing.stdout.split(separator: "\n").dropFirst()  // the header
            let stderr = listing.stderr
            #expect(stderr.contains("interrupted after \(rows.count) events; resume with --cursor "), "\(stderr)")
            let cursor = try #require(stderr.components(separatedBy: "--cursor ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(rows.count < 300, "the listing finished before the interrupt")
            let rest = try await cli.run(["event", "list", "--all", "--limit", "1", "--cursor", cursor])
            #expect(rest.status == 0, "\(rest.stderr)")
            let restRows = rest.stdout.split(separator: "\n").dropFirst()
            #expect(rows.count + restRows.count == 300, "\(rows.count) + \(restRows.count)")
            #expect(Set(rows.map { $0.split(separator: " ").first }).isDisjoint(with: restRows.map { $0.split(separator: " ").first }))
        }
    }
}
