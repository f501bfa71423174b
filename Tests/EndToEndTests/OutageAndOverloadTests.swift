import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Testing

/// What serve owes its callers when the database goes away and when more is offered than it sustains (issue 54):
/// an answer that says to come back (503 or 429, with `Retry-After`, in the API's error format), never a hang, and
/// nothing accepted lost. Behaviour only: the bounds below are generous, not measurements.
@Suite(.serialized, .enabled(if: MarqueeProcess.available))
struct OutageAndOverloadTests {
    /// A refusal in the API's format with `Retry-After` in whole seconds.
    static func expectRetryLater(_ answer: BroadcastHarness.Response, status: Int, code: String, _ what: String) {
        #expect(answer.status == status, "\(what): \(answer.status) \(answer.text)")
        #expect(answer.errorCode == code, "\(what): \(answer.text)")
        #expect(answer.json["error"]?["message"]?.stringValue?.isEmpty == false, "\(what): \(answer.text)")
        #expect(answer.json["error"]?["field"] == .null, "\(what): \(answer.text)")
        #expect(answer.headers["retry-after"].flatMap(Int.init).map { $0 >= 1 } == true, "\(what): Retry-After \(answer.headers)")
    }

    /// PostgreSQL stopped under serve: writes and registrations answer 503 with Retry-After within --database-wait (2 s
    /// here; checked against 20 s), /readyz fails, /healthz does not; once it is back, the next write is accepted and the
    /// event's newest state reaches APNs.
    @Test func whileTheDatabaseIsDownWritesAnswer503WithRetryAfterAndNothingIsLostOnceItIsBack() async throws {
        try await ScratchCluster.with { cluster in
            try await BroadcastHarness.run(serveArguments: ["--database-wait", "2"], database: cluster.url) { h in
                let event = try await h.createEvent("outage", startsAt: Date().addingTimeInterval(-60))
                let channel = try await h.openChannel(of: event)
                let before = MatchState(homeScore: 1, period: .firstHalf, minute: 10)
                #expect(try await h.update(event, before).status == 202)
                try await h.waitForState(before, on: channel)
                let tokensKey = try await h.key(scope: "tokens")

                try await cluster.halt()
                for attempt in 1...3 {
                    let started = Date()
                    let answer = try await h.update(event, MatchState(homeScore: 2, period: .firstHalf, minute: 20 + attempt))
                    let took = Date().timeIntervalSince(started)
                    Self.expectRetryLater(answer, status: 503, code: "unavailable", "update \(attempt) while the database is down")
                    #expect(took < 20, "update \(attempt) took \(took) s")
                }
                let registration = try await h.api(
                    "PUT", "/v1/installations/outage-fan",
                    ["app": .int(Int64(h.appID)), "pushToStartToken": .string(String(repeating: "ab", count: 32)), "osVersion": "18.2"],
                    key: tokensKey)
                Self.expectRetryLater(registration, status: 503, code: "unavailable", "a registration while the database is down")
                #expect(try await h.api("GET", "/readyz").status == 503)
                #expect(try await h.api("GET", "/healthz").status == 200)

                try await cluster.resume()
                // A feeder retries its update (same Idempotency-Key) until it is accepted.
                let newest = MatchState(homeScore: 3, period: .secondHalf, minute: 60)
                var accepted = false
                let back = Date()
                while !accepted && Date().timeIntervalSince(back) < 60 {
                    let answer = try await h.update(event, newest, headers: ["Idempotency-Key": "after-the-outage"])
                    accepted = answer.status == 202
                    if !accepted {
                        #expect(answer.status == 503 && answer.headers["retry-after"] != nil, "\(answer.status) \(answer.text)")
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
                #expect(accepted, "no update was accepted within 60 s of the database's return")
                try await h.waitForState(newest, on: channel, timeout: 60)
                try await h.waitUntil("/readyz answers 200 again") { try await h.api("GET", "/readyz").status == 200 }
                let counts = try await h.settledDispositions(of: event)
                #expect(counts["pending", default: 0] == 0, "\(counts)")
            }
        }
    }

    /// The API's only connection held by an update waiting for a row lock, a second request queued behind it past
    /// --max-queue-wait: the next update and the next registration are refused 429 with Retry-After at once, the
    /// health routes still answer, and once the lock goes, the admitted requests are accepted and new ones again.
    @Test func anOverloadedServeAnswers429WithRetryAfter() async throws {
        let arguments = ["--max-connections", "1", "--max-queue-wait", "0.2", "--database-wait", "20"]
        try await BroadcastHarness.run(serveArguments: arguments) { h in
            let blocked = try await h.createEvent("blocked", startsAt: Date().addingTimeInterval(-60))
            let other = try await h.createEvent("other", startsAt: Date().addingTimeInterval(-60))
            // Nothing but the ingest may wait for the lock below: the scheduler plans a channel and the start service
            // records an audience start for each event (a foreign key of each shares the event's row), so both are
            // done first.
            _ = try await h.openChannel(of: blocked)
            try await h.waitUntil("the locked event's audience start is recorded") {
                try await h.count("SELECT count(*) AS n FROM start_runs WHERE event_id = \(blocked)") > 0
            }
            let locker = try await PostgresConnection.connect(url: h.databaseURL)
            try await locker.execute("BEGIN")
            try await locker.execute("SELECT 1 FROM events WHERE id = \(blocked) FOR UPDATE")
            // Sent again while refused: on a loaded machine the serve's own uses of its one connection (the notifier's
            // NOTIFY after the events were created) can make a queue past 0.2 s before the test's requests start.
            func admitted(_ send: @escaping @Sendable () async throws -> BroadcastHarness.Response) async throws -> BroadcastHarness.Response {
                for _ in 0..<100 {
                    let answer = try await send()
                    if answer.status != 429 { return answer }
                    try await Task.sleep(for: .milliseconds(100))
                }
                return try await send()
            }
            let holding = Task { try await admitted { try await h.update(blocked, MatchState(period: .firstHalf, minute: 1)) } }
            // Generous: a full parallel run on two shared cores has starved serve for tens of seconds.
            try await h.waitUntil("serve's only connection waits for the locked event", timeout: 120) {
                try await h.count(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") == 1
            }
            let queued = Task { try await admitted { try await h.update(other, MatchState(period: .firstHalf, minute: 2)) } }
            try await Task.sleep(for: .seconds(1))  // queued for a connection longer than --max-queue-wait

            Self.expectRetryLater(
                try await h.update(other, MatchState(period: .firstHalf, minute: 3)), status: 429, code: "overloaded", "an update")
            let registration = try await h.api(
                "PUT", "/v1/installations/overload-fan",
                ["app": .int(Int64(h.appID)), "pushToStartToken": .string(String(repeating: "cd", count: 32)), "osVersion": "18.2"])
            Self.expectRetryLater(registration, status: 429, code: "overloaded", "a registration")
            #expect(try await h.api("GET", "/healthz").status == 200)
            #expect(try await h.metric("marquee_http_requests_total", ["status": "429"]) >= 2)

            try await locker.execute("ROLLBACK")
            #expect(try await holding.value.status == 202)
            #expect(try await queued.value.status == 202)
            #expect(try await h.update(other, MatchState(period: .firstHalf, minute: 4)).status == 202)
            for event in [blocked, other] {
                let counts = try await h.settledDispositions(of: event)
                #expect(counts["pending", default: 0] == 0, "event \(event): \(counts)")
            }
        }
    }
}
