import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// The start fan-out through `marquee serve` as a process, a real PostgreSQL and the simulator playing the
/// devices: what every device shows, not what APNs answered.
@Suite(.enabled(if: MarqueeProcess.available))
struct StartFanOutTests {
    /// One installation of the test audience.
    struct Member {
        let installationID: String
        let token: String
        let os: String
        let follows: Bool
        let enabled: Bool
    }

    static func token(_ index: Int, generation: Int = 0) -> String {
        let hex = String(index, radix: 16)
        return (generation == 0 ? "ab" : "cd") + String(repeating: "0", count: 62 - hex.count) + hex
    }

    /// `count` installations: half on iOS 18, most of the rest on 17.2 to 17.x, every tenth below 17.2;
    /// every 23rd follows nothing and every 37th turned Live Activities off.
    static func audience(_ count: Int) -> [Member] {
        (1...count).map { index in
            let os =
                switch index % 10 {
                case 0...4: "18.\(index % 3)"
                case 5...8: "17.\(2 + index % 4)"
                default: "16.4"
                }
            return Member(
                installationID: "phone-\(index)", token: token(index), os: os, follows: index % 23 != 0, enabled: index % 37 != 0)
        }
    }

    /// Stores the members straight in the registry (one statement each for installations and follows), and
    /// gives the simulator their devices (without `appRegisters`, devices that do not know their installation id,
    /// so their app registers no activity with the backend).
    static func seed(_ members: [Member], topic: String, harness: BroadcastHarness, appRegisters: Bool = true) async throws {
        let rows = JSONValue.array(
            members.map {
                let version = OSVersion($0.os)!
                return [
                    "id": .string($0.installationID), "token": .string($0.token), "os": .string($0.os), "major": .int(Int64(version.major)),
                    "minor": .int(Int64(version.minor)), "patch": .int(Int64(version.patch)), "follows": .bool($0.follows),
                    "enabled": .bool($0.enabled),
                ]
            })
        try await harness.pool.execute(
            """
            WITH input AS (
                SELECT * FROM jsonb_to_recordset(\(unsafeRaw: "'" + rows.jsonString.replacingOccurrences(of: "'", with: "''") + "'")::jsonb)
                    AS i (id text, token text, os text, major integer, minor integer, patch integer, follows boolean, enabled boolean)
            ), stored AS (
                INSERT INTO installations (app_id, installation_id, os_version, os_major, os_minor, os_patch, push_to_start_token,
                                           token_registered_at, token_seen_at, live_activities_enabled)
                SELECT \(harness.appID), id, os, major, minor, patch, token, now(), now(), enabled FROM input
                RETURNING id, installation_id
            )
            INSERT INTO follows (installation, app_id, topic)
            SELECT s.id, \(harness.appID), \(topic) FROM stored s JOIN input i ON i.id = s.installation_id WHERE i.follows
            """)
        _ = harness.simulator.engine.devices.add(
            members.map {
                SimulatedDeviceSpec(
                    pushToStartToken: $0.token, osVersion: SimulatorOSVersion(parsing: $0.os)!, installationID: appRegisters ? $0.installationID : nil
                )
            })
    }

