import APNs
import APNsSimulator
import Foundation
import MarqueeCore
import Testing

/// Issue 6's channel operations end to end: reconcile with APNs' list, the channel quota, a channel APNs lost,
/// and two `serve` processes sharing one database.
@Suite(.enabled(if: MarqueeProcess.available))
struct ChannelOperationsTests {
    /// The reconcile report of the test app.
    static func report(_ response: BroadcastHarness.Response, app: Int) -> JSONValue? {
        response.json["apps"]?.arrayValue?.first { $0["app"]?.intValue == Int64(app) }
    }

    static func ids(_ report: JSONValue?, _ key: String) -> Set<String> {
        Set(report?[key]?.arrayValue?.compactMap(\.stringValue) ?? [])
    }

    @Test func reconcileReportsAnOrphanAndDeletesItOnlyWhenAsked() async throws {
        try await BroadcastHarness.run(serveArguments: ["--unknown-channel-grace", "0"]) { h in
            let event = try await h.createEvent("reconciled")
            let ours = try await h.openChannel(of: event)
            let orphan = try await h.behindMarquee { client in
                try await client.createChannel(bundleID: BroadcastHarness.bundleID, storagePolicy: .noMessageStored).value
            }

            // A dry run reports the orphan and changes nothing, even when asked to delete.
            for deleteUnknown in [false, true] {
                let dry = try await h.api("POST", "/v1/channels/reconcile", ["dryRun": true, "deleteUnknown": .bool(deleteUnknown)])
                #expect(dry.status == 200, "\(dry.text)")
                let report = Self.report(dry, app: h.appID)
                #expect(Self.ids(report, "unrecorded").union(Self.ids(report, "unknown")) == [orphan], "\(dry.text)")
                #expect(Self.ids(report, "deleted").isEmpty && report?["missing"] == [], "\(dry.text)")
            }
            #expect(h.simulator.engine.channel(id: orphan) != nil)
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM channels WHERE apns_channel_id = \(orphan)") == 0)

            // Without deleteUnknown the orphan is recorded as unknown and left alone (another backend may own it).
            let recorded = try await h.api("POST", "/v1/channels/reconcile", ["dryRun": false, "deleteUnknown": false])
            #expect(recorded.status == 200, "\(recorded.text)")
            let recordedReport = Self.report(recorded, app: h.appID)
            #expect(Self.ids(recordedReport, "unrecorded").union(Self.ids(recordedReport, "unknown")) == [orphan], "\(recorded.text)")
            #expect(recordedReport?["deleted"] == [], "\(recorded.text)")
            #expect(h.simulator.engine.channel(id: orphan) != nil)
            let unknown = try await h.api("GET", "/v1/channels?app=\(h.appID)&state=unknown")
            let listed = unknown.json["channels"]?.arrayValue ?? []
            #expect(listed.map { $0["apnsChannelId"]?.stringValue } == [orphan], "\(unknown.text)")
            #expect(listed.first?["event"] == .null && listed.first?["firstSeenAt"]?.stringValue != nil)

            // With deleteUnknown (and a grace of 0) it is deleted at APNs; Marquee's own channel stays.
            let deleting = try await h.api("POST", "/v1/channels/reconcile", ["dryRun": false, "deleteUnknown": true])
            #expect(deleting.status == 200, "\(deleting.text)")
            #expect(Self.ids(Self.report(deleting, app: h.appID), "deleted") == [orphan], "\(deleting.text)")
            try await h.waitUntil("the orphan is deleted at the simulator") { h.simulator.engine.channel(id: orphan) == nil }
            #expect(h.simulator.engine.channelOperations.contains { $0.kind == .delete && $0.channelID == orphan })
            #expect(h.simulator.engine.channel(id: ours) != nil)
            #expect(try await h.event(event)["channel"]?["state"] == "open")

            // Nothing is left to report.
            let clean = try await h.api("POST", "/v1/channels/reconcile", ["dryRun": true, "deleteUnknown": false])
            let report = Self.report(clean, app: h.appID)
            #expect(Self.ids(report, "unrecorded").isEmpty && Self.ids(report, "unknown").isEmpty, "\(clean.text)")
        }
    }

