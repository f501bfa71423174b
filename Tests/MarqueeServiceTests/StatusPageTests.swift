import Foundation
import MarqueeCore
import MarqueeService
import MarqueeTestSupport
import Testing

/// The status page's files and headers, and the JSON it reads, through APIServer.respond (the page in a real
/// browser is Scripts/page-test).
@Suite(.enabled(if: APIHarness.available))
struct StatusPageTests {
    static let policy = "default-src 'self'; script-src 'self'; frame-ancestors 'none'"

    @Test func thePageIsServedWithItsPolicyAndWritesNoMarkupFromData() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let root = await harness.send("GET", "/")
        #expect(root.status == 302)
        #expect(root.response.headers["location"] == "/status")
        var scripts: [String] = []
        for (path, type) in [("/status", "text/html"), ("/status/status.css", "text/css"), ("/status/status.js", "text/javascript")] {
            let answer = await harness.send("GET", path)
            #expect(answer.status == 200, "\(path)")
            #expect(answer.response.headers["content-type"]?.hasPrefix(type) == true, "\(path)")
            #expect(answer.response.headers["content-security-policy"] == Self.policy, "\(path)")
            #expect(answer.response.headers["x-content-type-options"] == "nosniff", "\(path)")
            #expect(answer.text.count > 500, "\(path) is the file")
            if path == "/status/status.js" { scripts.append(answer.text) }
            if path == "/status" {
                // No inline script or style, nothing from another origin.
                let page = answer.text
                #expect(page.contains(#"<script src="/status/status.js" defer></script>"#))
                #expect(page.matches(of: /<script/).count == 1)
                #expect(!page.contains(" style=") && !page.contains("<style") && page.firstMatch(of: /\son[a-z]+=/) == nil)
                #expect(!page.contains("http://") && !page.contains("https://") && !page.contains("//cdn"))
            }
        }
        // Data goes in as text: nothing in the script parses markup.
        for script in scripts {
            for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
                #expect(!script.contains(sink), "status.js uses \(sink)")
            }
            #expect(script.contains("sessionStorage") && !script.contains("localStorage") && !script.contains("document.cookie"))
        }
        // The page's file in the repository is what is served.
        let file = try String(contentsOf: RepositoryCheckout.root.appending(path: "StatusPage/status.js"), encoding: .utf8)
        #expect(scripts == [file])
    }

    @Test func aStatusKeyReadsTheStatusAndTheBoardAndNothingElse() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let key = try await harness.key(.status)
        let status = await harness.send("GET", "/v1/status", key: key)
        #expect(status.status == 200, "\(status.text)")
        #expect(status.json?["mirroring"]?["passesRunning"] == 0)
        #expect(status.json?["startRunsInProgress"] == 0)
        let board = await harness.send("GET", "/v1/status/board", key: key)
        #expect(board.status == 200, "\(board.text)")
        let json = try #require(board.json)
        #expect(json["events"] == [])
        #expect(json["broadcasts"]?["accepted"] == 0)
        #expect(json["broadcasts"]?["latency"]?["p99"] == .null)
        #expect(json["broadcasts"]?["latency"]?["buckets"]?.arrayValue?.count == 12)
        #expect(json["startRuns"] == [] && json["errorsByReason"] == [])
        #expect((await harness.send("GET", "/v1/channels", key: key)).status == 403)
        #expect((await harness.send("POST", "/v1/channels/sweep", key: key)).status == 403)
        #expect((await harness.send("GET", "/v1/events", key: key)).status == 403)
    }
}
