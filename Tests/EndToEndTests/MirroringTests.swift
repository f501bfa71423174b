import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// Mirroring broadcasts to activity tokens, through `marquee serve` as a process and the simulator playing
/// devices on iOS 17.x started by the fan-out: what each device shows.
@Suite(.enabled(if: MarqueeProcess.available))
struct MirroringTests {
    typealias Fans = StartFanOutTests

    /// The app's registration of each 17.x device's started activity, with its update token.
    static func registerTokenActivities(_ members: [Fans.Member], event: Int, _ harness: BroadcastHarness) async throws {
        let key = try await harness.key(scope: "tokens")
        let shown = Fans.activities(harness)
        for member in members {
            let activity = try #require(shown[member.token]?.first, "\(member.installationID) shows no activity")
            let token = try #require(activity.updateToken, "\(member.installationID) has no update token")
            let answer = try await harness.api(
                "PUT", "/v1/installations/\(member.installationID)/activities/\(activity.id)?app=\(harness.appID)",
                ["event": .int(Int64(event)), "attributesType": "MatchAttributes", "pushType": "token", "pushToken": .string(token)], key: key)
            #expect(answer.status == 201, "\(answer.text)")
        }
    }

    /// `KeyedMatch`: the match type with an event key attribute, through which the simulated apps name the
    /// event of the activities they register.
    static func registerKeyedType(_ harness: BroadcastHarness) async throws {
        var type = try #require(MatchState.attributeType(app: harness.appID).objectValue)
        type["name"] = "KeyedMatch"
        type["attributes"] = ["matchId": ["type": "string", "eventKey": true], "homeTeam": "string", "awayTeam": "string"]
        let registered = try await harness.api("POST", "/v1/attribute-types", .object(type))
        try #require(registered.status == 201, "\(registered.text)")
    }

    /// `count` followers of team:arsenal, installation ids `prefix-1`…: every other one on iOS 17.4 (its activity
    /// is updated through its token: `legacy`), the rest on 18.1 (on the channel).
    static func halfOnTokens(_ prefix: String, _ count: Int) -> (members: [Fans.Member], legacy: [Fans.Member]) {
        let members = (1...count).map {
            Fans.Member(installationID: "\(prefix)-\($0)", token: Fans.token($0), os: $0 % 2 == 0 ? "17.4" : "18.1", follows: true, enabled: true)
        }
        return (members, members.filter { $0.os == "17.4" })
    }

    /// Opens the event's channel, runs its start to the end of the first pass and waits until the devices'
    /// backends registered `tokens` activity tokens; returns the channel.
    @discardableResult
    static func startAudience(of event: Int, tokens: Int, _ harness: BroadcastHarness) async throws -> String {
        let channel = try await harness.openChannel(of: event, timeout: 60)
        _ = try await Fans.run(of: event, harness, until: Fans.firstPassDone)
        try await harness.waitUntil("the 17.x devices' activity tokens are registered") {
            try await harness.event(event)["mirroring"]?["activities"] == .int(Int64(tokens))
        }
        return channel
    }

    static func goals(_ home: Int) -> MatchState {
        var state = MatchState()
        state.homeScore = home
        return state
    }

