import APNsSimulator
import Foundation
import MarqueeCore
import Testing

/// Freshness policies through `marquee serve` as a process and the simulator: the stale date, relevance score
/// and dismissal date that every broadcast, mirrored push and push-to-start carried, read from the simulator's log
/// against when it arrived there.
@Suite(.enabled(if: MarqueeProcess.available))
struct FreshnessTests {
    typealias Fans = StartFanOutTests

    /// One push as the simulator logged it: broadcast or device push, when it arrived and what it carried.
    struct Logged {
        let receivedAt: Date
        let aps: ActivityPush.APS
        let via: String
    }

    static func logged(on channel: String, tokens: Set<String>, _ harness: BroadcastHarness) throws -> [Logged] {
        let broadcasts = try harness.pushes(on: channel).map { Logged(receivedAt: $0.broadcast.receivedAt, aps: $0.push.aps, via: "broadcast") }
        let devicePushes = try harness.simulator.engine.devicePushes.filter { tokens.contains($0.deviceToken) }.map {
            Logged(receivedAt: $0.receivedAt, aps: try JSONDecoder().decode(ActivityPush.self, from: Data($0.payload)).aps, via: "device push")
        }
        return broadcasts + devicePushes
    }

    /// `date` (Unix seconds) is `after` seconds from when the push was sent: it went before it arrived, and the
    /// date is rounded down to the second.
    static func isAbout(_ date: Int?, _ after: TimeInterval, from push: Logged) -> Bool {
        guard let date else { return false }
        let expected = push.receivedAt.timeIntervalSince1970 + after
        return Double(date) <= expected + 0.001 && Double(date) >= expected - 5
    }

    /// The alert boost's length (`alertBoostSeconds`): short, so the test waits seconds for it to pass, not the 15 it
    /// once did; long enough that the next goal's pushes (paced about a second after the alert's) go inside it.
    static let boost = 6

    @Test func everyPushCarriesThePolicysStaleDateRelevanceAndDismissal() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900"], appBackend: true) { harness in
            let (members, legacy) = MirroringTests.halfOnTokens("f", 12)
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            try await MirroringTests.registerKeyedType(harness)
            // The type's policy, and the event's own relevance over it.
            let policy = try await harness.api(
                "PUT", "/v1/attribute-types/KeyedMatch/policy",
                ["staleAfter": 120, "alertBoostSeconds": .int(Int64(Self.boost)), "dismissAfter": 600])
            #expect(policy.status == 200, "\(policy.text)")
            let event = try await Fans.createMatch(
                harness, "fresh-1", extra: ["attributeType": "KeyedMatch", "freshness": ["relevanceScore": 30]])
            #expect(try await harness.event(event)["freshness"] == ["relevanceScore": 30])
            let channel = try await MirroringTests.startAudience(of: event, tokens: legacy.count, harness)
            let tokens = Set(members.map(\.token)).union(Fans.activities(harness).values.flatMap { $0.compactMap(\.updateToken) })
            let starts = try Self.logged(on: channel, tokens: tokens, harness).filter { $0.aps.event == "start" }
            #expect(starts.count == members.count)
            for start in starts {
                #expect(Self.isAbout(start.aps.staleDate, 120, from: start), "a start's stale-date: \(start.aps)")
                #expect(start.aps.relevanceScore == 30, "a start's relevance-score: \(start.aps)")
            }

