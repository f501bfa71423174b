import Foundation
import MarqueeCore
import Testing

/// `marquee installation import` as a process on a real PostgreSQL, with `serve` answering the registry's
/// routes beside it: bad rows by line, all or nothing, `--skip-bad`, and dumps older than what is stored.
@Suite(.enabled(if: MarqueeProcess.available))
struct InstallationImportTests {
    static func token(_ byte: String) -> String { String(repeating: byte, count: 32) }

    /// Writes `lines` to a temporary file named `name`; returns its path.
    static func file(_ name: String, _ lines: [String]) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appending(path: "marquee-import-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = directory.appending(path: name)
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: url)
        return url.path
    }

    /// Removes a file that `file(_:_:)` wrote, with its folder.
    static func remove(_ path: String) {
        try? FileManager.default.removeItem(at: URL(fileURLWithPath: path).deletingLastPathComponent())
    }

    static func installation(_ harness: BroadcastHarness, _ id: String, key: String) async throws -> JSONValue? {
        let response = try await harness.api("GET", "/v1/installations/\(id)?app=\(harness.appID)", key: key)
        return response.status == 200 ? response.json : nil
    }

    static func count(_ harness: BroadcastHarness) async throws -> Int {
        try await harness.pool.query("SELECT count(*)::bigint AS n FROM installations")[0].decode(Int.self, column: "n")
    }

    @Test func badRowsAreReportedByLineAndNothingIsImportedUnlessSkipped() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            let event = try await harness.createEvent("import-match", startsAt: Date().addingTimeInterval(2 * 86400))
            let path = try Self.file(
                "dump.csv",
                [
                    "installationId,pushToStartToken,osVersion,locale,events,topics,registeredAt",
                    "phone-1,\(Self.token("AA")),18.1,en_GB,import-match,team:arsenal,2026-11-01T10:00:00Z",
                    "phone-2,xyz,18.1,,,,2026-11-01T10:00:00Z",
                    "phone-3,\(Self.token("bb")),17.4,,,team:arsenal;team:chelsea,2026-11-01T10:00:00Z",
                    "phone-4,\(Self.token("cc")),18.0,,no-such-match,,2026-11-01T10:00:00Z",
                    "",
                    "phone-5,,banana,,,,2026-11-01T10:00:00Z",
                    "\"phone-6\",\(Self.token("dd")),16.4,\"fr,FR\",,,2026-11-01T10:00:00Z",
                ])
            defer { Self.remove(path) }
            let refused = try await MarqueeProcess.run(
                ["installation", "import", path, "--app", "\(harness.appID)"], databaseURL: harness.databaseURL)
            #expect(refused.status == 65, "\(refused.stderr)")
            for line in ["line 3, pushToStartToken", "line 5, events", "line 7, osVersion"] {
                #expect(refused.stderr.contains(line), "\(line) in \(refused.stderr)")
            }
            #expect(!refused.stderr.contains("line 2") && !refused.stderr.contains("line 8"), "\(refused.stderr)")
            #expect(try await Self.count(harness) == 0, "nothing is imported while a row is bad")

            let json = try await MarqueeProcess.run(
                ["installation", "import", path, "--app", "\(harness.appID)", "--json"], databaseURL: harness.databaseURL)
            let problems = try JSONValue(parsing: json.stdout)["error"]?["problems"]?.arrayValue ?? []
            #expect(json.status == 65 && problems.map { $0["line"]?.intValue } == [3, 5, 7], "\(json.stdout) \(json.stderr)")

            let skipped = try await MarqueeProcess.run(
                ["installation", "import", path, "--app", "\(harness.appID)", "--skip-bad", "--json"], databaseURL: harness.databaseURL)
            let summary = try JSONValue(parsing: skipped.stdout)
            #expect(skipped.status == 0, "\(skipped.stderr)")
            #expect(summary["rows"] == 6 && summary["badRows"] == 3 && summary["created"] == 3 && summary["tokensStored"] == 3, "\(summary)")
            #expect(summary["problems"]?.arrayValue?.count == 3)
            #expect(try await Self.count(harness) == 3)
            let first = try #require(try await Self.installation(harness, "phone-1", key: key))
            #expect(first["pushToStartToken"]?["prefix"] == "aaaaaaaa", "stored lower-cased: \(first)")
            #expect(first["osVersion"] == "18.1" && first["locale"] == "en_GB")
            #expect(first["follows"]?["events"]?.arrayValue?.first?["event"] == .int(Int64(event)) && first["follows"]?["topics"] == ["team:arsenal"])
            #expect(try await Self.installation(harness, "phone-3", key: key)?["follows"]?["topics"] == ["team:arsenal", "team:chelsea"])
            #expect(try await Self.installation(harness, "phone-6", key: key)?["locale"] == "fr,FR", "a quoted cell keeps its comma")
            #expect(try await harness.api("GET", "/v1/installations/phone-2?app=\(harness.appID)", key: key).status == 404)
        }
    }

    @Test func anOlderDumpChangesNothingAndANewerOneMovesAndRotatesTokens() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            _ = try await harness.createEvent("dump-match", startsAt: Date().addingTimeInterval(2 * 86400))
            func row(_ id: String, _ token: String?, os: String, at: String, follows: JSONValue? = nil) -> String {
                var object: JSONObject = ["installationId": .string(id), "osVersion": .string(os), "registeredAt": .string(at)]
                if let token { object["pushToStartToken"] = .string(token) }
                if let follows { object["follows"] = follows }
                return JSONValue.object(object).jsonString
            }
            func run(_ lines: [String]) async throws -> JSONValue {
                let path = try Self.file("dump.jsonl", lines)
                defer { Self.remove(path) }
                let result = try await MarqueeProcess.run(
                    ["installation", "import", path, "--app", "\(harness.appID)", "--json"], databaseURL: harness.databaseURL)
                try #require(result.status == 0, "\(result.stdout) \(result.stderr)")
                return try JSONValue(parsing: result.stdout)
            }
            let november = [
                row("phone-1", Self.token("a1"), os: "17.4", at: "2026-11-01T10:00:00Z", follows: ["events": [["externalId": "dump-match"]]]),
                row("phone-2", Self.token("b2"), os: "18.0", at: "2026-11-01T10:00:00Z"),
            ]
            let first = try await run(november)
            #expect(first["created"] == 2 && first["tokensStored"] == 2, "\(first)")

            // Since the dump, phone-1's app registered again through the API with a rotated token.
            let rotated = try await harness.api(
                "PUT", "/v1/installations/phone-1",
                ["app": .int(Int64(harness.appID)), "pushToStartToken": .string(Self.token("c3")), "osVersion": "18.2"], key: key)
            #expect(rotated.status == 200, "\(rotated.text)")

            // An older dump changes nothing, and cannot take the newer registration's token for another installation.
            let october = [
                row("phone-1", Self.token("a0"), os: "16.4", at: "2026-10-01T10:00:00Z", follows: ["events": []]),
                row("phone-3", Self.token("c3"), os: "18.0", at: "2026-10-01T10:00:00Z"),
            ]
            let old = try await run(october)
            #expect(old["created"] == 1 && old["updated"] == 0 && old["unchanged"] == 1 && old["tokensLeftOut"] == 1, "\(old)")
            let phone1 = try #require(try await Self.installation(harness, "phone-1", key: key))
            #expect(phone1["pushToStartToken"]?["prefix"] == "c3c3c3c3" && phone1["osVersion"] == "18.2", "\(phone1)")
            #expect(phone1["follows"]?["events"]?.arrayValue?.count == 1, "the older dump's empty follows do not replace the stored ones")
            #expect(try await Self.installation(harness, "phone-3", key: key)?["pushToStartToken"] == .null)

            // The same dump again: nothing is newer than what is stored.
            let again = try await run(november)
            #expect(again["created"] == 0 && again["updated"] == 0 && again["unchanged"] == 2, "\(again)")

            // A newer dump: phone-2 now holds phone-1's token (a reinstall), and its old one is kept as previous.
            let later = BroadcastHarness.iso(Date().addingTimeInterval(60))
            let newer = try await run([row("phone-2", Self.token("c3"), os: "18.1", at: later, follows: ["topics": ["team:arsenal"]])])
            #expect(newer["updated"] == 1 && newer["tokensStored"] == 1 && newer["tokensMoved"] == 1, "\(newer)")
            let phone2 = try #require(try await Self.installation(harness, "phone-2", key: key))
            #expect(phone2["pushToStartToken"]?["prefix"] == "c3c3c3c3" && phone2["pushToStartToken"]?["previousPrefix"] == "b2b2b2b2", "\(phone2)")
            #expect(phone2["follows"]?["topics"] == ["team:arsenal"])
            #expect(try await Self.installation(harness, "phone-1", key: key)?["pushToStartToken"] == .null)
        }
    }
}