    @Test func pastTheQuotaAChannelIsRefusedWithAClearError() async throws {
        try await BroadcastHarness.run(simulator: { $0.channelQuota = 5 }) { h in
            // Six events in the lead window; the last starts last, so the scheduler reaches it last.
            var events: [Int] = []
            for index in 0..<6 {
                events.append(try await h.createEvent("quota-\(index)", startsAt: Date().addingTimeInterval(600 + Double(index) * 60)))
            }
            var refused: Int?
            try await h.waitUntil("five channels open and the sixth refused") {
                var open = 0
                refused = nil
                for event in events {
                    let channel = try await h.event(event)["channel"]
                    if channel?["state"] == "open" { open += 1 } else if channel?["lastError"]?.stringValue != nil { refused = event }
                }
                return open == 5 && refused != nil
            }
            #expect(h.simulator.engine.channels(bundleID: BroadcastHarness.bundleID).count == 5)
            let detail = try await h.event(try #require(refused))
            let channel = try #require(detail["channel"])
            #expect(channel["state"] != "open" && channel["apnsChannelId"] == .null, "\(channel)")
            let lastError = try #require(channel["lastError"]?.stringValue)
            #expect(lastError.lowercased().contains("quota"), "not a clear error: \(lastError)")

            let status = try await h.api("GET", "/v1/status")
            #expect(status.status == 200, "\(status.text)")
            let app = status.json["apps"]?.arrayValue?.first { $0["app"]?.intValue == Int64(h.appID) }
            #expect(app?["quota"]?.intValue == 10_000 && (app?["inUse"]?.intValue ?? 0) >= 5, "\(status.text)")
            #expect(app?["channelsByState"]?["open"]?.intValue == 5, "\(status.text)")
            let errors = status.json["lastErrors"]?.arrayValue ?? []
            #expect(errors.contains { $0["kind"] == "channel_create" && $0["reason"] == "CannotCreateChannelConfig" }, "\(status.text)")

            // The metrics name the app by its id, the label's one form; the bundle/environment series stays one release.
            let id = ["app": String(h.appID)]
            let legacy = ["app": "\(BroadcastHarness.bundleID)/development"]
            #expect(try await h.metric("marquee_channel_quota_refusals_total", id) >= 1)
            #expect(try await h.metric("marquee_channel_quota_refusals_total", legacy) >= 1)
            try await h.waitUntil("the sampled channel gauge has both forms") {
                let byID = try await h.metric("marquee_channels", id.merging(["state": "open"]) { $1 })
                let byBundle = try await h.metric("marquee_channels", legacy.merging(["state": "open"]) { $1 })
                return byID == 5 && byBundle == 5
            }
        }
    }

    @Test func aChannelLostAtAPNsFlagsTheEventAndStopsBroadcasting() async throws {
        try await BroadcastHarness.run { h in
            let event = try await h.createEvent("lost", state: MatchState(period: .firstHalf))
            let healthy = try await h.createEvent("healthy", state: MatchState(period: .firstHalf))
            let channel = try await h.openChannel(of: event)
            let healthyChannel = try await h.openChannel(of: healthy)
            let first = MatchState(period: .firstHalf, minute: 10)
            #expect(try await h.update(event, first).status == 202)
            try await h.waitForState(first, on: channel)

            try await h.behindMarquee { client in
                try await client.deleteChannel(bundleID: BroadcastHarness.bundleID, channelID: APNsChannelID(channel))
            }
            #expect(try await h.update(event, MatchState(period: .firstHalf, minute: 11)).status == 202)
            try await h.waitUntil("the event is flagged channelLost") { try await h.event(event)["channelLost"] == true }
            let detail = try await h.event(event)
            #expect(detail["channel"]?["state"] == "lost", "\(detail)")
            #expect(detail["channel"]?["apnsChannelId"]?.stringValue == channel)

            let status = try await h.api("GET", "/v1/status")
            let lost = status.json["lostChannels"]?.arrayValue ?? []
            #expect(lost.contains { $0["event"]?.intValue == Int64(event) || $0["apnsChannelId"]?.stringValue == channel }, "\(status.text)")

            // Broadcasting stops: a later update is not sent (accepted or refused), while other events go on.
            let later = try await h.update(event, MatchState(period: .firstHalf, minute: 12))
            #expect([202, 409].contains(later.status), "\(later.text)")
            let marker = MatchState(period: .firstHalf, minute: 50)
            #expect(try await h.update(healthy, marker).status == 202)
            try await h.waitForState(marker, on: healthyChannel)
            #expect(
                try await h.count(
                    """
                    SELECT count(*)::bigint AS n FROM deliveries d JOIN channels c ON c.id = d.channel_id
                    WHERE c.event_id = \(event) AND d.kind = 'broadcast' AND d.reason = 'ChannelNotRegistered'
                    """) == 1)
            #expect(h.broadcasts(on: channel).count == 1)
            // No replacement is made behind the operator's back: the subscribed activities listen on the old id.
            #expect(h.simulator.engine.channels(bundleID: BroadcastHarness.bundleID).map(\.id) == [healthyChannel])

            // On the operator's word a new channel opens and the next update reaches it.
            let recreated = try await h.api("POST", "/v1/events/\(event)/channel/recreate")
            #expect(recreated.status == 202, "\(recreated.text)")
            let replacement = try await h.openChannel(of: event)
            #expect(replacement != channel)
            #expect(try await h.event(event)["channelLost"] == false)
            let next = MatchState(period: .firstHalf, minute: 13)
            #expect(try await h.update(event, next).status == 202)
            try await h.waitForState(next, on: replacement)
            let healthyAgain = try await h.api("POST", "/v1/events/\(healthy)/channel/recreate")
            #expect(healthyAgain.status == 409, "\(healthyAgain.text)")
        }
    }

