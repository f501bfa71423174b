import Foundation
import MarqueeCore
import MarqueeService
import MarqueeTestSupport
import Postgres
import Testing

/// `marquee serve` as a process: the API over HTTP, and a graceful stop on SIGTERM.
@Suite(.enabled(if: MarqueeProcess.available))
struct ServeTests {
    /// Starts `marquee serve` on a free port and waits for its `listening` line; returns the process and port.
    static func startServe(databaseURL: String, extra: [String] = []) async throws -> (ChildProcess, Int) {
        try await MarqueeProcess.serve(databaseURL: databaseURL, arguments: extra)
    }

    static func adminKey(databaseURL: String) async throws -> String {
        let created = try await MarqueeProcess.run(["key", "create", "--scope", "admin", "--json"], databaseURL: databaseURL)
        return try #require(try JSONValue(parsing: created.stdout)["key"]?.stringValue)
    }

    @Test func servesTheAPIOverHTTP() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        let (serve, port) = try await Self.startServe(databaseURL: url)
        let key = try await Self.adminKey(databaseURL: url)
        #expect(try await LoopbackHTTP.request(port: port, "GET", "/healthz").status == 200)
        // Ready once the database answers /readyz's probe within its 2 s: a starved machine can miss that at first.
        #expect(try await eventually { try await LoopbackHTTP.request(port: port, "GET", "/readyz").status == 200 })
        let document = try await LoopbackHTTP.request(port: port, "GET", "/openapi.json")
        #expect(document.text == OpenAPIDocument.text)
        #expect(try await LoopbackHTTP.request(port: port, "GET", "/v1/apps").status == 401)
        let apps = try await LoopbackHTTP.request(port: port, "GET", "/v1/apps", headers: ["Authorization": "Bearer \(key)"])
        #expect(apps.status == 200)
        #expect(apps.text == #"{"apps":[]}"#)
        // The server's own limit answers in the API's error format.
        let big = try await LoopbackHTTP.request(
            port: port, "POST", "/v1/attribute-types",
            headers: ["Authorization": "Bearer \(key)", "Content-Type": "application/json"],
            body: Array(repeating: 0x20, count: 100_000))
        #expect(big.status == 413)
        #expect(try JSONValue(parsing: big.body)["error"]?["code"] == "payload_too_large")
        // Above evhttp's own 1 MiB limit too (it refuses before reading the body; curl sends it as a client would).
        let huge = FileManager.default.temporaryDirectory.appending(path: "marquee-huge-\(UUID().uuidString)")
        try Data(repeating: 0x20, count: 1_100_000).write(to: huge)
        defer { try? FileManager.default.removeItem(at: huge) }
        let curl = try await ChildProcess.run(
            "/usr/bin/curl",
            [
                "-s", "-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json",
                "--data-binary", "@\(huge.path)", "-w", "\n%{http_code}", "http://127.0.0.1:\(port)/v1/attribute-types",
            ])
        let output = curl.stdout
        let (answer, code) = (output.split(separator: "\n").first.map(String.init) ?? "", output.split(separator: "\n").last)
        #expect(code == "413", "\(output)")
        #expect((try? JSONValue(parsing: answer))?["error"]?["code"] == "payload_too_large", "\(output)")
        let metrics = try await LoopbackHTTP.request(port: port, "GET", "/metrics")
        #expect(metrics.text.contains(#"marquee_http_requests_total{method="GET",route="/v1/apps",status="200"} 1"#))

        serve.signal(SIGTERM)
        #expect(await serve.wait() == 0)
        // One line per request with the route template; the key's secret never appears.
        #expect(serve.stderr.contains(#""route":"/v1/apps""#))
        #expect(!serve.stderr.contains(String(key.suffix(43))))
    }

    @Test func sigtermLetsRequestsInFlightFinishAndRefusesNewConnections() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        let (serve, port) = try await Self.startServe(databaseURL: url, extra: ["--grace-period", "120"])
        let key = try await Self.adminKey(databaseURL: url)

        // Slow requests: hold a lock on api_keys, so each request's key lookup waits in PostgreSQL.
        let blocker = try await PostgresConnection.connect(PostgresConfiguration(url: url))
        try await blocker.executeScript("BEGIN; LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        // They wait on the lock for the rest of the test, which on a loaded machine can pass the default 30 s.
        let requests = (0..<3).map { _ in
            Task { try await LoopbackHTTP.request(port: port, "GET", "/v1/apps", headers: ["Authorization": "Bearer \(key)"], timeout: 300) }
        }
        let observer = try await PostgresConnection.connect(PostgresConfiguration(url: url))
        let allWaiting = try await eventually {
            try await observer.query(
                """
                SELECT count(*)::bigint AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%api_keys%'
                """)[0].decode(Int.self, column: "n") == 3
        }
        #expect(allWaiting, "the slow requests never reached the database")

        serve.signal(SIGTERM)
        let refused = try await eventually { await !LoopbackHTTP.canConnect(port: port) }
        #expect(refused, "new connections are still accepted after SIGTERM")
        #expect(serve.isRunning, "the process must wait for requests in flight")

        try await blocker.executeScript("COMMIT")
        for request in requests {
            let response = try await request.value
            #expect(response.status == 200, "\(response.text)")
        }
        #expect(await serve.wait() == 0, "\(serve.stderr)")
    }

    @Test func noMigrateRefusesToStartOnABehindSchema() async throws {
        let url = try await TestDatabase.freshURL("e2e")
        let result = try await MarqueeProcess.run(["serve", "--listen", "127.0.0.1:0", "--no-migrate"], databaseURL: url)
        #expect(result.status == 78)
        #expect(result.stderr.contains("0001_init.sql"))
    }
}
