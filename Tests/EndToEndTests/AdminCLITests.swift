import Crypto
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Testing

/// `marquee event|channel|status`, the API's command-line client, run as a process: local checks and exit
/// codes without a server, then against `marquee serve` on a fresh database.
@Suite struct AdminCLITests {
    static let binaryBuilt = FileManager.default.isExecutableFile(atPath: MarqueeProcess.binary)

    /// Runs the CLI with no database, no inherited API settings, and `environment` on top.
    static func cli(_ arguments: [String], _ environment: [String: String] = [:]) async throws -> ChildProcess.Outcome {
        try await MarqueeProcess.run(
            arguments, databaseURL: nil,
            environment: ["MARQUEE_URL": "", "MARQUEE_API_KEY": "", "MARQUEE_CA_FILE": ""].merging(environment) { $1 })
    }

    /// A port nothing listens on (bound, read, released).
    static func freePort() -> Int {
        let (fd, port) = boundSocket()
        close(fd)
        return port
    }

    /// Runs `body` with a port that refuses connections for as long as it runs: bound by a socket that never
    /// listens, so no other test's server can take it meanwhile (a released port can be, and then answers).
    static func withRefusingPort<T>(_ body: (Int) async throws -> T) async rethrows -> T {
        let (fd, port) = boundSocket()
        defer { close(fd) }
        return try await body(port)
    }

    private static func boundSocket() -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test(.enabled(if: binaryBuilt)) func serveRefusesARetentionShorterThanADayBeforeConnecting() async throws {
        let nowhere = ["--database-url", "postgresql://nobody@127.0.0.1:\(Self.freePort())/marquee"]
        for flag in ["--delivery-retention", "--update-retention"] {
            for (value, message) in [
                ("3600", "\(flag) takes 0 (keep) or at least 86400 seconds"),
                ("forever", "\(flag) takes a number of seconds"),
            ] {
                let result = try await Self.cli(["serve", flag, value] + nowhere)
                #expect(result.status == 64, "\(flag) \(value): \(result.stderr)")
                #expect(result.stderr.contains(message), "\(flag) \(value): \(result.stderr)")
            }
        }
    }

    /// A port in use is found before the database is touched (serve used to warm its connections first), and is a
    /// configuration to change (78); a database URL that is no URL is a usage error naming the flag (issue 48).
    @Test(.enabled(if: binaryBuilt)) func servePortInUseAndADatabaseURLThatIsNoURL() async throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        try #require(listening)
        let port = Int(UInt16(bigEndian: address.sin_port))
        // The database is unreachable too: a 69 would say the port was not checked first.
        let nowhere = "postgresql://nobody@127.0.0.1:\(Self.freePort())/marquee"
        let inUse = try await Self.cli(["serve", "--listen", "127.0.0.1:\(port)", "--database-url", nowhere])
        #expect(inUse.status == 78, "\(inUse.stderr)")
        #expect(inUse.stderr.contains("--listen 127.0.0.1:\(port): cannot listen there"), "\(inUse.stderr)")
        #expect(!inUse.stderr.contains("database"), "\(inUse.stderr)")

