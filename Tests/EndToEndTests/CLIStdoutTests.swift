import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Testing

/// What each command prints on standard output (issue 48): only the data (a creating command the new id, a
/// command that changes a record the record, rows, JSON); what was done goes to standard error. And every
/// `--json` error has the API's shape, `field` included (`null` when no argument is at fault).
@Suite(.serialized, .enabled(if: MarqueeProcess.available))
struct CLIStdoutTests {
    static func lines(_ result: ChildProcess.Outcome) -> [Substring] { result.stdout.split(separator: "\n") }

    /// Exit 0, standard output exactly `stdout` (nothing when empty), and `note` on standard error.
    static func expectData(
        _ result: ChildProcess.Outcome, _ words: [String], stdout: (String) -> Bool, note: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(result.status == 0, "\(words): exit \(result.status): \(result.stderr)", sourceLocation: sourceLocation)
        #expect(stdout(result.stdout), "\(words): stdout is \(result.stdout.debugDescription)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains(note), "\(words): stderr lacks '\(note)': \(result.stderr)", sourceLocation: sourceLocation)
    }

    static func isID(_ stdout: String) -> Bool {
        let lines = stdout.split(separator: "\n")
        return lines.count == 1 && Int(lines[0]) != nil && stdout.hasSuffix("\n")
    }

    @Test func eachCommandPrintsItsDataOnStdoutAndWhatItDidOnStderr() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLIOutputTests.CLI(h: h)
            func run(_ words: [String]) async throws -> ChildProcess.Outcome { try await cli.run(words) }

