import APNs
import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// Issue 6's pipeline through `marquee serve` as a process, a real database and the APNs simulator: events open
/// channels, updates become broadcasts an app can decode, conflation, ordering, idempotency, refusals and ends.
@Suite(.enabled(if: MarqueeProcess.available))
struct BroadcastPipelineTests {
    @Test func anEventOpensItsChannelAtTheSimulator() async throws {
        try await BroadcastHarness.run { h in
            let kept = try await h.createEvent("epl-ars-che")
            let unstored = try await h.createEvent("epl-liv-mci", storagePolicy: "none")
            let event = try await h.event(kept)
            #expect(event["externalId"] == "epl-ars-che" && event["kind"] == "match" && event["storagePolicy"] == "mostRecent")
            #expect(event["status"] == "scheduled" && event["channelLost"] == false)

            let keptChannel = try await h.openChannel(of: kept)
            let unstoredChannel = try await h.openChannel(of: unstored)
            #expect(keptChannel != unstoredChannel)
            let simulated = h.simulator.engine.channels(bundleID: BroadcastHarness.bundleID)
            #expect(Set(simulated.map(\.id)) == [keptChannel, unstoredChannel])
            #expect(h.simulator.engine.channel(id: keptChannel)?.storagePolicy == .mostRecentMessageStored)
            #expect(h.simulator.engine.channel(id: unstoredChannel)?.storagePolicy == .noMessageStored)
            #expect(h.simulator.engine.channelOperations.filter { $0.kind == .create }.count == 2)

            // The channel as the API shows it, and the same channel in the list.
            let channel = try #require(try await h.event(kept)["channel"])
            #expect(channel["event"]?.intValue == Int64(kept) && channel["storagePolicy"] == "mostRecent")
            #expect(channel["openedAt"]?.stringValue != nil)
            let listed = try await h.api("GET", "/v1/channels?app=\(h.appID)&state=open")
            #expect(listed.status == 200)
            #expect(
                Set(listed.json["channels"]?.arrayValue?.compactMap { $0["apnsChannelId"]?.stringValue } ?? [])
                    == [keptChannel, unstoredChannel])

            // The same external id again is a conflict.
            let again = try await h.api(
                "POST", "/v1/events",
                [
                    "app": .int(Int64(h.appID)), "externalId": "epl-ars-che", "kind": "match", "attributeType": "MatchAttributes",
                    "attributes": ["homeTeam": "Arsenal", "awayTeam": "Chelsea"], "contentState": MatchState().input,
                    "startsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(600))),
                ])
            #expect(again.status == 409 && again.errorCode == "conflict", "\(again.text)")

            // An event whose start comes is live from then on (it has its channel), and listed as such.
            let kickOff = try await h.createEvent("epl-tot-new", startsAt: Date().addingTimeInterval(2))
            _ = try await h.openChannel(of: kickOff)
            try await h.waitUntil("event \(kickOff) is live", timeout: 15) { try await h.event(kickOff)["status"] == "live" }
            let live = try await h.api("GET", "/v1/events?app=\(h.appID)&status=live")
            #expect(live.json["events"]?.arrayValue?.compactMap { $0["id"]?.intValue } == [Int64(kickOff)], "\(live.text)")
            #expect(try await h.event(kept)["status"] == "scheduled")
        }
    }

    @Test func updatesBecomeBroadcastsWithTheRightHeadersAndPayloads() async throws {
        try await BroadcastHarness.run { h in
            // Kicked off already. The first broadcast carries an alert (priority 10 whatever it is compared with);
            // after it, the fields each update changes decide its priority under `auto`.
            let started = MatchState(period: .firstHalf)
            let kept = try await h.createEvent("epl-1", state: started)
            let unstored = try await h.createEvent("epl-2", storagePolicy: "none", state: started)
            let keptChannel = try await h.openChannel(of: kept)
            let unstoredChannel = try await h.openChannel(of: unstored)

            // Each update waits for the previous broadcast, so none is conflated away. The first carries an alert
            // (plain and localized text), a relevance score and a stale date.
            let window = MatchState.kickoffDate...MatchState.kickoffDate.addingTimeInterval(45 * 60)
            var state = MatchState(homeScore: 1, period: .firstHalf, minute: 54, lastScorer: "Saka", halfWindow: window)
            let staleDate = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 3600).rounded(.down))
            let sentAt = Date()
            let goal = try await h.update(
                kept, state,
                extra: [
                    "alert": ["title": "GOAL", "body": ["locKey": "GOAL_BODY", "locArgs": ["Saka", "54"]], "sound": "default"],
                    "relevanceScore": 0.75, "staleDate": .string(BroadcastHarness.iso(staleDate)),
                ])
            #expect(goal.status == 202, "\(goal.text)")
            #expect(goal.json["update"]?["action"] == "update" && goal.json["update"]?["disposition"] == "pending")
            #expect(goal.json["update"]?["event"]?.intValue == Int64(kept))
            try await h.waitForState(state, on: keptChannel)

            // Only a field that is not significant changes.
            state.minute = 55
            #expect(try await h.update(kept, state).status == 202)
            try await h.waitForState(state, on: keptChannel)

            // A merge patch changes one field and keeps the others.
            state.minute = 60
            let patched = try await h.api("POST", "/v1/events/\(kept)/updates", ["contentStatePatch": ["minute": 60]])
            #expect(patched.status == 202, "\(patched.text)")
            try await h.waitForState(state, on: keptChannel)

            // Explicit priorities override the automatic choice.
            state.minute = 61
            #expect(try await h.update(kept, state, extra: ["priority": "high"]).status == 202)
            try await h.waitForState(state, on: keptChannel)
            state.homeScore = 2
            #expect(try await h.update(kept, state, extra: ["priority": "low"]).status == 202)
            try await h.waitForState(state, on: keptChannel)

            var other = MatchState(awayScore: 1, period: .firstHalf, minute: 1)
            #expect(try await h.update(unstored, other).status == 202)
            try await h.waitForState(other, on: unstoredChannel)
            other.minute = 2
            #expect(try await h.update(unstored, other).status == 202)
            let unstoredPushes = try await h.waitForState(other, on: unstoredChannel)

            let pushes = try h.pushes(on: keptChannel)
            // A goal with an alert (10), minute only (5), minute by patch (5), high (10), a score under low (5).
            #expect(pushes.map(\.broadcast.priority) == [10, 5, 5, 10, 5])
            #expect(pushes.map { $0.push.aps.contentState?.minute } == [54, 55, 60, 61, 61])
            // A score (10), then minute only (5).
            #expect(unstoredPushes.map(\.broadcast.priority) == [10, 5])
            for (broadcast, push) in pushes + unstoredPushes {
                let unstoredOne = broadcast.channelID == unstoredChannel
                #expect(broadcast.bundleID == BroadcastHarness.bundleID)
                #expect(broadcast.headers["apns-channel-id"] == broadcast.channelID)
                #expect(broadcast.headers["apns-push-type"]?.lowercased() == "liveactivity")
                #expect(broadcast.headers["apns-priority"] == "\(broadcast.priority)")
                if let topic = broadcast.headers["apns-topic"] { #expect(topic == BroadcastHarness.bundleID) }
                if unstoredOne {
                    #expect(broadcast.expiration == 0)
                } else {
                    let ttl = Double(BroadcastHarness.broadcastTTL)
                    #expect(Double(broadcast.expiration) >= (sentAt.timeIntervalSince1970 + ttl).rounded(.down) - 1)
                    #expect(Double(broadcast.expiration) <= broadcast.receivedAt.timeIntervalSince1970 + ttl + 1)
                }
                #expect(push.aps.event == "update")
                // Unix seconds of about now (a 2001-based or millisecond timestamp would be far off).
                #expect(abs(Double(push.aps.timestamp) - broadcast.receivedAt.timeIntervalSince1970) < 600)
                #expect(push.aps.contentState?.kickoff == MatchState.kickoffDate)
            }
            #expect(pushes.allSatisfy { $0.push.aps.contentState?.halfWindow == window })
            #expect(zip(pushes, pushes.dropFirst()).allSatisfy { $0.push.aps.timestamp < $1.push.aps.timestamp })
            let goalPush = pushes[0].push.aps
            #expect(goalPush.alert?.title == .plain("GOAL"))
            #expect(goalPush.alert?.body == .localized(key: "GOAL_BODY", arguments: ["Saka", "54"]))
            #expect(goalPush.alert?.sound == "default")
            #expect(goalPush.relevanceScore == 0.75)
            #expect(goalPush.staleDate == Int(staleDate.timeIntervalSince1970))
            #expect(pushes.allSatisfy { $0.push.aps.contentState?.lastScorer == "Saka" })
            #expect(pushes.dropFirst().allSatisfy { $0.push.aps.alert == nil })

            // The delivery rows agree with what APNs accepted, and every update was broadcast.
            #expect(try await h.settledDispositions(of: kept) == ["broadcast": 5])
            #expect(
                try await h.count(
                    """
                    SELECT count(*)::bigint AS n FROM deliveries d JOIN channels c ON c.id = d.channel_id
                    WHERE c.event_id = \(kept) AND d.kind = 'broadcast' AND d.status = 200
                    """) == 5)
            let detail = try await h.event(kept)
            #expect(detail["counts"]?["broadcast"]?.intValue == 5 && detail["counts"]?["pending"]?.intValue == 0)

            // The app's foreground fetch decodes the same way.
            let fetched = try await h.api("GET", "/v1/events/\(kept)/state")
            #expect(fetched.status == 200, "\(fetched.text)")
            let current = try JSONDecoder().decode(MatchState.self, from: Data(try #require(fetched.json["contentState"]).jsonBytes))
            #expect(current == state)
            #expect(fetched.json["timestamp"]?.intValue != nil)
        }
    }

    @Test func thePriorityBudgetDowngradesTheRestAndCountsThem() async throws {
        try await BroadcastHarness.run(serveArguments: ["--high-priority-budget", "2"]) { h in
            let event = try await h.createEvent("budget", state: MatchState(period: .firstHalf))
            let channel = try await h.openChannel(of: event)
            var state = MatchState(period: .firstHalf)
            for goal in 1...4 {
                state.homeScore = goal
                state.minute = goal * 10
                let answer = try await h.update(event, state, extra: ["alert": ["title": "GOAL", "body": .string("Goal \(goal)")]])
                #expect(answer.status == 202, "\(answer.text)")
                try await h.waitForState(state, on: channel)
            }
            let pushes = try h.pushes(on: channel)
            #expect(pushes.map(\.broadcast.priority) == [10, 10, 5, 5])
            // Downgraded, not dropped: the alert still goes.
            #expect(pushes.allSatisfy { $0.push.aps.alert != nil })
            // The counter moves once the broadcast is recorded, just after APNs answered.
            try await h.waitUntil("two downgrades are counted") { try await h.metric("marquee_priority_downgrades_total") >= 2 }
            #expect(try await h.metric("marquee_priority_downgrades_total") == 2)
        }
    }

    @Test func aBurstIsConflatedAndTheNewestStateIsSent() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("burst", state: MatchState(period: .firstHalf))
            let channel = try await h.openChannel(of: event)
            var state = MatchState(period: .firstHalf)
            for minute in 1...30 {
                state.minute = minute
                let answer = try await h.update(event, state)
                #expect(answer.status == 202, "\(answer.text)")
            }
            let pushes = try await h.waitForState(state, on: channel)
            let dispositions = try await h.settledDispositions(of: event)
            #expect(dispositions.values.reduce(0, +) == 30)
            #expect(Set(dispositions.keys).isSubset(of: ["broadcast", "conflated"]), "\(dispositions)")
            #expect(dispositions["broadcast"] == pushes.count, "\(dispositions) vs \(pushes.count) received")
            #expect(dispositions["conflated", default: 0] > 0, "\(dispositions)")
            // At most one broadcast per conflation interval: n broadcasts span at least n - 1 intervals as sent. They
            // are seen at the simulator, where one late arrival (a loaded machine) can shorten the span by a second.
            let span = try #require(pushes.last).broadcast.receivedAt.timeIntervalSince(try #require(pushes.first).broadcast.receivedAt)
            #expect(pushes.count <= Int(span / BroadcastHarness.conflationInterval) + 2, "\(pushes.count) broadcasts in \(span) s")
            // Minutes only grow; timestamps strictly increase.
            let minutes = pushes.compactMap { $0.push.aps.contentState?.minute }
            #expect(minutes == minutes.sorted() && Set(minutes).count == minutes.count)
            let timestamps = pushes.map(\.push.aps.timestamp)
            #expect(zip(timestamps, timestamps.dropFirst()).allSatisfy { $0 < $1 }, "\(timestamps)")
        }
    }

    @Test func olderInputIsSupersededWithoutATimestampRegression() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("ordering", state: MatchState(period: .firstHalf))
            let channel = try await h.openChannel(of: event)
            // occurredAt is always after the event's initial state (created just now), so only the older inputs
            // here are older than the latest.
            func at(_ date: Date) -> JSONObject { ["occurredAt": .string(BroadcastHarness.iso(date))] }

            let firstAt = Date()
            let first = MatchState(period: .firstHalf, minute: 10)
            #expect(try await h.update(event, first, extra: at(firstAt)).status == 202)
            try await h.waitForState(first, on: channel)

            // Older than what was broadcast: superseded, nothing sent.
            let stale = try await h.update(event, MatchState(period: .firstHalf, minute: 5), extra: at(firstAt.addingTimeInterval(-40)))
            #expect(stale.status == 202)
            #expect(stale.json["update"]?["disposition"] == "superseded", "\(stale.text)")

            // A newer one, then an older one that arrives while the newer is still pending.
            let newestAt = Date()
            let newest = MatchState(homeScore: 1, period: .firstHalf, minute: 30)
            #expect(try await h.update(event, newest, extra: at(newestAt)).status == 202)
            let late = try await h.update(event, MatchState(period: .firstHalf, minute: 20), extra: at(newestAt.addingTimeInterval(-0.5)))
            #expect(late.status == 202)
            #expect(late.json["update"]?["disposition"] == "superseded", "\(late.text)")
            try await h.waitForState(newest, on: channel)

            let after = MatchState(homeScore: 1, period: .firstHalf, minute: 31)
            #expect(try await h.update(event, after).status == 202)
            let pushes = try await h.waitForState(after, on: channel)

            #expect(!pushes.contains { [5, 20].contains($0.push.aps.contentState?.minute) })
            let timestamps = pushes.map(\.push.aps.timestamp)
            #expect(zip(timestamps, timestamps.dropFirst()).allSatisfy { $0 < $1 }, "\(timestamps)")
            let dispositions = try await h.settledDispositions(of: event)
            #expect(dispositions["superseded"] == 2 && dispositions["pending"] == nil, "\(dispositions)")

            // The newest state wins in the event too.
            let state = try await h.api("GET", "/v1/events/\(event)/state")
            let current = try JSONDecoder().decode(MatchState.self, from: Data(try #require(state.json["contentState"]).jsonBytes))
            #expect(current == after)
        }
    }

    @Test func retriesWithAnIdempotencyKeyGetTheFirstAnswer() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("idempotent")
            let channel = try await h.openChannel(of: event)
            let occurredAt = JSONValue.string(BroadcastHarness.iso(Date()))
            let state = MatchState(period: .firstHalf, minute: 7)
            let key = ["Idempotency-Key": "feed-7-\(UUID().uuidString)"]
            let body: JSONValue = ["contentState": state.input, "occurredAt": occurredAt]
            let first = try await h.api("POST", "/v1/events/\(event)/updates", body, headers: key)
            #expect(first.status == 202, "\(first.text)")
            // A retry of the same request gets the stored answer, byte for byte, and stores nothing.
            let retry = try await h.api("POST", "/v1/events/\(event)/updates", body, headers: key)
            #expect(retry.status == 202)
            #expect(retry.text == first.text)
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM updates WHERE event_id = \(event)") == 1)
            // The same key with another body is refused.
            let changed: JSONValue = ["contentState": MatchState(period: .firstHalf, minute: 8).input, "occurredAt": occurredAt]
            let reused = try await h.api("POST", "/v1/events/\(event)/updates", changed, headers: key)
            #expect(reused.status == 422 && reused.errorCode == "idempotency_key_reused", "\(reused.text)")
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM updates WHERE event_id = \(event)") == 1)
            // The retried update went out once.
            try await h.waitForState(state, on: channel)
            let again = try await h.api("POST", "/v1/events/\(event)/updates", body, headers: key)
            #expect(again.status == 202 && again.text == first.text)
            // Another key is another update.
            let next = MatchState(period: .firstHalf, minute: 9)
            let other = try await h.update(event, next, headers: ["Idempotency-Key": "feed-9-\(UUID().uuidString)"])
            #expect(other.status == 202 && other.text != first.text)
            let pushes = try await h.waitForState(next, on: channel)
            #expect(pushes.map { $0.push.aps.contentState?.minute } == [7, 9])
            #expect(try await h.settledDispositions(of: event) == ["broadcast": 2])
        }
    }

    @Test func aSchemaMismatchOrAnOversizedUpdateIsRefusedWithNothingStored() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("refusals")
            let channel = try await h.openChannel(of: event)
            let accepted = MatchState(period: .firstHalf, minute: 1)
            #expect(try await h.update(event, accepted).status == 202)
            try await h.waitForState(accepted, on: channel)
            #expect(try await h.settledDispositions(of: event) == ["broadcast": 1])
            func snapshot() async throws -> [Int] {
                [
                    try await h.count("SELECT count(*)::bigint AS n FROM updates"),
                    try await h.count("SELECT count(*)::bigint AS n FROM outbox"),
                    try await h.count("SELECT count(*)::bigint AS n FROM events"),
                    try await h.count("SELECT coalesce(max(latest_update_id), 0)::bigint AS n FROM events"),
                ]
            }
            let before = try await snapshot()
            let latest = try await h.event(event)["contentState"]

            var wrongType = MatchState().input.objectValue!
            wrongType["homeScore"] = "one"
            let mismatch = try await h.api("POST", "/v1/events/\(event)/updates", ["contentState": .object(wrongType)])
            #expect(mismatch.status == 422 && mismatch.errorCode == "validation_failed", "\(mismatch.text)")
            #expect(mismatch.json["error"]?["field"]?.stringValue?.contains("homeScore") == true, "\(mismatch.text)")

            var unknownField = MatchState().input.objectValue!
            unknownField["referee"] = "Taylor"
            let unknown = try await h.api("POST", "/v1/events/\(event)/updates", ["contentState": .object(unknownField)])
            #expect(unknown.status == 422 && unknown.json["error"]?["field"]?.stringValue?.contains("referee") == true, "\(unknown.text)")

            let badPatch = try await h.api("POST", "/v1/events/\(event)/updates", ["contentStatePatch": ["period": "overtime"]])
            #expect(badPatch.status == 422 && badPatch.json["error"]?["field"]?.stringValue?.contains("period") == true, "\(badPatch.text)")

            let big = MatchState(period: .firstHalf, minute: 2, lastScorer: String(repeating: "x", count: 4_200))
            let oversized = try await h.update(event, big)
            #expect(oversized.status == 422 && oversized.errorCode == "payload_too_large", "\(oversized.text)")
            #expect(oversized.json["error"]?["field"] == "contentState")
            // Just under the limit in content-state, but the alert pushes the payload over it.
            let nearly = MatchState(period: .firstHalf, minute: 2, lastScorer: String(repeating: "y", count: 3_800))
            let withAlert = try await h.update(
                event, nearly, extra: ["alert": ["title": "GOAL", "body": .string(String(repeating: "z", count: 400))]])
            #expect(withAlert.status == 422 && withAlert.errorCode == "payload_too_large", "\(withAlert.text)")

            // An event whose attributes or state do not fit the schema is not created either.
            let badEvent = try await h.api(
                "POST", "/v1/events",
                [
                    "app": .int(Int64(h.appID)), "externalId": "bad-event", "kind": "match", "attributeType": "MatchAttributes",
                    "attributes": ["homeTeam": "Arsenal"], "contentState": MatchState().input,
                    "startsAt": .string(BroadcastHarness.iso(Date().addingTimeInterval(600))),
                ])
            #expect(badEvent.status == 422 && badEvent.json["error"]?["field"]?.stringValue?.contains("awayTeam") == true, "\(badEvent.text)")

            #expect(try await snapshot() == before)
            #expect(try await h.event(event)["contentState"] == latest)
            #expect(try h.pushes(on: channel).count == 1)
        }
    }

    @Test func aScheduledEndSendsTheEndBroadcastThenDeletesTheChannel() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("ending", startsAt: Date().addingTimeInterval(-60))
            let channel = try await h.openChannel(of: event)
            let live = MatchState(homeScore: 2, awayScore: 1, period: .secondHalf, minute: 89)
            #expect(try await h.update(event, live).status == 202)
            try await h.waitForState(live, on: channel)

            let final = MatchState(homeScore: 2, awayScore: 1, period: .fullTime, minute: 90)
            let at = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 3).rounded(.up))
            let dismissal = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 600).rounded(.down))
            let ended = try await h.api(
                "POST", "/v1/events/\(event)/end",
                [
                    "contentState": final.input, "dismissalDate": .string(BroadcastHarness.iso(dismissal)),
                    "at": .string(BroadcastHarness.iso(at)), "alert": ["title": "Full time", "body": "Arsenal 2-1 Chelsea"],
                ])
            #expect(ended.status == 202, "\(ended.text)")
            #expect(ended.json["update"]?["action"] == "end")
            // Once ending, the event takes no more updates.
            let tooLate = try await h.update(event, live)
            #expect(tooLate.status == 409, "\(tooLate.text)")

            var endPush: (broadcast: ReceivedBroadcast, push: ActivityPush)?
            try await h.waitUntil("the end broadcast arrives") {
                endPush = try h.pushes(on: channel).first { $0.push.aps.event == "end" }
                return endPush != nil
            }
            let end = try #require(endPush)
            #expect(end.broadcast.receivedAt >= at, "the end went out before its `at`")
            #expect(end.push.aps.contentState == final)
            #expect(end.push.aps.dismissalDate == Int(dismissal.timeIntervalSince1970))
            #expect(end.push.aps.alert?.title == .plain("Full time"))
            let timestamps = try h.pushes(on: channel).map(\.push.aps.timestamp)
            #expect(zip(timestamps, timestamps.dropFirst()).allSatisfy { $0 < $1 }, "\(timestamps)")

            // Then the channel is deleted at APNs after --channel-delete-delay.
            // The simulator forgets the channel before it records the request, so wait for the record.
            try await h.waitUntil("the channel's delete is recorded at the simulator") {
                h.simulator.engine.channelOperations.contains { $0.kind == .delete && $0.channelID == channel }
            }
            #expect(h.simulator.engine.channel(id: channel) == nil)
            let deletion = try #require(h.simulator.engine.channelOperations.first { $0.kind == .delete && $0.channelID == channel })
            #expect(deletion.at.timeIntervalSince(end.broadcast.receivedAt) >= 1, "deleted before --channel-delete-delay")
            try await h.waitUntil("the channel is recorded deleted") {
                try await h.event(event)["channel"]?["state"] == "deleted"
            }
            let detail = try await h.event(event)
            #expect(detail["status"] == "ended", "\(detail)")
            #expect(try h.pushes(on: channel).filter { $0.push.aps.event == "end" }.count == 1)
            // Nothing more is taken for an ended event.
            let late = try await h.update(event, final)
            #expect(late.status == 409, "\(late.text)")
        }
    }

    /// The broadcast pipeline (dispatcher and scheduler) has database connections of its own: an end
    /// broadcast goes out, and the scheduler deletes its channel, while every connection of the API's pool is
    /// held by a request (here its only one, by an ingest waiting for a row this test locks).
    @Test func thePipelineGoesOnWhileRequestsHoldEveryConnectionOfTheAPI() async throws {
        try await BroadcastHarness.run(serveArguments: ["--max-connections", "1", "--pipeline-connections", "1"]) { h in
            let ending = try await h.createEvent("ending", startsAt: Date().addingTimeInterval(-60))
            let blocked = try await h.createEvent("blocked", startsAt: Date().addingTimeInterval(-60))
            let channel = try await h.openChannel(of: ending)
            // With a channel of its own, the scheduler has nothing to do for the locked event: planning it one
            // would wait for the lock too (a channel's foreign key shares its event's row).
            _ = try await h.openChannel(of: blocked)
            // Nor does the start service: its (skipped, alert-less) audience start of the event is recorded before
            // the lock, so the only lock waiter is the ingest (a start run's foreign key shares the row too).
            try await h.waitUntil("the locked event's audience start is recorded") {
                try await h.pool.query("SELECT count(*) AS n FROM start_runs WHERE event_id = \(blocked)")[0].decode(Int.self, column: "n") > 0
            }
            let final = MatchState(homeScore: 1, period: .fullTime, minute: 90)
            let at = Date().addingTimeInterval(3)
            let ended = try await h.api(
                "POST", "/v1/events/\(ending)/end",
                [
                    "contentState": final.input, "dismissalDate": .string(BroadcastHarness.iso(at.addingTimeInterval(600))),
                    "at": .string(BroadcastHarness.iso(at)),
                ])
            #expect(ended.status == 202, "\(ended.text)")
            func waitingForALock() async throws -> Int {
                try await h.pool.query(
                    """
                    SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                    """)[0].decode(Int.self, column: "n")
            }
            let locker = try await PostgresConnection.connect(url: h.databaseURL)
            try await locker.execute("BEGIN")
            try await locker.execute("SELECT 1 FROM events WHERE id = \(blocked) FOR UPDATE")
            let waiting = Task { try await h.update(blocked, MatchState(period: .firstHalf, minute: 1)) }
            try await h.waitUntil("serve's ingest waits for the locked event") { try await waitingForALock() == 1 }
            try await h.waitUntil("the end broadcast arrives", timeout: 20) {
                try h.pushes(on: channel).contains { $0.push.aps.event == "end" && $0.push.aps.contentState == final }
            }
            try await h.waitUntil("the scheduler deletes the ended channel", timeout: 20) { h.simulator.engine.channel(id: channel) == nil }
            #expect(try await waitingForALock() == 1, "the ingest stopped waiting before the lock was released")
            try await locker.execute("ROLLBACK")
            let answer = try await waiting.value
            #expect(answer.status == 202, "\(answer.text)")
        }
    }

    @Test func anEventEndsOnItsOwnAfterEndsAtAndTheGrace() async throws {
        try await BroadcastHarness.run { h in
            let state = MatchState(homeScore: 1, period: .secondHalf, minute: 80)
            let event = try await h.createEvent(
                "auto-end", startsAt: Date().addingTimeInterval(-3600), endsAt: Date().addingTimeInterval(600), state: state)
            let channel = try await h.openChannel(of: event)
            // The end is brought near only once the channel is open: an event past its end before its channel
            // opened ends without one (a slow create on a loaded machine must not change what this test sees).
            let endsAt = Date().addingTimeInterval(2)
            let moved = try await h.api("PATCH", "/v1/events/\(event)", ["endsAt": .string(BroadcastHarness.iso(endsAt))])
            #expect(moved.status == 200, "\(moved.text)")

            var endPush: (broadcast: ReceivedBroadcast, push: ActivityPush)?
            try await h.waitUntil("the automatic end broadcast arrives") {
                endPush = try h.pushes(on: channel).first { $0.push.aps.event == "end" }
                return endPush != nil
            }
            let end = try #require(endPush)
            #expect(end.broadcast.receivedAt >= endsAt.addingTimeInterval(1), "ended before endsAt + --end-grace")
            #expect(end.push.aps.contentState == state)
            // The simulator forgets the channel before it records the request, so wait for the record.
            try await h.waitUntil("the channel's delete is recorded at the simulator") {
                h.simulator.engine.channelOperations.contains { $0.kind == .delete && $0.channelID == channel }
            }
            #expect(h.simulator.engine.channel(id: channel) == nil)
            let deletion = try #require(h.simulator.engine.channelOperations.first { $0.kind == .delete && $0.channelID == channel })
            #expect(deletion.at.timeIntervalSince(end.broadcast.receivedAt) >= 1, "deleted before --channel-delete-delay")
            try await h.waitUntil("the event is ended and its channel deleted") {
                let detail = try await h.event(event)
                return detail["status"] == "ended" && detail["channel"]?["state"] == "deleted"
            }
        }
    }
}
