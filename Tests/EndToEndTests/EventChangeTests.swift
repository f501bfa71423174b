import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// Events that move (PATCH, cancel), through `marquee serve` as a process, a real PostgreSQL and the simulator
/// playing the devices: what the channel carried and what every device shows.
@Suite(.enabled(if: MarqueeProcess.available))
struct EventChangeTests {
    typealias Fans = StartFanOutTests

    /// `POST /v1/events` for a flight already under way (its channel opens at once) ending at `endsAt`.
    static func flight(_ harness: BroadcastHarness, _ externalID: String, endsAt: Date) async throws -> Int {
        let body: JSONValue = [
            "app": .int(Int64(harness.appID)), "externalId": .string(externalID), "kind": "flight", "attributeType": "MatchAttributes",
            "attributes": ["homeTeam": "LHR", "awayTeam": "JFK"], "contentState": MatchState().input,
            "startsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(-60))), "endsAt": .string(BroadcastHarness.iso(endsAt)),
        ]
        let response = try await harness.api("POST", "/v1/events", body)
        try #require(response.status == 201, "POST /v1/events: \(response.text)")
        return Int(try #require(response.json["id"]?.intValue))
    }

    static func ends(on channel: String, _ harness: BroadcastHarness) throws -> [ActivityPush] {
        try harness.pushes(on: channel).map(\.push).filter { $0.aps.event == "end" }
    }

    @Test func aFlightDelayedTwiceEndsOnceAfterItsLastEndsAtAndNeverAtAnEarlierOne() async throws {
        try await BroadcastHarness.run { harness in
            let ingest = try await harness.key(scope: "ingest")
            let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
            // Wide apart, so that a starved machine still moves the flight before its first end and still sees each
            // control end before the last: beside two CPU hogs, 15 s and 35 s were not always enough.
            let (first, second, last) = (now.addingTimeInterval(30), now.addingTimeInterval(40), now.addingTimeInterval(70))
            // The delayed flight is created and moved before anything else, so a slow machine does not reach its
            // first end before the moves (a flight past its end answers PATCH with 409).
            let delayed = try await Self.flight(harness, "BA117", endsAt: first)
            for (index, endsAt) in [second, last].enumerated() {
                let moved = try await harness.api(
                    "PATCH", "/v1/events/\(delayed)",
                    [
                        "startsAt": .string(BroadcastHarness.iso(now.addingTimeInterval(-30 + Double(index) * 10))),
                        "endsAt": .string(BroadcastHarness.iso(endsAt)),
                    ],
                    key: ingest)
                #expect(moved.status == 200, "\(moved.text)")
                #expect(moved.json["endsAt"]?.stringValue.flatMap { Date(iso8601: $0) } == endsAt, "\(moved.text)")
            }
            // Each control flight keeps one of the delayed flight's earlier ends: once it ended, the scheduler
            // has swept past that time (created late, it still ends only once its end has passed).
            let controls = [try await Self.flight(harness, "control-1", endsAt: first), try await Self.flight(harness, "control-2", endsAt: second)]
            let channel = try await harness.openChannel(of: delayed, timeout: 60)
            for control in controls {
                try await harness.waitUntil("control flight \(control) ends on its time") { try await harness.event(control)["status"] == "ended" }
                let status = try await harness.event(delayed)["status"]
                // Seen after the last endsAt (a starved poll), the delayed flight may have ended rightly: the checks
                // below on the end itself, which do not depend on when this looked, say whether it ended too early.
                guard Date() < last else { continue }
                #expect(status == "live" || status == "scheduled", "the delayed flight ended at an earlier endsAt: \(status ?? .null)")
                #expect(try Self.ends(on: channel, harness).isEmpty)
            }
            try await harness.waitUntil("the delayed flight ends") { try await harness.event(delayed)["status"] == "ended" }
            let ends = try Self.ends(on: channel, harness)
            #expect(ends.count == 1)
            #expect(try #require(ends.first).aps.timestamp >= Int(last.timeIntervalSince1970.rounded(.down)), "the end went before the last endsAt")
            // The scheduler queued one end, stamped with its own clock at or after the last endsAt.
            let queuedEnds = try await harness.pool.query(
                "SELECT occurred_at FROM updates WHERE event_id = \(delayed) AND action = \(UpdateAction.end.rawValue)")
            #expect(queuedEnds.count == 1)
            for row in queuedEnds {
                let queuedAt = try row.decode(Date.self, column: "occurred_at")
                #expect(queuedAt >= last, "the end was queued at \(queuedAt), before the last endsAt \(last)")
            }
            // Both changes are recorded with the key that made them.
            let recorded = try await harness.count(
                """
                SELECT count(*)::bigint AS n FROM event_changes c JOIN api_keys k ON k.id = c.api_key_id
                WHERE c.event_id = \(delayed) AND c.kind = \(EventLifecycle.Event.rescheduled.rawValue) AND k.prefix = \(String(ingest.dropFirst(3).prefix(12)))
                """)
            #expect(recorded == 2)
        }
    }

    /// The match state a cancel ends the activities with.
    static var calledOff: MatchState {
        var state = MatchState()
        state.lastScorer = "called off"
        return state
    }

    @Test func aCancelDuringALiveEventEndsEveryDeviceWithTheCancelledStateAndDeletesTheChannel() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"], appBackend: true) { harness in
            // iOS 18 devices join the channel; 17.x ones are updated through their activity tokens.
            let (members, legacy) = MirroringTests.halfOnTokens("c", 40)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            try await MirroringTests.registerKeyedType(harness)
            let event = try await Fans.createMatch(harness, "cancel-live", startsIn: -60, extra: ["attributeType": "KeyedMatch"])
            let channel = try await MirroringTests.startAudience(of: event, tokens: legacy.count, harness)
            #expect(try await harness.update(event, MirroringTests.goals(1), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("every device shows the goal") {
                let shown = Fans.activities(harness)
                return members.allSatisfy { shown[$0.token]?.first?.contentState["homeScore"] == 1 }
            }