        let serve = try await Self.cli(["serve", "--listen", "127.0.0.1:0", "--database-url", "notaurl"])
        #expect(serve.status == 64 && serve.stderr.contains("--database-url takes a PostgreSQL URL such as"), "\(serve.stderr)")
        for words in [["key", "list"], ["migrate", "--check"]] {
            let result = try await Self.cli(words + ["--database-url", "notaurl", "--json"])
            #expect(result.status == 64, "\(words): \(result.stdout)")
            let error = try JSONValue(parsing: result.stdout)["error"]
            #expect(error?["field"] == "database-url", "\(words): \(result.stdout)")
            #expect(error?["message"]?.stringValue?.contains("takes a PostgreSQL URL such as postgresql://") == true, "\(result.stdout)")
        }
    }

    @Test(.enabled(if: binaryBuilt)) func invalidInputIsAUsageErrorNamingTheFlag() async throws {
        // Every case fails before any request: the URL points nowhere, and 69 would show a request was tried.
        let nowhere = ["--url", "http://127.0.0.1:\(Self.freePort())"]
        let cases: [([String], String)] = [
            (["event", "update", "4", "--patch", "{\"homeScore\":"], "--patch is not valid JSON"),
            (["event", "update", "4", "--content-state", "[1]"], "--content-state must be a JSON object"),
            (["event", "update", "4", "--content-state", "{}", "--patch", "{}"], "either --content-state or --patch"),
            (["event", "update", "4"], "--content-state JSON or --patch JSON"),
            (["event", "update", "4", "--patch", "{}", "--priority", "urgent"], "--priority must be one of auto, high, low"),
            (["event", "update", "4", "--patch", "{}", "--relevance-score", "2000000"], "--relevance-score takes a number from 0 to 1000000"),
            (["event", "update", "4", "--patch", "{}", "--idempotency-key", "has space"], "--idempotency-key"),
            (["event", "update", "four", "--patch", "{}"], "ID takes a positive whole number"),
            (["event", "update", "4", "--patch", "{}", "--alert", #"{"title":"GOAL"}"#, "--sound", "default"], "either --alert or --alert-title"),
            (["event", "update", "4", "--patch", "@/nonexistent/state.json"], "--patch: cannot read /nonexistent/state.json"),
            (["event", "end", "4", "--dismissal-date", "tomorrow"], "--dismissal-date takes an ISO 8601 date"),
            (
                [
                    "event", "create", "--app", "1", "--external-id", "x", "--kind", "match", "--attribute-type", "T",
                    "--starts-at", "2026-05-01T19:45:00Z", "--ends-at", "2026-05-01T18:00:00Z", "--content-state", "{}",
                ], "--ends-at must be after --starts-at"
            ),
            (
                [
                    "event", "create", "--app", "1", "--external-id", "x", "--kind", "match", "--attribute-type", "T",
                    "--starts-at", "now+1h",
                ], "missing --content-state"
            ),
            (
                [
                    "event", "create", "--app", "1", "--external-id", "x", "--kind", "match", "--attribute-type", "T",
                    "--starts-at", "now+1h", "--content-state", "{}", "--audience-lead", "-5",
                ], "--audience-lead"
            ),
            (["event", "list", "--limit", "501"], "--limit takes a whole number from 1 to 500"),
            (["event", "reschedule", "4"], "give --starts-at, --ends-at or --audience-lead"),
            (["event", "reschedule", "4", "--starts-at", "now+2h", "--ends-at", "now+1h"], "--ends-at must be after --starts-at"),
            (["event", "reschedule", "4", "--starts-at", "tomorrow"], "--starts-at takes an ISO 8601 date"),
            (["event", "edit", "4"], "give --topic, --no-topics"),
            (["event", "edit", "4", "--topic", "a", "--no-topics"], "give --topic or --no-topics, not both"),
            (["event", "edit", "4", "--start-alert-body", "soon"], "--start-alert-body needs --start-alert-title"),
            (["event", "edit", "4", "--no-start-alert", "--start-alert-title", "K"], "--no-start-alert takes no other"),
            (["event", "start", "4", "--alert-title", "Kick-off"], "missing --alert-body"),
            (["event", "start", "4", "--alert-sound", "default"], "--alert-sound needs --alert-title and --alert-body"),
            (["event", "start", "0"], "ID takes a positive whole number"),
            (["event", "starts", "4", "--interval", "2"], "--interval goes with --follow"),
            (["event", "starts", "4", "--follow", "--interval", "0"], "--interval takes a number of seconds from 0.1"),
            (["channel", "list", "--state", "opened"], "--state must be one of"),
            (["channel", "delete", "0"], "ID takes a positive whole number"),
            (["status", "--timeout", "0"], "--timeout takes a whole number from 1 to 3600"),
        ]
        for (arguments, message) in cases {
            let result = try await Self.cli(arguments + nowhere)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        let badURL = try await Self.cli(["status", "--url", "127.0.0.1:8080"])
        #expect(badURL.status == 64)
        #expect(badURL.stderr.contains("--url: invalid URL"), "\(badURL.stderr)")
        let badCA = try await Self.cli(["status", "--url", "https://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem"])
        #expect(badCA.status == 64)
        #expect(badCA.stderr.contains("--ca-file"), "\(badCA.stderr)")
    }

    @Test(.enabled(if: binaryBuilt)) func helpDocumentsTheExitCodes() async throws {
        for command in [
            ["--help"], ["event", "--help"], ["event", "update", "--help"], ["event", "start", "--help"], ["event", "starts", "--help"],
            ["channel", "reconcile", "--help"], ["status", "--help"],
        ] {
            let result = try await Self.cli(command)
            #expect(result.status == 0)
            for line in [
                "1   refused: APNs rejected the request (its reason is shown), a conflict (409", "64  the command line is wrong",
                "65  input data is invalid", "(400, 413, 422)", "66  an input file cannot be read", "no such thing (404)",
                "69  a service cannot be reached", "77  not allowed: the API key is missing or wrong (401)",
            ] {
                #expect(result.stdout.contains(line), "\(command) lacks '\(line)'")
            }
            // 75 is a temporary failure in every command (429, 5xx, no answer in time), never a conflict.
            #expect(!result.stdout.contains("75  conflict"), "\(command)")
            #expect(result.stdout.contains("75  temporary failure: the API or APNs answered 429 or 5xx"), "\(command)")
        }
        let update = try await Self.cli(["event", "update", "--help"])
        #expect(update.stdout.contains("Example:\n  marquee event update 42 --patch"))
        #expect(update.stdout.contains("--url URL") && update.stdout.contains("[env: MARQUEE_URL]"))
    }

    @Test(.enabled(if: binaryBuilt)) func anUnreachableServerIs69() async throws {
        try await Self.withRefusingPort { port in
            let result = try await Self.cli(["status"], ["MARQUEE_URL": "http://127.0.0.1:\(port)", "MARQUEE_API_KEY": "mq_any"])
            #expect(result.status == 69)
            #expect(result.stderr.contains("nothing accepts connections at http://127.0.0.1:\(port): is the server running"), "\(result.stderr)")
            let json = try await Self.cli(["event", "list", "--json", "--url", "http://127.0.0.1:\(port)", "--api-key", "mq_any"])
            #expect(json.status == 69, "\(json.stderr)")
            #expect(try JSONValue(parsing: json.stdout)["error"]?["code"] == "unreachable")
        }
    }

    /// Without a key a request could only come back 401: the CLI says so itself (77) before sending anything.
    @Test(.enabled(if: binaryBuilt)) func aMissingAPIKeyIs77BeforeAnyRequest() async throws {
        let port = Self.freePort()
        let plain = try await Self.cli(["status", "--url", "http://127.0.0.1:\(port)"])
        #expect(plain.status == 77)
        #expect(plain.stderr.contains("no API key: pass --api-key or set MARQUEE_API_KEY"), "\(plain.stderr)")
        let json = try await Self.cli(["channel", "list", "--json", "--url", "http://127.0.0.1:\(port)"])
        #expect(json.status == 77)
        let error = try JSONValue(parsing: json.stdout)["error"]
        #expect(error?["code"] == "missing_api_key" && error?["field"] == "api-key", "\(json.stdout)")
    }

    // MARK: Against `marquee serve`

    /// A serve process on a fresh database, an admin key, and one app.
    struct Server {
        let serve: ChildProcess
        let port: Int
        var url: String { "http://127.0.0.1:\(port)" }
        let databaseURL: String
        let key: String
        /// The apps' signing key files (read when needed, so kept until `stop()`).
        let folder: URL

        static func start(_ extra: [String] = []) async throws -> Server {
            let databaseURL = try await TestDatabase.freshURL("e2e")
            let (serve, port) = try await MarqueeProcess.serve(databaseURL: databaseURL, arguments: extra)
            let key = try await ServeTests.adminKey(databaseURL: databaseURL)
            let folder = FileManager.default.temporaryDirectory.appending(path: "marquee-cli-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            return Server(serve: serve, port: port, databaseURL: databaseURL, key: key, folder: folder)
        }

        func cli(_ arguments: [String], key: String? = nil) async throws -> ChildProcess.Outcome {
            try await AdminCLITests.cli(arguments, ["MARQUEE_URL": url, "MARQUEE_API_KEY": key ?? self.key])
        }

        func json(_ arguments: [String]) async throws -> JSONValue {
            let result = try await cli(arguments + ["--json"])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return try JSONValue(parsing: result.stdout)
        }

        /// Adds an app with a fresh signing key, straight in the database as `marquee app add` does; its APNs
        /// hosts are a loopback port nothing listens on.
        func addApp() async throws -> Int64 {
            let keys = folder.appending(path: UUID().uuidString)
            try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
            let keyFile = keys.appending(path: "AuthKey_KEY1234567.p8").path
            try P256.SigningKey.generate().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
            chmod(keyFile, 0o600)
            let added = try await MarqueeProcess.run(
                [
                    "app", "add", "--bundle", "com.example.scores", "--environment", "development",
                    "--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", keyFile, "--push-url",
                    "https://127.0.0.1:\(AdminCLITests.freePort())",
                    "--manage-url", "https://127.0.0.1:\(AdminCLITests.freePort())", "--json",
                ],
                databaseURL: databaseURL)
            #expect(added.status == 0, "\(added.stderr)")
            return try #require(try JSONValue(parsing: added.stdout)["id"]?.intValue)
        }

        /// Registers MatchAttributes for the app over the API (the CLI has no command for it).
        func registerMatchAttributes(app: Int64) async throws {
            let body =
                #"{"app":\#(app),"name":"MatchAttributes","attributes":{"homeTeam":"string","awayTeam":"string"},"#
                + #""contentState":{"homeScore":{"type":"int","significant":true},"awayScore":"int","lastScorer":"string?"}}"#
            let response = try await LoopbackHTTP.request(
                port: port, "POST", "/v1/attribute-types",
                headers: ["Authorization": "Bearer \(key)", "Content-Type": "application/json"],
                body: Array(body.utf8))
            #expect(response.status == 201, "\(response.text)")
        }

        func stop() async {
            serve.signal(SIGTERM)
            _ = await serve.wait()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    @Test(.enabled(if: MarqueeProcess.available)) func statusAndChannelsAgainstServe() async throws {
        let server = try await Server.start()
        #expect(try await server.json(["channel", "reconcile", "--dry-run"])["apps"] == [])
        let reconciled = try await server.cli(["channel", "reconcile"])
        #expect(reconciled.status == 0, "\(reconciled.stderr)")
        #expect(reconciled.stdout.hasPrefix("(no apps)\n\nsweep:\n  opened:"), "\(reconciled.stdout)")
        let appID = try await server.addApp()

        let anonymous = try await server.cli(["status"], key: "")
        #expect(anonymous.status == 77)
        #expect(anonymous.stderr.contains("MARQUEE_API_KEY"), "\(anonymous.stderr)")
        let wrongKey = "mq_wrong_" + String(repeating: "x", count: 40)
        let wrong = try await server.cli(["status", "--json"], key: wrongKey)
        #expect(wrong.status == 77)
        #expect(try JSONValue(parsing: wrong.stdout)["error"]?["code"] == "unauthorized")
        #expect(!wrong.stdout.contains(wrongKey) && !wrong.stderr.contains(wrongKey), "the key must never be printed")

        // https against the plain-http server: the handshake fails, which is "unreachable" (69) with what to check.
        let tls = try await Self.cli(["status", "--url", "https://127.0.0.1:\(server.port)", "--api-key", server.key])
        #expect(tls.status == 69)
        #expect(tls.stderr.contains("TLS handshake failed"), "\(tls.stderr)")
        #expect(!tls.stderr.contains(server.key))

        let status = try await server.json(["status"])
        #expect(status["apps"]?.arrayValue?.map { $0["app"] } == [.int(appID)])
        #expect(status["apps"]?.arrayValue?.first?["quota"] == 10_000)
        #expect(status["outboxBacklog"] == 0)
        let text = try await server.cli(["status"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("com.example.scores  development  0       10000  0.0%"), "\(text.stdout)")
        #expect(text.stdout.contains("lost channels: none"))

        #expect(try await server.json(["channel", "list", "--app", String(appID)])["channels"] == [])
        #expect(try await server.json(["channel", "sweep"])["opened"] == [])
        // A 5xx answer (the server cannot reach the app's APNs host to list its channels) is temporary: 75.
        let unreachableAPNs = try await server.cli(["channel", "reconcile", "--dry-run"])
        #expect(unreachableAPNs.status == 75)
        #expect(unreachableAPNs.stderr.contains("APNs did not list the channels of app \(appID)"), "\(unreachableAPNs.stderr)")
        #expect(unreachableAPNs.stderr.contains("[HTTP 503"), "\(unreachableAPNs.stderr)")
        for missing in [["channel", "show", "424242"], ["channel", "delete", "424242", "--yes"], ["channel", "recreate", "424242"]] {
            let result = try await server.cli(missing)
            #expect(result.status == 66, "\(missing): \(result.stderr)")
            #expect(result.stderr.contains("not found"), "\(missing): \(result.stderr)")
        }
        await server.stop()
    }

    @Test(.enabled(if: MarqueeProcess.available)) func eventsCreateListShowUpdateEndAgainstServe() async throws {
        let server = try await Server.start()
        let app = try await server.addApp()
        try await server.registerMatchAttributes(app: app)
        #expect(try await server.cli(["event", "list"], key: "").status == 77)

        func create(_ externalID: String, contentState: String = #"{"homeScore":0,"awayScore":0}"#) async throws -> ChildProcess.Outcome {
            try await server.cli([
                "event", "create", "--app", String(app), "--external-id", externalID, "--kind", "match",
                "--attribute-type", "MatchAttributes", "--starts-at", "2031-05-01T19:45:00+02:00",
                "--ends-at", "2031-05-01T21:45:00Z", "--topic", "team:arsenal", "--topic", "team:chelsea",
                "--attributes", #"{"homeTeam":"Arsenal","awayTeam":"Chelsea"}"#, "--content-state", contentState, "--json",
            ])
        }
        let created = try await create("epl-1")
        #expect(created.status == 0, "\(created.stderr)")
        let event = try JSONValue(parsing: created.stdout)
        let id = try #require(event["id"]?.intValue)
        #expect(event["externalId"] == "epl-1" && event["status"] == "scheduled" && event["app"] == .int(app))
        #expect(event["startsAt"] == "2031-05-01T17:45:00Z", "the offset is converted to Z")
        #expect(event["topics"] == ["team:arsenal", "team:chelsea"])
        #expect(event["contentState"] == ["homeScore": 0, "awayScore": 0])

        let duplicate = try await create("epl-1")
        #expect(duplicate.status == 1, "a conflict (409) is a refusal")
        #expect(try JSONValue(parsing: duplicate.stdout)["error"]?["field"] == "externalId")
        let invalid = try await server.cli([
            "event", "create", "--app", String(app), "--external-id", "epl-bad", "--kind", "match",
            "--attribute-type", "MatchAttributes", "--starts-at", "now+5h",
            "--attributes", #"{"homeTeam":"A","awayTeam":"B"}"#, "--content-state", #"{"homeScore":"one","awayScore":0}"#,
        ])
        #expect(invalid.status == 65)
        #expect(invalid.stderr.contains("contentState.homeScore: ") && invalid.stderr.contains("[HTTP 422"), "\(invalid.stderr)")

        for externalID in ["epl-2", "epl-3"] { #expect(try await create(externalID).status == 0) }
        let firstPage = try await server.json(["event", "list", "--app", String(app), "--limit", "1"])
        #expect(firstPage["events"]?.arrayValue?.count == 1)
        #expect(firstPage["nextCursor"]?.stringValue != nil)
        // --all prints as pages arrive: with --json one event per line (JSON Lines), so a Ctrl-C loses nothing printed.
        let all = try await server.cli(["event", "list", "--app", String(app), "--limit", "1", "--all", "--json"])
        #expect(all.status == 0, "\(all.stderr)")
        let lines = all.stdout.split(separator: "\n").map { try? JSONValue(parsing: String($0)) }
        #expect(Set(lines.compactMap { $0?["externalId"]?.stringValue }) == ["epl-1", "epl-2", "epl-3"], "\(all.stdout)")
        #expect(lines.count == 3)
        #expect(try await server.json(["event", "list", "--status", "live"])["events"] == [])
        let table = try await server.cli(["event", "list", "--all", "--limit", "2"])
        #expect(table.stdout.split(separator: "\n").count == 4, "a header and three rows: \(table.stdout)")
        #expect(table.stdout.hasPrefix("ID  APP  EXTERNAL ID  KIND   STATUS"), "\(table.stdout)")
        let withStart = try await server.cli([
            "event", "create", "--app", String(app), "--external-id", "epl-start", "--kind", "match",
            "--attribute-type", "MatchAttributes", "--starts-at", "2031-05-01T19:45:00Z",
            "--attributes", #"{"homeTeam":"Arsenal","awayTeam":"Chelsea"}"#, "--content-state", #"{"homeScore":0,"awayScore":0}"#,
            "--audience-lead", "900", "--start-alert", #"{"title":"Kick-off","body":"Arsenal v Chelsea"}"#, "--json",
        ])
        let started = try JSONValue(parsing: withStart.stdout)
        #expect(started["audienceLead"] == 900 && started["startAlert"]?["title"] == "Kick-off", "\(withStart.stdout) \(withStart.stderr)")

        // An update with an alert, repeated with its idempotency key, then the key reused for another body.
        let update = [
            "event", "update", String(id), "--patch", #"{"homeScore":1,"lastScorer":"Saka"}"#, "--alert-title", "GOAL",
            "--alert-body", "Saka 54'", "--sound", "default", "--priority", "high", "--idempotency-key", "feed-1",
        ]
        let accepted = try await server.json(update)
        #expect(accepted["update"]?["action"] == "update" && accepted["update"]?["disposition"] == "pending")
        #expect(try await server.json(update)["update"]?["id"] == accepted["update"]?["id"])
        let reused = try await server.cli(["event", "update", String(id), "--patch", #"{"homeScore":2}"#, "--idempotency-key", "feed-1"])
        #expect(reused.status == 65)
        #expect(reused.stderr.contains("idempotency_key_reused"), "\(reused.stderr)")
        let localized = try await server.json([
            "event", "update", String(id), "--patch", #"{"awayScore":0}"#,
            "--alert", #"{"title":"GOAL","body":{"locKey":"goal_by","locArgs":["Saka","54"]},"sound":"default"}"#,
        ])
        #expect(localized["update"]?["disposition"] == "pending")
        let late = try await server.json([
            "event", "update", String(id), "--content-state", #"{"homeScore":0,"awayScore":0}"#,
            "--occurred-at", "now-1h", "--relevance-score", "75",
        ])
        #expect(late["update"]?["disposition"] == "superseded")

        let detail = try await server.json(["event", "show", String(id)])
        #expect(detail["contentState"] == ["homeScore": 1, "awayScore": 0, "lastScorer": "Saka"])
        #expect(detail["counts"]?["pending"] == 2 && detail["counts"]?["superseded"] == 1, "\(detail)")
        let shown = try await server.cli(["event", "show", String(id)])
        #expect(shown.stdout.contains("external id:    epl-1") && shown.stdout.contains("pending:"), "\(shown.stdout)")

        let ended = try await server.json([
            "event", "end", String(id), "--patch", #"{"awayScore":1}"#, "--dismissal-date", "now+1h", "--at", "now+10m",
        ])
        #expect(ended["update"]?["action"] == "end")
        let afterEnd = try await server.cli(["event", "update", String(id), "--patch", #"{"homeScore":2}"#])
        #expect(afterEnd.status == 1, "\(afterEnd.stderr)")
        #expect(try await server.cli(["event", "show", "424242"]).status == 66)
        await server.stop()
    }

    @Test(.enabled(if: MarqueeProcess.available)) func statusMarksAnAppNearItsQuotaAndLostChannelsAreRecreated() async throws {
        let server = try await Server.start(["--channel-quota", "5"])
        let app = try await server.addApp()
        try await server.registerMatchAttributes(app: app)
        let event = try await server.json([
            "event", "create", "--app", String(app), "--external-id", "ua-1234", "--kind", "flight",
            "--attribute-type", "MatchAttributes", "--starts-at", "now+5h",
            "--attributes", #"{"homeTeam":"A","awayTeam":"B"}"#, "--content-state", #"{"homeScore":0,"awayScore":0}"#,
        ])
        let eventID = try #require(event["id"]?.intValue)
        // Four channels APNs listed but Marquee never made count against the quota of 5 (80%), and APNs lost the event's channel.
        let pool = PostgresPool(configuration: PostgresConfiguration(url: server.databaseURL), maxConnections: 1)
        defer { pool.close() }
        for name in ["AAAA", "BBBB", "CCCC", "DDDD"] {
            try await pool.query(
                """
                INSERT INTO channels (app_id, apns_channel_id, storage_policy, state, first_seen_at)
                VALUES (\(Int(app)), \(name), 'mostRecent', 'unknown', now())
                """)
        }
        try await pool.query(
            """
            INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, first_seen_at, opened_at, last_error, last_error_at)
            VALUES (\(Int(app)), \(Int(eventID)), 'EEEE', 'mostRecent', 'lost', now(), now(), 'ChannelNotRegistered', now())
            """)
        try await pool.query("UPDATE events SET channel_lost = true WHERE id = \(Int(eventID))")

        let text = try await server.cli(["status"])
        #expect(text.stdout.contains("4       5      80.0% !  lost 1, unknown 4"), "\(text.stdout)")
        #expect(text.stdout.contains("lost channels (1; marquee channel recreate EVENT):"), "\(text.stdout)")
        #expect(text.stdout.contains("\(eventID)      \(app)    ua-1234      5        EEEE          ChannelNotRegistered"), "\(text.stdout)")
        let status = try await server.json(["status"])
        #expect(status["apps"]?.arrayValue?.first?["inUse"] == 4)
        #expect(status["lostChannels"]?.arrayValue?.map { $0["event"] } == [.int(eventID)])
        #expect(try await server.json(["channel", "list", "--state", "unknown"])["channels"]?.arrayValue?.count == 4)
        let shown = try await server.cli(["event", "show", String(eventID)])
        #expect(shown.stdout.contains("CHANNEL LOST"), "\(shown.stdout)")

        let recreated = try await server.json(["channel", "recreate", String(eventID)])
        // The new create goes to the app's APNs host, which refuses connections: the channel waits for a retry.
        #expect(recreated["event"] == .int(eventID) && recreated["state"] != "lost", "\(recreated)")
        // The flag clears once the new channel opens at APNs; until then the event's channel is the new attempt.
        let channels = try await server.json(["channel", "list", "--event", String(eventID)])["channels"]?.arrayValue ?? []
        #expect(channels.count == 1 && channels.first?["id"] == recreated["id"] && channels.first?["state"] != "lost", "\(channels)")
        let again = try await server.cli(["channel", "recreate", String(eventID)])
        #expect(again.status == 1, "\(again.stderr)")
        await server.stop()
    }
}