    @Test func transientAPNsFailuresAreRetriedUntilTheNewestStateIsSent() async throws {
        // A third of APNs' answers are 503 ServiceUnavailable (seeded, so the same draws every run).
        try await BroadcastHarness.run(simulator: {
            $0.faults.serviceUnavailable = 0.3
            $0.seed = 7
        }) { h in
            var events: [Int] = []
            var channels: [String] = []
            for index in 0..<2 {
                events.append(try await h.createEvent("flaky-\(index)", state: MatchState(period: .firstHalf)))
            }
            for event in events { channels.append(try await h.openChannel(of: event, timeout: 60)) }
            for minute in 1...6 {
                for event in events {
                    #expect(try await h.update(event, MatchState(period: .firstHalf, minute: minute)).status == 202)
                }
                // The feed's pace is the scenario (bursts of two, a pause for the pacing), not a wait for something.
                if minute % 2 == 0 { try await Task.sleep(for: .milliseconds(600)) }
            }
            let newest = MatchState(period: .firstHalf, minute: 6)
            for channel in channels { try await h.waitForState(newest, on: channel, timeout: 60) }
            for (event, channel) in zip(events, channels) {
                let dispositions = try await h.settledDispositions(of: event, timeout: 60)
                #expect(Set(dispositions.keys).isSubset(of: ["broadcast", "conflated"]), "\(dispositions)")
                #expect(dispositions["broadcast"] == h.broadcasts(on: channel).count, "\(dispositions)")
            }
            // The failures were met and recorded as deliveries, and nothing was given up on.
            #expect(h.simulator.engine.statusCounts[503, default: 0] > 0)
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM deliveries WHERE status = 503") == h.simulator.engine.statusCounts[503])
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM channels WHERE state <> 'open'") == 0)
        }
    }

