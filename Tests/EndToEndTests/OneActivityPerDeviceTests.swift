import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// One activity per device per event, from its start to its end, through `marquee serve` as a process and the
/// simulator playing the devices: no push-to-start to a device whose app registered the event's activity or whose
/// user dismissed it, and an event with no channel still updates and ends its token activities.
@Suite(.enabled(if: MarqueeProcess.available))
struct OneActivityPerDeviceTests {
    typealias Fans = StartFanOutTests

    /// Each member's device shows one activity of the match `externalID` (its `matchId` event key), with `home` goals,
    /// ended or not.
    static func show(_ members: [Fans.Member], _ externalID: String, home: Int, ended: Bool = false, _ harness: BroadcastHarness) -> Bool {
        let shown = Fans.activities(harness)
        return members.allSatisfy { member in
            let ofMatch = (shown[member.token] ?? []).filter { $0.attributes["matchId"] == .string(externalID) }
            guard ofMatch.count == 1 else { return false }
            return ofMatch[0].contentState["homeScore"] == .int(Int64(home)) && (ofMatch[0].state == .ended) == ended
        }
    }

    @Test func aDeviceThatShowsOrDismissedTheEventsActivityIsNotStartedAgain() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"]) { harness in
            // Six on iOS 18.4 and four on 17.6 with nothing of the match; three 18.4 whose app started the match's
            // activity itself (on the channel), two 17.6 whose app did (on its token), two whose user dismissed it.
            let oses =
                Array(repeating: "18.4", count: 6) + Array(repeating: "17.6", count: 4) + Array(repeating: "18.4", count: 3)
                + Array(repeating: "17.6", count: 2) + Array(repeating: "18.4", count: 2)
            let members = oses.enumerated().map { index, os in
                Fans.Member(installationID: "fan-\(index + 1)", token: Fans.token(index + 1), os: os, follows: true, enabled: true)
            }
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Fans.createMatch(harness, "one-activity", startsIn: 3600)
            _ = try await harness.openChannel(of: event, timeout: 60)
            let key = try await harness.key(scope: "tokens")
            func register(_ member: Fans.Member, _ body: JSONObject) async throws {
                var body = body
                body["event"] = .int(Int64(event))
                body["attributesType"] = "MatchAttributes"
                let answer = try await harness.api(
                    "PUT", "/v1/installations/\(member.installationID)/activities/app-\(member.installationID)?app=\(harness.appID)",
                    .object(body), key: key)
                #expect(answer.status == 201, "\(answer.text)")
            }
            for member in members[10..<13] { try await register(member, ["pushType": "channel"]) }
            for member in members[13..<15] {
                try await register(
                    member, ["pushType": "token", "pushToken": .string(String(repeating: "e", count: 63) + "\(member.token.suffix(1))")])
            }
            for member in members[15..<17] {
                try await register(member, ["pushType": "channel"])
                let dismissed = try await harness.api(
                    "DELETE",
                    "/v1/installations/\(member.installationID)/activities/app-\(member.installationID)?app=\(harness.appID)&state=dismissed",
                    key: key)
                #expect(dismissed.status == 200 && dismissed.json["dismissedByUser"] == true, "\(dismissed.text)")
            }
            let started = try await harness.api("POST", "/v1/events/\(event)/starts", [:])
            #expect(started.status == 202, "\(started.text)")
            let run = try await Fans.run(of: event, harness, until: Fans.firstPassDone)
            #expect(run["counts"]?["accepted"] == 10, "\(run)")
            #expect(run["counts"]?["skipped"] == ["has_activity": 5, "dismissed": 2], "\(run)")
            // What APNs received: one push-to-start for each of the ten, none for the seven.
            for (index, member) in members.enumerated() {
                let pushes = harness.simulator.engine.devicePushes(to: member.token).filter { $0.json["aps"]?["event"] == "start" }
                #expect(pushes.count == (index < 10 ? 1 : 0), "\(member.installationID): \(pushes.count) push-to-starts")
            }
            // The CLI shows the reasons too.
            let cli = try await AdminCLITests.cli(
                ["event", "starts", "\(event)"], ["MARQUEE_URL": "http://127.0.0.1:\(harness.ports[0])", "MARQUEE_API_KEY": harness.adminKey])
            #expect(cli.status == 0 && cli.stdout.contains("has_activity 5") && cli.stdout.contains("dismissed 2"), "\(cli.stdout)\(cli.stderr)")
        }
    }

    @Test func anEventWhoseChannelTheQuotaRefusedUpdatesAndEndsItsFollowersOnTheirTokens() async throws {
        try await BroadcastHarness.run(
            serveArguments: ["--audience-lead", "900", "--channel-quota", "1", "--start-channel-wait", "1"], appBackend: true
        ) { harness in
            try await MirroringTests.registerKeyedType(harness)
            // Another match holds the one channel the quota allows.
            let other = try await Fans.createMatch(harness, "holds-the-quota", extra: ["attributeType": "KeyedMatch", "topics": ["team:spurs"]])
            _ = try await harness.openChannel(of: other, timeout: 60)
            let (members, legacy) = MirroringTests.halfOnTokens("q", 12)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            let event = try await Fans.createMatch(harness, "refused", extra: ["attributeType": "KeyedMatch"])
            let run = try await Fans.run(of: event, harness, timeout: 90, until: Fans.firstPassDone)
            #expect(run["counts"]?["accepted"] == 12 && run["counts"]?["noChannel"] == .int(Int64(members.count - legacy.count)), "\(run)")
            #expect(harness.simulator.engine.channels().count == 1, "the quota refused the match's channel")
            try await harness.waitUntil("every device's app registered its activity's token", timeout: 60) {
                try await harness.event(event)["mirroring"]?["activities"] == 12
            }
            for home in 1...3 {
                #expect(try await harness.update(event, MirroringTests.goals(home), extra: ["priority": "high"]).status == 202)
                try await harness.waitUntil("every device shows \(home) goals", timeout: 60) { Self.show(members, "refused", home: home, harness) }
            }
            let end = try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": MirroringTests.goals(4).input])
            #expect(end.status == 202 && end.json["warnings"] == nil, "\(end.text)")
            try await harness.waitUntil("every device shows the end", timeout: 60) { Self.show(members, "refused", home: 4, ended: true, harness) }
            try await harness.waitUntil("the event is ended") { try await harness.event(event)["status"] == "ended" }
            #expect(try await harness.dispositions(of: event)["unsent"] == nil, "nothing unsent while token activities took it")
            // The timestamps each activity got, its start's first, only went forward.
            let shown = Fans.activities(harness)
            for member in members {
                guard let activity = shown[member.token]?.first, case .token(let updateToken) = activity.updatePath else {
                    Issue.record("\(member.installationID) shows no token activity")
                    continue
                }
                let pushes = (harness.simulator.engine.devicePushes(to: member.token) + harness.simulator.engine.devicePushes(to: updateToken))
                    .sorted { $0.receivedAt < $1.receivedAt }
                let stamps = pushes.compactMap { $0.json["aps"]?["timestamp"]?.intValue }
                #expect(stamps.count >= 5 && stamps == stamps.sorted() && Set(stamps).count == stamps.count, "\(member.installationID): \(stamps)")
            }
        }
    }

    @Test func theEndAndACancelOfAnEventWithoutAChannelReachEveryTokenActivity() async throws {
        try await BroadcastHarness.run(
            serveArguments: ["--audience-lead", "60", "--channel-lead-time", "60", "--start-channel-wait", "1"], appBackend: true
        ) { harness in
            try await MirroringTests.registerKeyedType(harness)
            let (members, _) = MirroringTests.halfOnTokens("t", 8)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            // A follower whose app never registers its activity (its device has no installation id to register with).
            let silent = Fans.Member(installationID: "silent", token: Fans.token(500), os: "18.2", follows: true, enabled: true)
            try await Fans.seed([silent], topic: "team:arsenal", harness: harness, appRegisters: false)
            for (name, cancel) in [("ended-on-tokens", false), ("cancelled-on-tokens", true)] {
                // Two hours ahead: the channel opens a minute before, so the manual start goes without one.
                let event = try await Fans.createMatch(harness, name, startsIn: 7200, extra: ["attributeType": "KeyedMatch"])
                #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
                let run = try await Fans.run(of: event, harness, timeout: 90, until: Fans.firstPassDone)
                #expect(run["counts"]?["accepted"] == 9, "\(run)")
                try await harness.waitUntil("the apps registered their activities' tokens", timeout: 60) {
                    try await harness.event(event)["mirroring"]?["activities"] == 8
                }
                let answer =
                    cancel
                    ? try await harness.api("POST", "/v1/events/\(event)/cancel", ["contentState": MirroringTests.goals(2).input])
                    : try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": MirroringTests.goals(2).input])
                #expect(answer.status == 202, "\(answer.text)")
                #expect(answer.json["unreachableStarts"] == 1, "the silent device's start: \(answer.text)")
                #expect(answer.json["warnings"]?.arrayValue?.first?["code"] == "starts_unreachable", "\(answer.text)")
                if cancel { #expect(answer.json["broadcast"] == true, "\(answer.text)") }
                try await harness.waitUntil("every registered activity shows the final state, ended", timeout: 60) {
                    Self.show(members, name, home: 2, ended: true, harness)
                }
                let status = cancel ? "cancelled" : "ended"
                try await harness.waitUntil("the event is \(status)") { try await harness.event(event)["status"] == .string(status) }
                #expect(try await harness.dispositions(of: event)["unsent"] == nil)
            }
        }
    }
}