    /// `POST /v1/events` for a match on `team:arsenal` with a start alert; returns its id.
    static func createMatch(_ harness: BroadcastHarness, _ externalID: String, startsIn: TimeInterval = 600, extra: JSONObject = [:])
        async throws -> Int
    {
        var body: JSONObject = [
            "app": .int(Int64(harness.appID)), "externalId": .string(externalID), "kind": "match", "attributeType": "MatchAttributes",
            "attributes": ["homeTeam": "Arsenal", "awayTeam": "Chelsea"], "contentState": MatchState().input,
            "startsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(startsIn))),
            "endsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(startsIn + 7200))), "topics": ["team:arsenal"],
            "startAlert": ["title": "Kick-off soon", "body": "Arsenal v Chelsea"],
        ]
        for (key, value) in extra { body[key] = value }
        let response = try await harness.api("POST", "/v1/events", .object(body))
        try #require(response.status == 201, "POST /v1/events: \(response.text)")
        return Int(try #require(response.json["id"]?.intValue))
    }

    /// The event's newest run, once `condition` holds for it.
    static func run(
        of event: Int, _ harness: BroadcastHarness, timeout: Double = 60, until condition: @escaping (JSONValue) -> Bool
    ) async throws -> JSONValue {
        var newest: JSONValue = .null
        try await harness.waitUntil("event \(event)'s start run settles", timeout: timeout) {
            newest = try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"]?.arrayValue?.first ?? .null
            return newest != .null && condition(newest)
        }
        return newest
    }

    static func firstPassDone(_ run: JSONValue) -> Bool { run["state"] != "running" }

    /// The activities each device shows, by push-to-start token.
    static func activities(_ harness: BroadcastHarness) -> [String: [SimulatedActivity]] {
        var shown: [String: [SimulatedActivity]] = [:]
        for device in harness.simulator.engine.devices.snapshot(at: Date()) { shown[device.pushToStartToken] = device.activities }
        return shown
    }

    @Test func everyFollowerShowsOneActivityOnThePathItsOSAllows() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"]) { harness in
            let members = Self.audience(2000)
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            // Outsiders: a device the registry does not know of.
            _ = harness.simulator.engine.devices.add([SimulatedDeviceSpec(pushToStartToken: Self.token(99_999), osVersion: SimulatorOSVersion(18))])
            let event = try await Self.createMatch(harness, "fanout-1")
            let channel = try await harness.openChannel(of: event)
            let run = try await Self.run(of: event, harness, until: Self.firstPassDone)
            let startable = members.filter { $0.follows && $0.enabled && OSVersion($0.os)! >= .pushToStart }
            let notStartable = members.filter { $0.follows && $0.enabled && OSVersion($0.os)! < .pushToStart }
            #expect(run["kind"] == "automatic")
            #expect(run["counts"]?["accepted"]?.intValue == Int64(startable.count), "\(run)")
            #expect(run["counts"]?["notStartable"]?.intValue == Int64(notStartable.count), "\(run)")
            #expect(run["counts"]?["unknown"] == 0 && run["counts"]?["sending"] == 0, "\(run)")
            #expect(run["counts"]?["noChannel"] == 0, "\(run)")
            #expect(run["progress"]?["estimatedAudience"]?.intValue == Int64(members.filter(\.follows).count), "\(run)")

            let shown = Self.activities(harness)
            for member in members {
                let activities = shown[member.token] ?? []
                let os = OSVersion(member.os)!
                if member.follows && member.enabled && os >= .pushToStart {
                    try #require(activities.count == 1, "\(member.installationID) on \(member.os) shows \(activities.count) activities")
                    let activity = activities[0]
                    #expect(activity.attributesType == "MatchAttributes" && activity.attributes["homeTeam"] == "Arsenal")
                    if os >= .channels {
                        #expect(activity.channelID == channel, "\(member.installationID) on \(member.os) listens on \(activity.updatePath)")
                    } else {
                        #expect(activity.updateToken != nil, "\(member.installationID) on \(member.os) has an update token")
                    }
                } else {
                    #expect(activities.isEmpty, "\(member.installationID) (follows \(member.follows), enabled \(member.enabled), \(member.os))")
                }
            }
            #expect(shown[Self.token(99_999)]?.isEmpty == true)

            // A broadcast reaches every activity on the channel; a second run of the event starts nobody again.
            var goal = MatchState()
            goal.homeScore = 1
            #expect(try await harness.update(event, goal, extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("the goal reaches the channel's activities") {
                let now = Self.activities(harness)
                return members.filter { $0.follows && $0.enabled && OSVersion($0.os)! >= .channels }.allSatisfy {
                    now[$0.token]?.first?.contentState["homeScore"] == 1
                }
            }
            // Adoption: the app registers the activities it sees start (here three of them); APNs' 200 is not adoption.
            #expect(run["adoption"]?["total"] == 0)
            let tokensKey = try await harness.key(scope: "tokens")
            for member in [
                startable.first { $0.os.hasPrefix("18") }!, startable.last { $0.os.hasPrefix("18") }!, startable.first { $0.os.hasPrefix("17") }!,
            ] {
                let activity = try #require(shown[member.token]?.first)
                var body: JSONObject = ["event": .int(Int64(event)), "attributesType": "MatchAttributes"]
                if let token = activity.updateToken {
                    body["pushType"] = "token"
                    body["pushToken"] = .string(token)
                } else {
                    body["pushType"] = "channel"
                }
                let registered = try await harness.api(
                    "PUT", "/v1/installations/\(member.installationID)/activities/\(activity.id)?app=\(harness.appID)", .object(body), key: tokensKey)
                #expect(registered.status == 201, "\(registered.text)")
            }
            let adopted = try await Self.run(of: event, harness) { $0["adoption"]?["total"] == 3 }
            #expect(adopted["adoption"]?["byOSMajor"] == ["17": 1, "18": 2], "\(adopted)")