    @Test func twoServeProcessesSendEachPendingStateOnce() async throws {
        try await BroadcastHarness.run(instances: 2) { h in
            var events: [Int] = []
            for index in 0..<4 {
                events.append(try await h.createEvent("shared-\(index)", state: MatchState(period: .firstHalf)))
            }
            var channels: [String] = []
            for event in events { channels.append(try await h.openChannel(of: event)) }
            // One scheduler leads: one create per event.
            #expect(h.simulator.engine.channelOperations.filter { $0.kind == .create }.count == 4)
            #expect(h.simulator.engine.channels(bundleID: BroadcastHarness.bundleID).count == 4)

            // Every event's feed alternates between the two instances; the events are fed concurrently.
            let minutes = 1...12
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, event) in events.enumerated() {
                    group.addTask {
                        for minute in minutes {
                            let answer = try await h.update(event, MatchState(period: .firstHalf, minute: minute), instance: (minute + index) % 2)
                            #expect(answer.status == 202, "\(answer.text)")
                            // The feed's pace is the scenario (bursts with pauses), not a wait for something.
                            if minute % 4 == 0 { try await Task.sleep(for: .milliseconds(700)) }
                        }
                    }
                }
                try await group.waitForAll()
            }

            let newest = MatchState(period: .firstHalf, minute: minutes.upperBound)
            for channel in channels { try await h.waitForState(newest, on: channel) }
            try await h.waitUntil("no update is pending") {
                try await h.count("SELECT count(*)::bigint AS n FROM updates WHERE disposition = 'pending'") == 0
            }
            var total = 0
            for (event, channel) in zip(events, channels) {
                let pushes = try h.pushes(on: channel)
                let timestamps = pushes.map(\.push.aps.timestamp)
                #expect(Set(timestamps).count == timestamps.count, "a state went twice on \(channel): \(timestamps)")
                #expect(zip(timestamps, timestamps.dropFirst()).allSatisfy { $0 < $1 }, "\(timestamps)")
                let sentMinutes = pushes.compactMap { $0.push.aps.contentState?.minute }
                #expect(Set(sentMinutes).count == sentMinutes.count, "\(sentMinutes)")
                let dispositions = try await h.dispositions(of: event)
                #expect(dispositions.values.reduce(0, +) == minutes.count)
                #expect(Set(dispositions.keys).isSubset(of: ["broadcast", "conflated"]), "\(dispositions)")
                #expect(dispositions["broadcast"] == pushes.count, "\(dispositions) vs \(pushes.count) received")
                total += pushes.count
            }
            #expect(h.simulator.engine.broadcasts.count == total)
            // The two processes' own counts of accepted broadcasts add up to what APNs received.
            // (Each counter moves just after its broadcast is recorded.)
            var counted: [Double] = []
            try await h.waitUntil("the counters reach the broadcasts received") {
                counted = [
                    try await h.metric("marquee_broadcasts_total", ["result": "accepted"], instance: 0),
                    try await h.metric("marquee_broadcasts_total", ["result": "accepted"], instance: 1),
                ]
                return counted.reduce(0, +) >= Double(total)
            }
            #expect(counted.reduce(0, +) == Double(total), "\(counted) for \(total) broadcasts")
            #expect(
                try await h.count(
                    """
                    SELECT count(*)::bigint AS n FROM (SELECT update_id FROM deliveries WHERE kind = 'broadcast' AND status = 200
                    GROUP BY update_id HAVING count(*) > 1) twice
                    """) == 0)
        }
    }

    @Test func aStoppedLeaderLeavesTheSchedulerAndTheDispatcherToTheOtherInstance() async throws {
        try await BroadcastHarness.run(instances: 2) { h in
            let first = try await h.createEvent("before-stop", state: MatchState(period: .firstHalf))
            let firstChannel = try await h.openChannel(of: first)
            // The lease holder names its process (host-pid-random).
            func holder() async throws -> Int? {
                let rows = try await h.pool.query("SELECT holder FROM leader_leases WHERE expires_at > now()")
                guard let holder = try rows.first?.decode(String.self, column: "holder") else { return nil }
                return h.serves.firstIndex { holder.contains("-\($0.processIdentifier)-") }
            }
            let leader = try #require(try await holder(), "no instance holds the scheduler lease")
            let other = 1 - leader

            // SIGTERM gives the lease back and the process exits 0; the other instance carries on alone.
            h.serves[leader].signal(SIGTERM)
            #expect(await h.serves[leader].wait() == 0, "\(BroadcastHarness.tail(h.serves[leader].stderr))")
            let second = try await h.createEvent("after-stop", state: MatchState(period: .firstHalf), instance: other)
            let secondChannel = try await h.openChannel(of: second, instance: other)
            #expect(try await holder() == other)
            for (event, channel) in [(first, firstChannel), (second, secondChannel)] {
                let state = MatchState(period: .firstHalf, minute: 33)
                #expect(try await h.update(event, state, instance: other).status == 202)
                try await h.waitForState(state, on: channel)
                #expect(try await h.settledDispositions(of: event) == ["broadcast": 1])
            }
        }
    }

    @Test func theRoutesOfThisIssueAnswerOnlyTheirScopes() async throws {
        try await BroadcastHarness.run { h in
            let ingest = try await h.key(scope: "ingest")
            let tokens = try await h.key(scope: "tokens")
            let missing = 999_999
            // Each route with who may call it. An allowed caller gets past authorization (a 404 for the missing
            // event or channel, a 422 for an empty body); the others get 403, and no key gets 401.
            let routes: [(method: String, path: String, body: JSONValue?, allowed: Set<String>)] = [
                ("POST", "/v1/events", [:], ["admin"]),
                ("GET", "/v1/events?app=\(h.appID)", nil, ["admin"]),
                ("GET", "/v1/events/\(missing)", nil, ["admin"]),
                ("GET", "/v1/events/\(missing)/state", nil, ["admin", "tokens"]),
                ("POST", "/v1/events/\(missing)/updates", ["contentStatePatch": ["minute": 1]], ["admin", "ingest"]),
                ("POST", "/v1/events/\(missing)/end", [:], ["admin", "ingest"]),
                ("POST", "/v1/events/\(missing)/channel/recreate", nil, ["admin"]),
                ("GET", "/v1/channels?app=\(h.appID)", nil, ["admin"]),
                ("GET", "/v1/channels/\(missing)", nil, ["admin"]),
                ("DELETE", "/v1/channels/\(missing)", nil, ["admin"]),
                ("POST", "/v1/channels/reconcile", ["dryRun": true, "deleteUnknown": false], ["admin"]),
                ("POST", "/v1/channels/sweep", nil, ["admin"]),
                ("GET", "/v1/status", nil, ["admin"]),
            ]
            let keys = ["admin": h.adminKey, "ingest": ingest, "tokens": tokens]
            for route in routes {
                let label = "\(route.method) \(route.path)"
                for (scope, key) in keys {
                    let answer = try await h.api(route.method, route.path, route.body, key: key)
                    if route.allowed.contains(scope) {
                        #expect(
                            ![401, 403].contains(answer.status) && answer.status < 500, "\(label) with \(scope): \(answer.status) \(answer.text)")
                    } else {
                        #expect(answer.status == 403 && answer.errorCode != nil, "\(label) with \(scope): \(answer.status) \(answer.text)")
                    }
                }
                let anonymous = try await LoopbackHTTP.request(port: h.ports[0], route.method, route.path, body: route.body?.jsonBytes ?? [])
                #expect(anonymous.status == 401, "\(label) without a key: \(anonymous.status)")
            }
        }
    }
}
