import Crypto
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Testing

/// `marquee migrate`, `key ...` and `app ...` as an operator runs them, against the test database.
@Suite(.enabled(if: MarqueeProcess.available))
struct CommandLineTests {
    func json(_ result: ChildProcess.Outcome) throws -> JSONValue {
        try JSONValue(parsing: result.stdout)
    }

    @Test func migrateAppliesOnceAndChecks() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        let before = try await MarqueeProcess.run(["migrate", "--check", "--json"], databaseURL: url)
        #expect(before.status == 1)
        #expect(try json(before)["error"]?["code"] == "pending")
        let applied = try await MarqueeProcess.run(["migrate", "--json"], databaseURL: url)
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try json(applied)["applied"]?.arrayValue?.first == "0001_init.sql")
        let again = try await MarqueeProcess.run(["migrate", "--json"], databaseURL: url)
        #expect(try json(again)["applied"] == [])
        #expect(try await MarqueeProcess.run(["migrate", "--check"], databaseURL: url).status == 0)
    }

    @Test func databaseProblemsHaveTheirExitCodes() async throws {
        let missing = try await MarqueeProcess.run(["key", "list"], databaseURL: nil)
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("MARQUEE_DATABASE_URL"))
        let unreachable = try await MarqueeProcess.run(["key", "list", "--json"], databaseURL: "postgresql://nobody@127.0.0.1:1/none")
        #expect(unreachable.status == 69)
        #expect(try json(unreachable)["error"]?["code"] == "database_unavailable")
        #expect(try await MarqueeProcess.run(["frobnicate"], databaseURL: nil).status == 64)
        #expect(try await MarqueeProcess.run(["key", "--help"], databaseURL: nil).status == 0)
    }

    @Test func keysAreCreatedOnceListedWithoutSecretsAndRevoked() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        #expect(try await MarqueeProcess.run(["migrate"], databaseURL: url).status == 0)
        let created = try await MarqueeProcess.run(["key", "create", "--scope", "ingest", "--name", "feed", "--json"], databaseURL: url)
        #expect(created.status == 0, "\(created.stderr)")
        let key = try json(created)
        let text = try #require(key["key"]?.stringValue)
        let id = try #require(key["id"]?.stringValue)
        #expect(text.hasPrefix("mq_\(id)_"))
        #expect(key["scopes"] == ["ingest"])

        let plain = try await MarqueeProcess.run(["key", "create", "--scope", "admin"], databaseURL: url)
        #expect(plain.stdout.hasPrefix("mq_"))

        let list = try await MarqueeProcess.run(["key", "list", "--json"], databaseURL: url)
        #expect(list.status == 0)
        #expect(try json(list)["keys"]?.arrayValue?.count == 2)
        #expect(!list.stdout.contains(text) && !list.stdout.contains(String(text.suffix(43))))
        let table = try await MarqueeProcess.run(["key", "list"], databaseURL: url)
        #expect(table.stdout.contains(id) && !table.stdout.contains(String(text.suffix(43))))

        let revoked = try await MarqueeProcess.run(["key", "revoke", id, "--json"], databaseURL: url)
        #expect(revoked.status == 0)
        #expect(try json(revoked)["revokedAt"]?.stringValue != nil)
        let active = try await MarqueeProcess.run(["key", "list", "--active", "--json"], databaseURL: url)
        #expect(try json(active)["keys"]?.arrayValue?.count == 1)

        let unknown = try await MarqueeProcess.run(["key", "revoke", "0123456789ab", "--json"], databaseURL: url)
        #expect(unknown.status == 1)
        #expect(try json(unknown)["error"]?["code"] == "not_found")
        #expect(try await MarqueeProcess.run(["key", "revoke", "nothex"], databaseURL: url).status == 64)
        #expect(try await MarqueeProcess.run(["key", "create", "--scope", "root"], databaseURL: url).status == 64)
        #expect(try await MarqueeProcess.run(["key", "create"], databaseURL: url).status == 64)
    }

    @Test func appsAreAddedListedShownAndRemoved() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        #expect(try await MarqueeProcess.run(["migrate"], databaseURL: url).status == 0)
        let folder = FileManager.default.temporaryDirectory.appending(path: "marquee-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let pem = try P256.SigningKey.generate().pemRepresentation
        let keyFile = folder.appending(path: "AuthKey_KEY1234567.p8").path
        _ = FileManager.default.createFile(atPath: keyFile, contents: Data(pem.utf8), attributes: [.posixPermissions: 0o600])
        let notAKey = folder.appending(path: "notes.p8").path
        _ = FileManager.default.createFile(atPath: notAKey, contents: Data("hello".utf8), attributes: [.posixPermissions: 0o600])

        let base = [
            "app", "add", "--bundle", "com.example.scores", "--environment", "development",
            "--team-id", "ABCDE12345", "--key-id", "KEY1234567",
        ]
        let added = try await MarqueeProcess.run(base + ["--key-file", keyFile, "--json"], databaseURL: url)
        #expect(added.status == 0, "\(added.stdout) \(added.stderr)")
        let app = try json(added)
        let id = try #require(app["id"]?.intValue)
        #expect(app["keyFile"]?.stringValue == keyFile)
        #expect(!added.stdout.contains("PRIVATE KEY") && !added.stderr.contains("warning"))

        let duplicate = try await MarqueeProcess.run(base + ["--key-file", keyFile, "--json"], databaseURL: url)
        #expect(duplicate.status == 1)
        #expect(try json(duplicate)["error"]?["code"] == "conflict")
        let production = base.map { $0 == "development" ? "production" : $0 }
        #expect(try await MarqueeProcess.run(production + ["--key-file", notAKey], databaseURL: url).status == 65)
        #expect(try await MarqueeProcess.run(production + ["--key-file", keyFile + ".missing"], databaseURL: url).status == 66)
        #expect(
            try await MarqueeProcess.run(production.map { $0 == "ABCDE12345" ? "abc" : $0 } + ["--key-file", keyFile], databaseURL: url).status == 64)
        #expect(
            try await MarqueeProcess.run(production.map { $0 == "production" ? "staging" : $0 } + ["--key-file", keyFile], databaseURL: url).status
                == 64)

        // A key file others can read is accepted with a warning.
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: keyFile)
        let warned = try await MarqueeProcess.run(production + ["--key-file", keyFile, "--push-url", "https://127.0.0.1:2197"], databaseURL: url)
        #expect(warned.status == 0)
        #expect(warned.stderr.contains("warning") && warned.stderr.contains("chmod 600"))
        #expect(!warned.stderr.contains("PRIVATE KEY"))

        let list = try await MarqueeProcess.run(["app", "list", "--json"], databaseURL: url)
        #expect(try json(list)["apps"]?.arrayValue?.map { $0["environment"] } == ["development", "production"])
        let show = try await MarqueeProcess.run(["app", "show", "\(id)", "--json"], databaseURL: url)
        #expect(try json(show)["bundleId"] == "com.example.scores")
        #expect(try await MarqueeProcess.run(["app", "show", "nine"], databaseURL: url).status == 64)

        let removed = try await MarqueeProcess.run(["app", "remove", "\(id)", "--yes", "--json"], databaseURL: url)
        #expect(removed.status == 0)
        let gone = try await MarqueeProcess.run(["app", "show", "\(id)", "--json"], databaseURL: url)
        #expect(gone.status == 1)
        #expect(try json(gone)["error"]?["code"] == "not_found")
    }
}