            // An alert raises the score by the default boost for `boost` seconds from its broadcast; then it is back at 30.
            func update(_ home: Int, _ extra: JSONObject = [:]) async throws {
                var extra = extra
                extra["priority"] = "high"
                #expect(try await harness.update(event, MirroringTests.goals(home), extra: extra).status == 202)
                try await harness.waitUntil("every device shows \(home) goals") {
                    let shown = Fans.activities(harness)
                    return members.allSatisfy { shown[$0.token]?.first?.contentState["homeScore"] == .int(Int64(home)) }
                }
            }
            try await update(1, ["alert": ["title": "Goal", "body": "Arsenal 1-0"]])
            try await update(2)
            // The boost's expiry is the behaviour under test, and it runs on serve's wall clock: the next goal goes
            // once the alert's broadcast is `boost` + 1.5 s old (waited for on the simulator's log, not a fixed time).
            let alertArrived = try #require(
                try Self.logged(on: channel, tokens: tokens, harness).first { $0.via == "broadcast" && $0.aps.alert != nil }?.receivedAt)
            try await harness.waitUntil("the alert boost has passed") { Date().timeIntervalSince(alertArrived) > Double(Self.boost) + 1.5 }
            try await update(3)
            // What an update sets itself wins.
            let explicitStale = Int(Date().timeIntervalSince1970) + 7200
            try await update(
                4, ["staleDate": .string(BroadcastHarness.iso(Date(timeIntervalSince1970: TimeInterval(explicitStale)))), "relevanceScore": 7])
            // An ingest key changes the event's own policy: pushes from then on follow it.
            let ingest = try await harness.key(scope: "ingest")
            let patched = try await harness.api("PATCH", "/v1/events/\(event)", ["freshness": ["relevanceScore": 30, "staleAfter": 30]], key: ingest)
            #expect(patched.status == 200, "\(patched.text)")
            try await update(5)

            #expect(try await harness.api("POST", "/v1/events/\(event)/end", ["contentState": MirroringTests.goals(5).input]).status == 202)
            try await harness.waitUntil("every device shows the end") {
                let shown = Fans.activities(harness)
                return members.allSatisfy { shown[$0.token]?.first?.state == .ended }
            }

            let pushes = try Self.logged(on: channel, tokens: tokens, harness)
            let alertAt = try #require(pushes.first { $0.via == "broadcast" && $0.aps.alert != nil }).receivedAt
            var checked: [Int: Int] = [:]
            for push in pushes where push.aps.event == "update" {
                let home = try #require(push.aps.contentState?.homeScore)
                checked[home, default: 0] += 1
                switch home {
                case 4:
                    #expect(push.aps.staleDate == explicitStale && push.aps.relevanceScore == 7, "\(push.via): \(push.aps)")
                case 5:
                    #expect(Self.isAbout(push.aps.staleDate, 30, from: push), "\(push.via): \(push.aps)")
                    #expect(push.aps.relevanceScore == 30, "\(push.via): \(push.aps)")
                default:
                    #expect(Self.isAbout(push.aps.staleDate, 120, from: push), "\(push.via): \(push.aps)")
                    // The alert's own pushes are boosted; the boost runs `boost` s from the alert broadcast's send,
                    // and a push arrives a little after its send, so one within `boost` - 2 s of it is boosted, one
                    // `boost` + 1 s after not. The next goal's pushes go within `boost` - 2 s: each is checked.
                    let sinceAlert = push.receivedAt.timeIntervalSince(alertAt)
                    let boosted = Double(Self.boost) - 2
                    if home == 2 { #expect(sinceAlert < boosted, "\(push.via) of the second goal \(sinceAlert) s after the alert") }
                    if home == 1 || sinceAlert < boosted {
                        #expect(push.aps.relevanceScore == 80, "\(push.via) \(sinceAlert) s after the alert: \(push.aps)")
                    } else if sinceAlert > Double(Self.boost) + 1 {
                        #expect(push.aps.relevanceScore == 30, "\(push.via) \(sinceAlert) s after the alert: \(push.aps)")
                    }
                }
            }
            // Each update reached the channel and every 17.x device.
            #expect((1...5).allSatisfy { (checked[$0] ?? 0) >= 1 + legacy.count }, "\(checked)")
            // The goal after the pause went out with the boost over.
            #expect(pushes.contains { $0.aps.contentState?.homeScore == 3 && $0.aps.relevanceScore == 30 })

            // The end: score 0, no stale date, dismissed dismissAfter after its send.
            let ends = pushes.filter { $0.aps.event == "end" }
            #expect(ends.count == 1 + legacy.count, "\(ends.map(\.via))")
            for end in ends {
                #expect(end.aps.relevanceScore == 0 && end.aps.staleDate == nil, "\(end.via): \(end.aps)")
                #expect(Self.isAbout(end.aps.dismissalDate, 600, from: end), "\(end.via): \(end.aps)")
            }
        }
    }
}