            let again = try await harness.api("POST", "/v1/events/\(event)/starts", [:])
            #expect(again.status == 202, "\(again.text)")
            let second = try await Self.run(of: event, harness, until: Self.firstPassDone)
            #expect(second["id"] != run["id"] && second["kind"] == "manual")
            #expect(second["counts"]?["accepted"] == 0, "\(second)")
            #expect(Self.activities(harness).values.allSatisfy { $0.count <= 1 }, "no device shows two activities")
        }
    }

    @Test func manualRunsAreValidatedAndNothingStartsForAnEventThatIsOver() async throws {
        try await BroadcastHarness.run { harness in
            let event = try await Self.createMatch(harness, "fanout-refusals", startsIn: 7200, extra: ["startAlert": .null])
            let noAlert = try await harness.api("POST", "/v1/events/\(event)/starts", [:])
            #expect(noAlert.status == 422 && noAlert.errorCode == "no_alert" && noAlert.json["error"]?["field"] == "alert", "\(noAlert.text)")
            let badTopic = try await harness.api(
                "POST", "/v1/events/\(event)/starts", ["topics": ["team:spurs"], "alert": ["title": "t", "body": "b"]])
            #expect(badTopic.status == 422 && badTopic.json["error"]?["field"] == "topics[0]", "\(badTopic.text)")
            let unknownField = try await harness.api("POST", "/v1/events/\(event)/starts", ["alrt": ["title": "t"]])
            #expect(unknownField.status == 422 && unknownField.json["error"]?["field"] == "alrt", "\(unknownField.text)")
            let badAlert = try await harness.api("POST", "/v1/events/\(event)/starts", ["alert": ["title": 3]])
            #expect(badAlert.status == 422, "\(badAlert.text)")
            #expect(try await harness.api("GET", "/v1/events/\(event)/starts").json["runs"] == [], "refusals created no run")
            #expect(try await harness.api("POST", "/v1/events/999999/starts", [:]).status == 404)
            let tokensKey = try await harness.key(scope: "tokens")
            #expect(try await harness.api("GET", "/v1/events/\(event)/starts", key: tokensKey).status == 403)

            #expect(try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": MatchState().input]).status == 202)
            let over = try await harness.api("POST", "/v1/events/\(event)/starts", ["alert": ["title": "t", "body": "b"]])
            #expect(over.status == 409 && over.errorCode == "event_over", "\(over.text)")
        }
    }

    /// Installation ids of the run's starts in `state`.
    static func installations(in state: String, run: JSONValue, _ harness: BroadcastHarness) async throws -> Set<String> {
        let rows = try await harness.pool.query(
            """
            SELECT i.installation_id FROM starts s JOIN installations i ON i.id = s.installation
            WHERE s.run_id = \(Int(run["id"]?.intValue ?? 0)) AND s.state = \(state)
            """)
        return Set(try rows.map { try $0.decode(String.self, column: "installation_id") })
    }

    /// Every startable follower shows at most one activity, and those without one are all `unknown`.
    static func expectOnceEach(_ members: [Member], run: JSONValue, _ harness: BroadcastHarness) async throws {
        let unknown = try await installations(in: "unknown", run: run, harness)
        let shown = activities(harness)
        for member in members {
            let count = shown[member.token]?.count ?? 0
            #expect(count <= 1, "\(member.installationID) shows \(count) activities")
            guard member.follows && member.enabled && OSVersion(member.os)! >= .pushToStart else {
                #expect(count == 0, "\(member.installationID) is not in the audience")
                continue
            }
            if count == 0 { #expect(unknown.contains(member.installationID), "\(member.installationID) was skipped without being counted unknown") }
        }
    }

    @Test func aKillAndLostAnswersDuringARunStartNoDeviceTwiceAndSkipOnlyTheUnknown() async throws {
        try await BroadcastHarness.run(
            simulator: {
                $0.latency = .milliseconds(20) ... .milliseconds(40)
                $0.faults.dropAnswers = 0.03
            }, serveArguments: ["--audience-lead", "900", "--start-send-window", "20"]
        ) { harness in
            let members = Self.audience(1200)
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Self.createMatch(harness, "fanout-kill")
            let before = try await Self.run(of: event, harness) { ($0["counts"]?["accepted"]?.intValue ?? 0) >= 200 }
            try await harness.killAndRestart()
            #expect(before["state"] == "running", "killed in the middle of the run: \(before)")
            let run = try await Self.run(of: event, harness, timeout: 120, until: Self.firstPassDone)
            let startable = members.filter { $0.follows && $0.enabled && OSVersion($0.os)! >= .pushToStart }.count
            let counts = try #require(run["counts"])
            let accepted = Int(counts["accepted"]?.intValue ?? 0)
            let unknown = Int(counts["unknown"]?.intValue ?? 0)
            #expect(accepted + unknown == startable, "\(run)")
            #expect(unknown >= harness.simulator.engine.droppedAnswers, "every lost answer is unknown: \(run)")
            #expect(harness.simulator.engine.droppedAnswers > 0, "the simulator dropped answers")
            try await Self.expectOnceEach(members, run: run, harness)
        }
    }

    @Test func twoServesShareOneRunAndADisableDuringItStopsThatInstallationsStart() async throws {
        try await BroadcastHarness.run(
            simulator: { $0.latency = .milliseconds(20) ... .milliseconds(40) }, instances: 2,
            // One chunk in flight per instance, so that neither takes all three chunks of the run at once.
            serveArguments: ["--audience-lead", "900", "--start-send-window", "10", "--start-chunks", "1"]
        ) { harness in
            var members = Self.audience(3000)
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Self.createMatch(harness, "fanout-shared")
            _ = try await Self.run(of: event, harness) { ($0["counts"]?["accepted"]?.intValue ?? 0) >= 10 }
            // The last 30 installations (the end of the last chunk) turn Live Activities off.
            let tokensKey = try await harness.key(scope: "tokens")
            for index in members.indices.suffix(30) where members[index].follows && members[index].enabled {
                let answer = try await harness.api(
                    "PUT", "/v1/installations/\(members[index].installationID)",
                    ["app": .int(Int64(harness.appID)), "liveActivitiesEnabled": false], key: tokensKey)
                #expect(answer.status == 200, "\(answer.text)")
                let member = members[index]
                members[index] = Member(
                    installationID: member.installationID, token: member.token, os: member.os, follows: member.follows, enabled: false)
            }
            let run = try await Self.run(of: event, harness, timeout: 120, until: Self.firstPassDone)
            let startable = members.filter { $0.follows && $0.enabled && OSVersion($0.os)! >= .pushToStart }.count
            #expect(run["counts"]?["accepted"]?.intValue == Int64(startable), "\(run)")
            try await Self.expectOnceEach(members, run: run, harness)
            let first = try await harness.metric("marquee_starts_total", ["result": "accepted"], instance: 0)
            let second = try await harness.metric("marquee_starts_total", ["result": "accepted"], instance: 1)
            #expect(first > 0 && second > 0 && Int(first + second) == startable, "both instances sent: \(first) and \(second)")
        }
    }

    @Test func theDeviceLimitTheConcurrencyCapAndLateFollowers() async throws {
        try await BroadcastHarness.run(
            serveArguments: [
                "--audience-lead", "900", "--starts-per-device-hour", "2", "--max-concurrent-activities", "2", "--late-start-interval", "1",
            ]
        ) { harness in
            // Topic followers, and one that also follows the third match itself.
            let members = (1...20).map { Member(installationID: "fan-\($0)", token: Self.token($0), os: "18.1", follows: true, enabled: true) }
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            // Three overlapping matches, started by hand one after the other; fan-1 follows the friendly itself.
            var events: [Int] = []
            for (index, name) in ["league", "cup", "friendly"].enumerated() {
                events.append(try await Self.createMatch(harness, name, startsIn: 7200 + Double(index)))
            }
            let tokensKey = try await harness.key(scope: "tokens")
            let follow = try await harness.api(
                "POST", "/v1/installations/fan-1/follows?app=\(harness.appID)", ["events": [["event": .int(Int64(events[2]))]]], key: tokensKey)
            #expect(follow.status == 200, "\(follow.text)")
            var runs: [JSONValue] = []
            for event in events {
                #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
                runs.append(try await Self.run(of: event, harness, until: Self.firstPassDone))
            }
            // fan-1 follows the friendly itself: the league started it (one place kept), the cup did not.
            #expect(runs[0]["counts"]?["accepted"] == 20, "\(runs[0])")
            #expect(runs[1]["counts"]?["accepted"] == 19 && runs[1]["counts"]?["skipped"]?["concurrency"] == 1, "\(runs[1])")
            #expect(runs[2]["counts"]?["accepted"] == 1 && runs[2]["counts"]?["skipped"]?["device_limit"] == 19, "\(runs[2])")
            let shown = Self.activities(harness)
            #expect(members.allSatisfy { shown[$0.token]?.count == 2 }, "each device shows two activities")

            // A late follower of the cup: started by the run's next pass.
            let late = Self.token(500)
            _ = harness.simulator.engine.devices.add([SimulatedDeviceSpec(pushToStartToken: late, osVersion: SimulatorOSVersion(18, 2))])
            let registered = try await harness.api(
                "PUT", "/v1/installations/late-fan", ["app": .int(Int64(harness.appID)), "pushToStartToken": .string(late), "osVersion": "18.2"],
                key: tokensKey)
            #expect(registered.status == 201, "\(registered.text)")
            let lateFollow = try await harness.api(
                "PUT", "/v1/installations/late-fan/follows?app=\(harness.appID)", ["events": [["event": .int(Int64(events[1]))]]], key: tokensKey)
            #expect(lateFollow.status == 200, "\(lateFollow.text)")
            _ = try await Self.run(of: events[1], harness) { $0["counts"]?["accepted"] == 20 }
            #expect(Self.activities(harness)[late]?.count == 1)
        }
    }

    @Test func withoutAChannelIOS18StartsWithATokenAndRefusedTokensGoToTheRegistry() async throws {
        try await BroadcastHarness.run(
            simulator: { $0.channelQuota = 0 }, serveArguments: ["--audience-lead", "900", "--start-channel-wait", "1"]
        ) { harness in
            let members = (1...6).map {
                Member(installationID: "nc-\($0)", token: Self.token($0), os: $0 <= 3 ? "18.0" : "17.5", follows: true, enabled: true)
            }
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            // APNs calls two tokens gone: one before the app last registered it (kept), one after (invalidated).
            harness.simulator.engine.markDeviceTokenInvalid(Self.token(1), at: Date().addingTimeInterval(-3600))
            harness.simulator.engine.markDeviceTokenInvalid(Self.token(4), at: Date().addingTimeInterval(5))
            let event = try await Self.createMatch(harness, "fanout-no-channel")
            let run = try await Self.run(of: event, harness, until: Self.firstPassDone)
            #expect(run["counts"]?["accepted"] == 4 && run["counts"]?["noChannel"] == 2, "\(run)")
            #expect(run["counts"]?["rejected"]?["Unregistered"] == 2, "\(run)")
            let shown = Self.activities(harness)
            for member in members where member.installationID != "nc-1" && member.installationID != "nc-4" {
                let activity = try #require(shown[member.token]?.first, "\(member.installationID)")
                #expect(activity.updateToken != nil, "\(member.installationID) listens on a token: \(activity.updatePath)")
            }
            let tokensKey = try await harness.key(scope: "tokens")
            let kept = try await harness.api("GET", "/v1/installations/nc-1?app=\(harness.appID)", key: tokensKey)
            #expect(kept.json["pushToStartToken"] != .null, "registered after APNs' time: kept \(kept.text)")
            let invalidated = try await harness.api("GET", "/v1/installations/nc-4?app=\(harness.appID)", key: tokensKey)
            #expect(invalidated.json["pushToStartToken"] == .null, "\(invalidated.text)")
            #expect(try await harness.count("SELECT count(*) AS n FROM token_invalidations WHERE outcome = 'kept'") == 1)
            #expect(try await harness.count("SELECT count(*) AS n FROM token_invalidations WHERE outcome = 'invalidated'") == 1)
        }
    }

    @Test func aStartAndABroadcastInTheSameSecondShowTheBroadcast() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"]) { harness in
            let members = (1...400).map { Member(installationID: "s-\($0)", token: Self.token($0), os: "18.\($0 % 3)", follows: true, enabled: true) }
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Self.createMatch(harness, "fanout-race", startsIn: 7200)
            let channel = try await harness.openChannel(of: event)
            var goal = MatchState()
            goal.homeScore = 1
            async let run = harness.api("POST", "/v1/events/\(event)/starts", [:])
            async let update = harness.update(event, goal, extra: ["priority": "high"])
            let (started, updated) = try await (run, update)
            #expect(started.status == 202 && updated.status == 202, "\(started.text) \(updated.text)")
            _ = try await Self.run(of: event, harness, until: Self.firstPassDone)
            try await harness.waitUntil("every device shows the goal") {
                let shown = Self.activities(harness)
                return members.allSatisfy { shown[$0.token]?.count == 1 && shown[$0.token]?.first?.contentState["homeScore"] == 1 }
            }
            #expect(Self.activities(harness).values.allSatisfy { $0.allSatisfy { $0.channelID == channel } })
        }
    }

    @Test func aBroadcastAcceptedBeforeAWindowsStartsButRecordedAfterItsReadGoesAgain() async throws {
        // The race made certain: APNs answers every request 2 s after accepting it, so the goal is accepted (and
        // delivered to the channel's subscribers, none yet) well before serve records it, and the window of starts
        // reads the event's content in between: every start carries the score before the goal and is accepted after
        // it. Once the window is answered the goal is recorded, and the channel's last state goes again.
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"]) { harness in
            let members = (1...50).map { Member(installationID: "r-\($0)", token: Self.token($0), os: "18.2", follows: true, enabled: true) }
            try await Self.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Self.createMatch(harness, "fanout-raced", startsIn: 7200)
            let channel = try await harness.openChannel(of: event)
            // Kick-off is broadcast and recorded first: a start carries the last broadcast's state.
            var kickOff = MatchState()
            kickOff.period = .firstHalf
            #expect(try await harness.update(event, kickOff).status == 202)
            try await harness.waitUntil("the kick-off is recorded") {
                try await harness.count("SELECT count(*) AS n FROM updates WHERE event_id = \(event) AND disposition = 'broadcast'") == 1
            }
            harness.simulator.engine.latency = .seconds(2) ... .seconds(2)
            var goal = kickOff
            goal.homeScore = 1
            let updated = try await harness.update(event, goal, extra: ["priority": "high"])
            #expect(updated.status == 202, "\(updated.text)")
            try await harness.waitUntil("APNs accepts the goal") {
                harness.simulator.engine.broadcasts.contains { $0.json["aps"]?["content-state"]?["homeScore"] == 1 }
            }
            let started = try await harness.api("POST", "/v1/events/\(event)/starts", [:])
            #expect(started.status == 202, "\(started.text)")
            try await harness.waitUntil("every device shows an activity") { Self.activities(harness).values.allSatisfy { $0.count == 1 } }
            #expect(
                Self.activities(harness).values.allSatisfy { $0.first?.contentState["homeScore"] == 0 },
                "started with the kick-off, read before the goal was recorded")
            try await harness.waitUntil("every device shows the goal") {
                let shown = Self.activities(harness)
                return members.allSatisfy { shown[$0.token]?.count == 1 && shown[$0.token]?.first?.contentState["homeScore"] == 1 }
            }
            #expect(Self.activities(harness).values.allSatisfy { $0.allSatisfy { $0.channelID == channel } })
            #expect(try await harness.metric("marquee_start_windows_raced_total") >= 1)
            let again = harness.simulator.engine.broadcasts.filter { $0.json["aps"]?["content-state"]?["homeScore"] == 1 }
            #expect(again.count == 2, "the goal, then its state again")
            #expect(again.last.map { $0.priority == 5 && $0.json["aps"]?["alert"] == nil } == true, "without the goal's alert")
        }
    }
}