            let ingest = try await harness.key(scope: "ingest")
            let cancelled = try await harness.api("POST", "/v1/events/\(event)/cancel", ["contentState": Self.calledOff.input], key: ingest)
            #expect(cancelled.status == 202 && cancelled.json["broadcast"] == true, "\(cancelled.text)")
            try await harness.waitUntil("every device ends with the cancelled state", timeout: 60) {
                let shown = Fans.activities(harness)
                return members.allSatisfy {
                    let activity = shown[$0.token]?.first
                    return activity?.state == .ended && activity?.contentState["lastScorer"] == "called off"
                }
            }
            #expect(Fans.activities(harness).values.allSatisfy { $0.count == 1 }, "a device shows a second activity")
            try await harness.waitUntil("the channel is deleted at APNs") { harness.simulator.engine.channel(id: channel) == nil }
            try await harness.waitUntil("the channel's delete is recorded") { try await harness.event(event)["channel"]?["state"] == "deleted" }
            #expect(try await harness.event(event)["status"] == "cancelled")
            #expect(try Self.ends(on: channel, harness).count == 1)
            #expect(try await harness.api("POST", "/v1/events/\(event)/cancel", [:], key: ingest).status == 409)
        }
    }

    @Test func aCancelBeforeAnyStartSendsNothingAndDeletesTheOpenChannel() async throws {
        try await BroadcastHarness.run { harness in
            let members = (1...20).map {
                Fans.Member(installationID: "q-\($0)", token: Fans.token($0), os: "18.2", follows: true, enabled: true)
            }
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            // Inside the channel's lead time, long before the audience's.
            let event = try await Fans.createMatch(harness, "cancel-early", startsIn: 3600)
            let channel = try await harness.openChannel(of: event, timeout: 60)
            let quota = harness.simulator.engine.channels(bundleID: BroadcastHarness.bundleID).count
            let cancelled = try await harness.api("POST", "/v1/events/\(event)/cancel", ["contentState": Self.calledOff.input])
            #expect(cancelled.status == 202 && cancelled.json["broadcast"] == false, "\(cancelled.text)")
            try await harness.waitUntil("the open channel is deleted at APNs") { harness.simulator.engine.channel(id: channel) == nil }
            try await harness.waitUntil("the channel's delete is recorded") { try await harness.event(event)["channel"]?["state"] == "deleted" }
            #expect(harness.simulator.engine.channels(bundleID: BroadcastHarness.bundleID).count == quota - 1)
            #expect(harness.broadcasts(on: channel).isEmpty, "a broadcast went out")
            #expect(harness.simulator.engine.devicePushes.isEmpty, "a device push went out")
            #expect(Fans.activities(harness).values.allSatisfy { $0.isEmpty })
            let detail = try await harness.event(event)
            #expect(detail["status"] == "cancelled" && detail["channel"]?["state"] == "deleted", "\(detail)")
            #expect(try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"] == [])
        }
    }

    @Test func theDismissalLimitAndTheEightHourWarning() async throws {
        try await BroadcastHarness.run { harness in
            let cli = CLIOutputTests.CLI(h: harness)
            // The CLI prints the warning of an event whose activities would outlive 8 hours; --json keeps it in the answer.
            let long = try await cli.run([
                "event", "create", "--app", String(harness.appID), "--external-id", "overnight", "--kind", "flight",
                "--attribute-type", "MatchAttributes", "--starts-at", "now-1m", "--ends-at", "now+9h",
                "--attributes", #"{"homeTeam":"SIN","awayTeam":"EWR"}"#, "--content-state", MatchState().input.jsonString, "--json",
            ])
            #expect(long.status == 0, "\(long.stderr)")
            let created = try JSONValue(parsing: long.stdout)
            #expect(created["warnings"]?.arrayValue?.map { $0["code"] } == ["activity_outlives_8h"], "\(long.stdout)")
            #expect(long.stderr.contains("warning:") && long.stderr.contains("activity_outlives_8h"), "\(long.stderr)")
            let event = Int(try #require(created["id"]?.intValue))
            let shorter = try await cli.run(["event", "reschedule", String(event), "--ends-at", "now+7h"])
            #expect(shorter.status == 0 && !shorter.stderr.contains("warning"), "\(shorter.stderr)")
            let longer = try await cli.run(["event", "reschedule", String(event), "--ends-at", "now+510m"])
            #expect(longer.status == 0 && longer.stderr.contains("activity_outlives_8h"), "\(longer.stderr)")

            // A dismissal date past 4 hours after the end is refused, naming the field, and nothing is sent.
            let channel = try await harness.openChannel(of: event, timeout: 60)
            let now = Date()
            let late = try await harness.api(
                "POST", "/v1/events/\(event)/end",
                ["contentState": Self.calledOff.input, "dismissalDate": .string(BroadcastHarness.iso(now.addingTimeInterval(4 * 3600 + 120)))])
            #expect(late.status == 422 && late.json["error"]?["field"] == "dismissalDate", "\(late.text)")
            let lateCancel = try await harness.api(
                "POST", "/v1/events/\(event)/cancel", ["dismissalDate": .string(BroadcastHarness.iso(now.addingTimeInterval(5 * 3600)))])
            #expect(lateCancel.status == 422 && lateCancel.json["error"]?["field"] == "dismissalDate", "\(lateCancel.text)")
            #expect(try Self.ends(on: channel, harness).isEmpty)
            try await harness.waitUntil("the flight is live, not ending") { try await harness.event(event)["status"] == "live" }
            // Within 4 hours of the end it goes out as asked.
            let dismissal = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + 3 * 3600).rounded(.down))
            let end = try await harness.api(
                "POST", "/v1/events/\(event)/end", ["contentState": Self.calledOff.input, "dismissalDate": .string(BroadcastHarness.iso(dismissal))])
            #expect(end.status == 202, "\(end.text)")
            try await harness.waitUntil("the end is broadcast") { try !Self.ends(on: channel, harness).isEmpty }
            let ends = try Self.ends(on: channel, harness)
            #expect(ends.count == 1 && ends.first?.aps.dismissalDate == Int(dismissal.timeIntervalSince1970), "\(ends.map(\.aps.dismissalDate))")
        }
    }

    @Test func aPostponementAfterTheStartRunEndsTheActivitiesAndStartsOneNewActivityEachAtTheNewLead() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900", "--restart-on-postpone", "60"], appBackend: true) { harness in
            let (members, legacy) = MirroringTests.halfOnTokens("p", 30)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            try await MirroringTests.registerKeyedType(harness)
            let kickoff = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 600).rounded(.down))
            let event = try await Fans.createMatch(
                harness, "postponed", extra: ["attributeType": "KeyedMatch", "startsAt": .string(BroadcastHarness.iso(kickoff))])
            let firstChannel = try await harness.openChannel(of: event, timeout: 60)
            _ = try await Fans.run(of: event, harness, until: Fans.firstPassDone)
            try await harness.waitUntil("every follower shows the activity") {
                let shown = Fans.activities(harness)
                return members.allSatisfy { shown[$0.token]?.count == 1 && shown[$0.token]?.first?.isRunning == true }
            }
            try await harness.waitUntil("the 17.x devices' activity tokens are registered") {
                try await harness.event(event)["mirroring"]?["activities"] == .int(Int64(legacy.count))
            }

            // Kick-off two minutes later, past the 60 s threshold: the new lead (900 s) is already due.
            var postponed = MatchState()
            postponed.lastScorer = "postponed"
            let ingest = try await harness.key(scope: "ingest")
            let moved = try await harness.api(
                "PATCH", "/v1/events/\(event)",
                ["startsAt": .string(BroadcastHarness.iso(kickoff.addingTimeInterval(120))), "postponedState": postponed.input], key: ingest)
            #expect(moved.status == 200 && moved.json["postponed"] == true && moved.json["status"] == "scheduled", "\(moved.text)")
            let recorded = try await harness.count(
                "SELECT count(*)::bigint AS n FROM event_changes WHERE event_id = \(event) AND kind = \(EventLifecycle.Event.postponed.rawValue)")
            #expect(recorded == 1)

            func settled() -> Bool {
                let shown = Fans.activities(harness)
                return members.allSatisfy { member in
                    guard let activities = shown[member.token], activities.count == 2 else { return false }
                    return activities.filter(\.isRunning).count == 1
                        && activities.contains { !$0.isRunning && $0.contentState["lastScorer"] == "postponed" }
                }
            }
            try await harness.waitUntil("every device shows the postponed state, then one new activity", timeout: 120) { settled() }
            let secondChannel = try await harness.openChannel(of: event, timeout: 60)
            #expect(secondChannel != firstChannel)
            let shown = Fans.activities(harness)
            for member in members where member.os == "18.1" {
                #expect(shown[member.token]?.first { $0.isRunning }?.channelID == secondChannel, "\(member.installationID)")
            }
            let runs = try #require(try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"]?.arrayValue)
            #expect(runs.filter { $0["kind"] == "automatic" }.count == 2, "\(runs)")

            // The registry keeps the old activities too (the app reported no end); none of the new ones is behind.
            try await harness.waitUntil("the new 17.x activities' tokens are registered", timeout: 60) {
                let mirroring = try await harness.event(event)["mirroring"]
                return mirroring?["activities"] == .int(Int64(2 * legacy.count)) && mirroring?["behind"] == 0
            }
            // The new activities take the event's next update, the 17.x ones through their new tokens.
            #expect(try await harness.update(event, MirroringTests.goals(1), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("every new activity shows the goal", timeout: 60) {
                let shown = Fans.activities(harness)
                return members.allSatisfy { shown[$0.token]?.first { $0.isRunning }?.contentState["homeScore"] == 1 }
            }
            #expect(settled(), "a new activity ended")
            // The postponement's end went to the old activities' tokens only, never to a new one's (a device ignores a
            // push no newer than its start, but one sent within the same second would end the new activity).
            let now = Fans.activities(harness)
            for member in legacy {
                let activities = try #require(now[member.token])
                for activity in activities {
                    let token = try #require(activity.updateToken, "\(member.installationID) has no update token")
                    let ends = try harness.simulator.engine.devicePushes(to: token).filter {
                        try JSONDecoder().decode(ActivityPush.self, from: Data($0.payload)).aps.event == "end"
                    }
                    #expect(
                        ends.count == (activity.isRunning ? 0 : 1), "\(member.installationID): \(ends.count) ends to a \(activity.state) activity")
                }
            }
            try await harness.waitUntil("the first channel is deleted") { harness.simulator.engine.channel(id: firstChannel) == nil }
        }
    }
}