    @Test func tokenActivitiesShowEveryBroadcastsNewestStateAndTheEndWithoutATimestampGoingBack() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"], appBackend: true) { harness in
            let (members, legacy) = Self.halfOnTokens("m", 60)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            try await Self.registerKeyedType(harness)
            let event = try await Fans.createMatch(harness, "mirror-1", extra: ["attributeType": "KeyedMatch"])
            // The devices' apps register their activities through the callback, as their backends would.
            try await Self.startAudience(of: event, tokens: legacy.count, harness)
            func legacyShow(_ home: Int) -> Bool {
                let shown = Fans.activities(harness)
                return legacy.allSatisfy { shown[$0.token]?.first?.contentState["homeScore"] == .int(Int64(home)) }
            }
            #expect(try await harness.update(event, Self.goals(1), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("every device shows the first goal") {
                let shown = Fans.activities(harness)
                return members.allSatisfy { shown[$0.token]?.first?.contentState["homeScore"] == 1 }
            }

            // A burst: every token ends on the newest state.
            for home in 2...6 { #expect(try await harness.update(event, Self.goals(home), extra: ["priority": "high"]).status == 202) }
            try await harness.waitUntil("17.x devices show the newest state") { legacyShow(6) }

            // A token APNs calls gone: its activity ends in the registry, the others go on.
            let gone = legacy[0]
            let goneToken = try #require(Fans.activities(harness)[gone.token]?.first?.updateToken)
            harness.simulator.engine.markDeviceTokenInvalid(goneToken, at: Date().addingTimeInterval(5))
            #expect(try await harness.update(event, Self.goals(7), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("the other 17.x devices show the seventh goal") {
                let shown = Fans.activities(harness)
                return legacy.dropFirst().allSatisfy { shown[$0.token]?.first?.contentState["homeScore"] == 7 }
            }
            let tokensKey = try await harness.key(scope: "tokens")
            try await harness.waitUntil("the gone token's activity ends") {
                let record = try await harness.api("GET", "/v1/installations/\(gone.installationID)?app=\(harness.appID)", key: tokensKey)
                return record.json["activities"]?.arrayValue?.first?["state"] == "ended"
            }

            // An installation that turns Live Activities off is sent nothing more.
            let disabled = legacy[1]
            let turnedOff = try await harness.api(
                "PUT", "/v1/installations/\(disabled.installationID)",
                ["app": .int(Int64(harness.appID)), "liveActivitiesEnabled": false], key: tokensKey)
            #expect(turnedOff.status == 200, "\(turnedOff.text)")

            // The end is mirrored too, with its final state.
            #expect(try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": Self.goals(8).input]).status == 202)
            try await harness.waitUntil("17.x devices show the end") {
                let shown = Fans.activities(harness)
                return legacy.dropFirst(2).allSatisfy {
                    let activity = shown[$0.token]?.first
                    return activity?.state == .ended && activity?.contentState["homeScore"] == 8
                }
            }
            let shown = Fans.activities(harness)
            #expect(shown[disabled.token]?.first?.state == .active && shown[disabled.token]?.first?.contentState["homeScore"] == 7)
            for member in legacy {
                let activity = try #require(shown[member.token]?.first)
                #expect(activity.notNewerIgnored == 0, "\(member.installationID) was sent a timestamp that was not newer")
                #expect(shown[member.token]?.count == 1)
            }
            // A device shows a push before serve has recorded APNs' answer to it: the count catches up after.
            try await harness.waitUntil("no enabled token activity is behind") {
                try await harness.event(event)["mirroring"]?["behind"] == 0
            }
            let detail = try await harness.event(event)
            #expect(detail["mirroring"]?["activities"] == 29 && detail["mirroring"]?["behind"] == 0, "\(detail["mirroring"] ?? .null)")
            // At least the catch-up, the newest of the burst, the seventh goal and the end reached every enabled token.
            #expect(try await harness.metric("marquee_mirrored_pushes_total", ["result": "accepted"]) >= 28 * 4)
        }
    }

    @Test func aPassKilledInTheMiddleResumesAndEveryTokenReachesTheNewestState() async throws {
        try await BroadcastHarness.run(
            simulator: { $0.latency = .milliseconds(20) ... .milliseconds(40) },
            serveArguments: ["--audience-lead", "900", "--mirror-send-window", "5"]
        ) { harness in
            let members = (1...400).map {
                Fans.Member(installationID: "k-\($0)", token: Fans.token($0), os: "17.\(2 + $0 % 4)", follows: true, enabled: true)
            }
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Fans.createMatch(harness, "mirror-kill")
            _ = try await harness.openChannel(of: event)
            _ = try await Fans.run(of: event, harness, timeout: 120, until: Fans.firstPassDone)
            func showing(_ home: Int) -> Int {
                let shown = Fans.activities(harness)
                return members.filter { shown[$0.token]?.first?.contentState["homeScore"] == .int(Int64(home)) }.count
            }
            // Catch-up: tokens registered after a goal get it at once.
            #expect(try await harness.update(event, Self.goals(1), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("the goal is broadcast") { try await harness.event(event)["counts"]?["broadcast"] == 1 }
            #expect(showing(0) == members.count, "17.x devices show the kick-off state until their tokens are known")
            try await Self.registerTokenActivities(members, event: event, harness)
            try await harness.waitUntil("every token catches up with the goal", timeout: 120) { showing(1) == members.count }
            // A second goal, and a kill in the middle of its pass.
            #expect(try await harness.update(event, Self.goals(2), extra: ["priority": "high"]).status == 202)
            try await harness.waitUntil("the goal's pass is under way") { showing(2) >= 40 }
            #expect(showing(2) < members.count, "killed in the middle of the pass")
            try await harness.killAndRestart()
            try await harness.waitUntil("every token shows the goal after the restart", timeout: 120) { showing(2) == members.count }
            #expect(Fans.activities(harness).values.allSatisfy { $0.count <= 1 })
            // Pushes the killed instance sent without recording their answers are sent again once its claim
            // lapses (the same timestamp: the device ignores it), so no token stays behind.
            try await harness.waitUntil("no token is behind", timeout: 60) { try await harness.event(event)["mirroring"]?["behind"] == 0 }
        }
    }
}