            // migrate: the names it applied (none here) on stdout; "schema is current" is a note.
            var words = ["migrate"]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "schema is current; nothing applied")
            words = ["migrate", "--check"]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "schema is current")
            // The pending list is the data: one name a line on stdout, the refusal on stderr (exit 1).
            let fresh = try await TestDatabase.freshURL("e2e")
            let pending = try await MarqueeProcess.run(["migrate", "--check"], databaseURL: fresh)
            #expect(pending.status == 1, "\(pending.stderr)")
            #expect(Self.lines(pending).first == "0001_init" || Self.lines(pending).first == "0001_init.sql", "\(pending.stdout)")
            #expect(Self.lines(pending).count >= 39 && !pending.stdout.contains("pending"), "\(pending.stdout)")
            #expect(pending.stderr.contains("pending migration(s)"), "\(pending.stderr)")
            let pendingJSON = try await MarqueeProcess.run(["migrate", "--check", "--json"], databaseURL: fresh)
            let pendingError = try JSONValue(parsing: pendingJSON.stdout)["error"]
            #expect(pendingError?["code"] == "pending" && pendingError?["field"] == .null, "\(pendingJSON.stdout)")
            #expect(pendingError?["pending"]?.arrayValue?.count == Self.lines(pending).count, "\(pendingJSON.stdout)")
            let applied = try await MarqueeProcess.run(["migrate"], databaseURL: fresh)
            #expect(applied.status == 0 && Self.lines(applied) == Self.lines(pending), "\(applied.stdout)")
            #expect(applied.stderr.contains("applied \(Self.lines(pending).count) migration(s)"), "\(applied.stderr)")

            // app add: APP=$(marquee app add ...) is the id; app remove prints nothing on stdout.
            let files = h.simulator.files
            words = [
                "app", "add", "--bundle", "com.example.stdout", "--environment", "development", "--team-id", files.teamID,
                "--key-id", files.keyID, "--key-file", files.signingKeyFile,
            ]
            let added = try await run(words)
            Self.expectData(added, words, stdout: Self.isID, note: "added app ")
            let app = added.stdout.trimmingCharacters(in: .newlines)
            // key create (the key alone) bound to that app, then revoke: nothing on stdout.
            words = ["key", "create", "--scope", "tokens", "--app", app, "--name", "backend"]
            let key = try await run(words)
            Self.expectData(key, words, stdout: { $0.hasPrefix("mq_") && $0.split(separator: "\n").count == 1 }, note: "shown only once")
            let keyID = try #require(key.stdout.split(separator: "_").dropFirst().first.map(String.init))
            words = ["key", "revoke", keyID]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "revoked API key \(keyID)")
            words = ["app", "remove", app, "--yes"]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "removed app \(app)")

            // attribute-type create prints the type's id; policy prints the type.
            words = [
                "attribute-type", "create", "--app", String(h.appID), "--name", "StdoutAttributes", "--attributes", #"{"home":"string"}"#,
                "--content-state", #"{"score":"int"}"#,
            ]
            Self.expectData(try await run(words), words, stdout: Self.isID, note: "attribute type StdoutAttributes of app \(h.appID)")
            words = ["attribute-type", "policy", "StdoutAttributes", "--freshness", #"{"relevanceScore":60}"#]
            Self.expectData(
                try await run(words), words, stdout: { $0.hasPrefix("id:") && $0.contains("relevanceScore") }, note: "replaced the freshness policy")

            // event create: EVENT=$(marquee event create ...) is the id.
            words = [
                "event", "create", "--app", String(h.appID), "--external-id", "stdout-1", "--kind", "match",
                "--attribute-type", "MatchAttributes", "--starts-at", BroadcastHarness.iso(Date().addingTimeInterval(-60)),
                "--attributes", #"{"homeTeam":"Arsenal","awayTeam":"Chelsea"}"#, "--content-state", MatchState().input.jsonString,
                "--topic", "team:arsenal",
            ]
            let created = try await run(words)
            Self.expectData(created, words, stdout: Self.isID, note: "created event ")
            let event = created.stdout.trimmingCharacters(in: .newlines)
            #expect(try await h.event(Int(event)!)["externalId"] == "stdout-1")
            let channel = try await h.openChannel(of: Int(event)!)
            let channelRow = String(try await h.count("SELECT id AS n FROM channels WHERE apns_channel_id = \(channel)"))

            // update and end print the new update's id; the sentence is a note.
            words = ["event", "update", event, "--patch", #"{"homeScore":1}"#]
            Self.expectData(try await run(words), words, stdout: Self.isID, note: "accepted update ")
            // reschedule and edit print the event as it is now; what was done is a note.
            words = ["event", "reschedule", event, "--ends-at", BroadcastHarness.iso(Date().addingTimeInterval(3 * 3600))]
            Self.expectData(
                try await run(words), words, stdout: { $0.hasPrefix("id:") && !$0.contains("rescheduled") }, note: "rescheduled event \(event)")
            words = ["event", "edit", event, "--topic", "team:arsenal"]
            Self.expectData(try await run(words), words, stdout: { $0.hasPrefix("id:") && !$0.contains("edited") }, note: "edited event \(event)")
            // start prints the new run's id.
            words = ["event", "start", event, "--alert-title", "Kick-off", "--alert-body", "Arsenal v Chelsea"]
            Self.expectData(try await run(words), words, stdout: Self.isID, note: "start run ")

            // channel recreate prints the channel's id; a lost channel is what it recreates.
            try await h.pool.execute("UPDATE channels SET state = 'lost' WHERE id = \(Int(channelRow)!)")
            try await h.pool.execute("UPDATE events SET channel_lost = true WHERE id = \(Int(event)!)")
            words = ["channel", "recreate", event]
            Self.expectData(try await run(words), words, stdout: Self.isID, note: "planned a new channel for event \(event)")

            words = ["event", "end", event]
            Self.expectData(try await run(words), words, stdout: Self.isID, note: "accepted end ")
            try await h.waitUntil("the end is broadcast") { try await h.event(Int(event)!)["status"] == "ended" }
            words = ["channel", "delete", channelRow, "--yes", "--force"]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "deleting channel \(channelRow)")

            // cancel prints nothing on stdout.
            let calledOff = String(try await h.createEvent("stdout-cancel"))
            words = ["event", "cancel", calledOff]
            Self.expectData(try await run(words), words, stdout: { $0.isEmpty }, note: "cancelled event \(calledOff)")
        }
    }

    /// `--json` errors carry `field`, `null` when no argument is at fault, as the API's errors do.
    @Test func jsonErrorsAlwaysCarryField() async throws {
        try await BroadcastHarness.run { h in
            let cli = CLIOutputTests.CLI(h: h)
            func error(_ result: ChildProcess.Outcome) -> JSONObject? { (try? JSONValue(parsing: result.stdout))?["error"]?.objectValue }

            let missing = try await cli.run(["event", "show", "999", "--json"])
            #expect(missing.status == 66)
            #expect(error(missing)?["field"] == .some(.null) && error(missing)?["code"] == "not_found", "\(missing.stdout)")
            let noChannel = try await cli.run(["channel", "delete", "99", "--yes", "--json"])
            #expect(noChannel.status == 66)
            #expect(error(noChannel)?["field"] == .some(.null), "\(noChannel.stdout)")
            try await AdminCLITests.withRefusingPort { port in
                let status = try await cli.run(["status", "--json", "--url", "http://127.0.0.1:\(port)"])
                #expect(status.status == 69)
                #expect(error(status)?["field"] == .some(.null) && error(status)?["code"] == "unreachable", "\(status.stdout)")
                let keys = try await MarqueeProcess.run(
                    ["key", "list", "--json", "--database-url", "postgresql://marquee@127.0.0.1:\(port)/marquee"], databaseURL: nil)
                #expect(keys.status == 69)
                #expect(error(keys)?["field"] == .some(.null) && error(keys)?["code"] == "database_unavailable", "\(keys.stdout)")
            }
        }
    }
}
