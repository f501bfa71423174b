import APNsSimulator
import Foundation
import MarqueeCore
import Testing

/// What a start run reports stays true after the fact (issue 48): `marquee_start_runs_total` counts every
/// transition where it happens (a manual run made, a run a postponement or a cancel stops), a run's counts never shrink when
/// an installation it started is erased, and its estimated audience follows followers who come late.
@Suite(.enabled(if: MarqueeProcess.available))
struct StartRunAccountingTests {
    typealias Fans = StartFanOutTests

    @Test func aRunsCountsAndEstimateFollowTheAudienceAndTheMetricCountsEveryTransition() async throws {
        try await BroadcastHarness.run(
            // No wait for a channel: the second round's run would otherwise wait --start-channel-wait (60 s) for a new one
            // once the first round's channel has ended, or race that end onto the old channel.
            serveArguments: ["--audience-lead", "900", "--late-start-interval", "1", "--restart-on-postpone", "60", "--start-channel-wait", "0"],
            appBackend: false
        ) { harness in
            let event = try await Fans.createMatch(harness, "accounting", startsIn: 7200)
            // A manual run made before anyone follows: counted as created (running) where it is made.
            #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
            #expect(try await harness.metric("marquee_start_runs_total", ["kind": "manual", "state": "running"]) == 1)
            let empty = try await Fans.run(of: event, harness, until: Fans.firstPassDone)
            #expect(empty["state"] == "rolling" && empty["progress"]?["estimatedAudience"] == 0, "\(empty)")

            // Followers come late: the next pass starts them, and the estimate counts them.
            let members = (1...3).map {
                Fans.Member(installationID: "late-\($0)", token: Fans.token(700 + $0), os: "18.1", follows: true, enabled: true)
            }
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            let started = try await Fans.run(of: event, harness) {
                $0["counts"]?["accepted"] == 3 && $0["progress"]?["estimatedAudience"] == 3
            }
            #expect(started["state"] == "rolling", "\(started)")

            // An installation erased after its start still counts in the run that started it.
            let tokensKey = try await harness.key(scope: "tokens")
            let erased = try await harness.api("DELETE", "/v1/installations/late-1?app=\(harness.appID)", key: tokensKey)
            #expect(erased.status == 204, "\(erased.text)")
            #expect(
                try await harness.count("SELECT count(*)::bigint AS n FROM starts WHERE token = \(Fans.token(701))") == 0,
                "the erased installation's token is kept in its start")
            // The start itself stays (a run's counts are recounted from its starts when it ends), without the token.
            let run = Int(try #require(started["id"]?.intValue))
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM starts WHERE run_id = \(run) AND state = 'accepted'") == 3)
            // Two more late passes (one a second) change nothing: waited for by the run's pass number, not a time.
            let pass = try await harness.count("SELECT pass::bigint AS n FROM start_runs WHERE id = \(run)")
            try await harness.waitUntil("two more late passes ran") {
                try await harness.count("SELECT pass::bigint AS n FROM start_runs WHERE id = \(run)") >= pass + 2
            }
            let after = try #require(try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"]?.arrayValue?.first)
            #expect(after["counts"]?["accepted"] == 3, "\(after)")

            // A postponement stops the run: counted as stopped where it happens.
            let moved = try await harness.api(
                "PATCH", "/v1/events/\(event)",
                [
                    "startsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(3 * 3600))),
                    "endsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(5 * 3600))),
                ])
            #expect(moved.status == 200 && moved.json["postponed"] == true, "\(moved.text)")
            #expect(try await harness.metric("marquee_start_runs_total", ["kind": "manual", "state": "stopped"]) == 1)
            let stopped = try #require(
                try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"]?.arrayValue?.first { $0["kind"] == "manual" })
            #expect(stopped["state"] == "stopped" && stopped["counts"]?["accepted"] == 3, "\(stopped)")

            // A cancel stops a rolling run too (StartRunLifecycle): counted as stopped where the fan-out ends it.
            #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
            let rolling = try await Fans.run(of: event, harness, until: Fans.firstPassDone)
            #expect(rolling["state"] == "rolling", "\(rolling)")
            #expect(try await harness.api("POST", "/v1/events/\(event)/cancel", [:]).status == 202)
            let cancelled = try await Fans.run(of: event, harness) { $0["state"] != "rolling" }
            #expect(cancelled["state"] == "stopped", "\(cancelled)")
            try await harness.waitUntil("the fan-out counted the stop") {
                try await harness.metric("marquee_start_runs_total", ["kind": "manual", "state": "stopped"]) == 2
            }
        }
    }

    /// `event starts --follow` before the event has a run waits for one (it exited 66), and follows a rolling run
    /// through its late passes until it is done (it returned at once), as a kick-off is watched (issue 48).
    @Test func followWaitsForTheRunAndFollowsItUntilItIsDone() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900", "--late-start-interval", "1"]) { harness in
            let event = try await Fans.createMatch(harness, "followed", startsIn: 7200)
            let environment = CLIOutputTests.CLI(h: harness).environment
            let follow = try MarqueeProcess.start(
                ["event", "starts", String(event), "--follow", "--interval", "0.2"], databaseURL: nil, environment: environment)
            try await harness.waitUntil("--follow waits for a run") { follow.stderr.contains("has no start run yet: waiting for one") }
            #expect(follow.isRunning, "\(follow.stderr)")

            #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
            try await harness.waitUntil("--follow shows the rolling run") { follow.stderr.contains(" rolling ") }
            // It looked again (every 0.2 s) and is still following: three looks at the rolling run, not a fixed time.
            try await harness.waitUntil("--follow looked at the rolling run three times") {
                follow.stderr.components(separatedBy: " rolling ").count > 3 || !follow.isRunning
            }
            #expect(follow.isRunning, "--follow returned on a rolling run: \(follow.stderr)")

            // The event ends: the run is done, and --follow prints it and exits 0.
            #expect(try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": MatchState().input]).status == 202)
            #expect(await follow.wait() == 0, "\(follow.stderr)")
            #expect(follow.stdout.contains("state:") && follow.stdout.contains("done"), "\(follow.stdout)")
        }
    }
}
