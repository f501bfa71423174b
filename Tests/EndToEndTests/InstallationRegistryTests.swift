import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Testing

/// The registry that app backends call, through `marquee serve` as a process on a real PostgreSQL, with the
/// simulator behind it for the channel on request.
@Suite(.enabled(if: MarqueeProcess.available))
struct InstallationRegistryTests {
    static func token(_ byte: String) -> String { String(repeating: byte, count: 32) }

    /// `PUT /v1/installations/{id}` with the tokens key.
    static func register(_ harness: BroadcastHarness, _ id: String, _ fields: JSONObject, key: String) async throws -> BroadcastHarness.Response {
        var body = fields
        if body["app"] == nil { body["app"] = .int(Int64(harness.appID)) }
        return try await harness.api("PUT", "/v1/installations/\(id)", .object(body), key: key)
    }

    @Test func tokensSurviveRegistrationsWithoutOneMoveOnReinstallAndRotate() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            let first = try await Self.register(harness, "phone-1", ["pushToStartToken": .string(Self.token("AB")), "osVersion": "17.2"], key: key)
            #expect(first.status == 201, "\(first.text)")
            #expect(first.json["pushToStartToken"]?["prefix"] == "abababab", "stored lower-cased, shown cut to 8 characters")
            #expect(!first.text.contains(Self.token("ab")), "the whole token never appears")
            // Swift omits the key; JavaScript, Jackson and Go send null. Neither wipes the token.
            let omitted = try await Self.register(harness, "phone-1", ["osVersion": "17.4"], key: key)
            #expect(omitted.status == 200 && omitted.json["pushToStartToken"]?["prefix"] == "abababab", "\(omitted.text)")
            let null = try await Self.register(harness, "phone-1", ["pushToStartToken": .null, "osVersion": .null, "locale": "en_GB"], key: key)
            #expect(null.status == 200 && null.json["pushToStartToken"]?["prefix"] == "abababab", "\(null.text)")
            #expect(null.json["osVersion"] == "17.4" && null.json["locale"] == "en_GB")
            // Rotation keeps the previous token for a late 410.
            let rotated = try await Self.register(harness, "phone-1", ["pushToStartToken": .string(Self.token("cd"))], key: key)
            #expect(rotated.json["pushToStartToken"]?["prefix"] == "cdcdcdcd" && rotated.json["pushToStartToken"]?["previousPrefix"] == "abababab")
            // A reinstall: a new installation id with the same token takes it.
            let reinstalled = try await Self.register(harness, "phone-1-reinstalled", ["pushToStartToken": .string(Self.token("cd"))], key: key)
            #expect(reinstalled.status == 201)
            let old = try await harness.api("GET", "/v1/installations/phone-1", key: key)
            #expect(old.status == 200 && old.json["pushToStartToken"] == .null, "\(old.text)")
            // Clearing the token.
            #expect(try await harness.api("DELETE", "/v1/installations/phone-1-reinstalled/push-to-start-token", key: key).status == 204)
            #expect(try await harness.api("GET", "/v1/installations/phone-1-reinstalled", key: key).json["pushToStartToken"] == .null)
            #expect(try await harness.metric("marquee_installation_registrations_total", ["outcome": "created"]) == 2)
            // A key bound to the app: it needs no ?app= and may name no other app.
            let bound = try await MarqueeProcess.run(
                ["key", "create", "--scope", "tokens", "--app", "\(harness.appID)", "--json"],
                databaseURL: harness.databaseURL)
            let boundKey = try #require(try JSONValue(parsing: bound.stdout)["key"]?.stringValue, "\(bound.stderr)")
            #expect(try JSONValue(parsing: bound.stdout)["app"] == .int(Int64(harness.appID)))
            #expect(try await harness.api("GET", "/v1/installations/phone-1", key: boundKey).status == 200)
            #expect(try await harness.api("GET", "/v1/installations/phone-1?app=\(harness.appID + 1)", key: boundKey).status == 422)
            #expect(
                try await MarqueeProcess.run(["key", "create", "--scope", "tokens", "--app", "999"], databaseURL: harness.databaseURL).status == 1)
            // The operator's view, straight from the database.
            let shown = try await MarqueeProcess.run(
                ["installation", "show", "phone-1", "--app", "\(harness.appID)", "--json"],
                databaseURL: harness.databaseURL)
            let shownJSON = try JSONValue(parsing: shown.stdout)
            #expect(shown.status == 0 && shownJSON["osVersion"] == "17.4", "\(shown.stderr)")
            #expect(!shown.stdout.contains(Self.token("cd")))
            let stats = try await MarqueeProcess.run(["installation", "stats", "--json"], databaseURL: harness.databaseURL)
            let counts = try JSONValue(parsing: stats.stdout)
            #expect(counts["installations"] == 2 && counts["byOS"]?["iOS 17"] == 1 && counts["byToken"]?["none"] == 2, "\(stats.stdout)")
            let missing = try await MarqueeProcess.run(["installation", "show", "nobody"], databaseURL: harness.databaseURL)
            #expect(missing.status == 1 && missing.stderr.contains("not found"), "\(missing.stderr)")
            #expect(try await MarqueeProcess.run(["installation", "stats", "--app", "x"], databaseURL: harness.databaseURL).status == 64)
        }
    }

    @Test func disableEnableFollowAndEraseResolveTheAudience() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            let match = try await harness.createEvent("ars-che")
            let other = try await harness.createEvent("liv-eve")
            for (id, byte) in [("by-event", "01"), ("by-topic", "02"), ("elsewhere", "03")] {
                let answer = try await Self.register(harness, id, ["pushToStartToken": .string(Self.token(byte)), "osVersion": "18.1"], key: key)
                try #require(answer.status == 201, "\(answer.text)")
            }
            let byEvent = try await harness.api("PUT", "/v1/installations/by-event/follows", ["events": [["externalId": "ars-che"]]], key: key)
            #expect(
                byEvent.status == 200 && byEvent.json["follows"]?["events"]?.arrayValue?.first?["event"]?.intValue == Int64(match), "\(byEvent.text)")
            #expect(try await harness.api("PUT", "/v1/installations/by-topic/follows", ["topics": ["team:arsenal"]], key: key).status == 200)
            #expect(
                try await harness.api("POST", "/v1/installations/elsewhere/follows", ["events": [["event": .int(Int64(other))]]], key: key)
                    .status == 200)
            let audience = AudienceRepository(pool: harness.pool)
            // createEvent gives every event the topic team:arsenal, so by-topic follows both.
            #expect(try await audience.page(eventID: match).members.map(\.installationID) == ["by-event", "by-topic"])
            #expect(try await audience.page(eventID: other).members.map(\.installationID) == ["by-topic", "elsewhere"])
            // Disabled: out of the audience, follows kept; enabled again: back.
            #expect(try await Self.register(harness, "by-event", ["liveActivitiesEnabled": false], key: key).json["liveActivitiesEnabled"] == false)
            #expect(try await audience.page(eventID: match).members.map(\.installationID) == ["by-topic"])
            let shown = try await harness.api("GET", "/v1/installations/by-event", key: key)
            #expect(shown.json["follows"]?["events"]?.arrayValue?.count == 1)
            #expect(try await Self.register(harness, "by-event", ["liveActivitiesEnabled": true], key: key).status == 200)
            #expect(try await audience.page(eventID: match).members.map(\.installationID) == ["by-event", "by-topic"])
            // Removing and erasing.
            #expect(try await harness.api("POST", "/v1/installations/by-topic/follows/remove", ["topics": ["team:arsenal"]], key: key).status == 200)
            #expect(try await harness.api("DELETE", "/v1/installations/by-event", key: key).status == 204)
            #expect(try await harness.api("GET", "/v1/installations/by-event", key: key).status == 404)
            #expect(try await audience.page(eventID: match).members.isEmpty)
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM follows") == 1)
        }
    }

    @Test func theGoneRuleBothWaysAndTombstones() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            let match = try await harness.createEvent("ars-che")
            _ = try await Self.register(harness, "phone", ["pushToStartToken": .string(Self.token("ee"))], key: key)
            // The fan-out's senders call the hygiene operations with APNs' answers.
            let hygiene = TokenHygieneRepository(pool: harness.pool)
            let seenAt = try await harness.pool.query("SELECT token_seen_at FROM installations")[0].decode(Date.self, column: "token_seen_at")
            let before = Int64(seenAt.timeIntervalSince1970 * 1000) - 5000
            #expect(
                try await hygiene.refuse(
                    appID: harness.appID, token: Self.token("ee"), kind: .pushToStart,
                    refusal: .gone(reason: "Unregistered", apnsTimestampMilliseconds: before)) == .kept)
            #expect(try await harness.api("GET", "/v1/installations/phone", key: key).json["pushToStartToken"]?["prefix"] == "eeeeeeee")
            #expect(
                try await hygiene.refuse(
                    appID: harness.appID, token: Self.token("ee"), kind: .pushToStart,
                    refusal: .gone(reason: "ExpiredToken", apnsTimestampMilliseconds: before + 10_000)) == .invalidated)
            #expect(try await harness.api("GET", "/v1/installations/phone", key: key).json["pushToStartToken"] == .null)

            let activity: JSONObject = [
                "event": .int(Int64(match)), "attributesType": "MatchAttributes", "pushType": "token",
                "pushToken": .string(Self.token("a1")),
            ]
            let put = try await harness.api("PUT", "/v1/installations/phone/activities/act-1", .object(activity), key: key)
            #expect(put.status == 201 && put.json["state"] == "active", "\(put.text)")
            var rotated = activity
            rotated["pushToken"] = .string(Self.token("a2"))
            #expect(
                try await harness.api("PUT", "/v1/installations/phone/activities/act-1", .object(rotated), key: key).json["pushToken"] == "a2a2a2a2")
            let ended = try await harness.api("DELETE", "/v1/installations/phone/activities/act-1", key: key)
            #expect(ended.status == 200 && ended.json["state"] == "ended", "\(ended.text)")
            let late = try await harness.api("PUT", "/v1/installations/phone/activities/act-1", .object(activity), key: key)
            #expect(late.status == 409 && late.errorCode == "activity_ended", "\(late.text)")
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM activities WHERE push_token = \(Self.token("a2"))") == 1)
            let dismissed = try await harness.api("DELETE", "/v1/installations/phone/activities/act-1?state=dismissed", key: key)
            #expect(dismissed.json["state"] == "dismissed")
            let channel = try await harness.api(
                "PUT", "/v1/installations/phone/activities/act-2",
                ["externalId": "ars-che", "attributesType": "MatchAttributes", "pushType": "channel"], key: key)
            #expect(channel.status == 201 && channel.json["pushToken"] == .null, "\(channel.text)")
            // A scheduled activity is pending until iOS starts it; a dismissal of one never registered is kept.
            let scheduled = try await harness.api(
                "PUT", "/v1/installations/phone/activities/act-3",
                [
                    "externalId": "ars-che", "attributesType": "MatchAttributes", "pushType": "channel",
                    "startDate": .string(BroadcastHarness.iso(Date().addingTimeInterval(3600))),
                ], key: key)
            #expect(scheduled.status == 201 && scheduled.json["state"] == "pending" && scheduled.json["startDate"] != .null, "\(scheduled.text)")
            let pushed = try await harness.api("DELETE", "/v1/installations/phone/activities/pushed-1?externalId=ars-che&state=dismissed", key: key)
            #expect(
                pushed.status == 200 && pushed.json["state"] == "dismissed" && pushed.json["event"] == .int(Int64(match))
                    && pushed.json["dismissedByUser"] == true, "\(pushed.text)")
        }
    }

    @Test func badInputIsRefusedWithAFieldAndWritesNothing() async throws {
        try await BroadcastHarness.run { harness in
            let key = try await harness.key(scope: "tokens")
            let match = try await harness.createEvent("ars-che")
            _ = try await Self.register(harness, "phone", ["osVersion": "18.0"], key: key)
            let app = Int64(harness.appID)
            let cases: [(String, String, JSONValue, Int, String)] = [
                ("PUT", "/v1/installations/bad", ["app": .int(app), "pushToStartToken": "xyz"], 422, "pushToStartToken"),
                (
                    "PUT", "/v1/installations/bad", ["app": .int(app), "pushToStartToken": .string(String(repeating: "a", count: 62))], 422,
                    "pushToStartToken"
                ),
                (
                    "PUT", "/v1/installations/bad", ["app": .int(app), "pushToStartToken": .string(String(repeating: "g", count: 64))], 422,
                    "pushToStartToken"
                ),
                ("PUT", "/v1/installations/bad", ["app": 999_999, "pushToStartToken": .string(Self.token("ab"))], 422, "app"),
                ("PUT", "/v1/installations/bad", ["pushToStartToken": .string(Self.token("ab"))], 422, "app"),
                ("PUT", "/v1/installations/bad", ["app": .int(app), "osVersion": "seventeen"], 422, "osVersion"),
                ("PUT", "/v1/installations/bad", ["app": .int(app), "colour": "red"], 422, "colour"),
                ("PUT", "/v1/installations/phone/follows", ["events": [["event": 999_999]]], 422, "events[0]"),
                ("PUT", "/v1/installations/phone/follows", ["events": [["event": .int(Int64(match)), "externalId": "ars-che"]]], 422, "events[0]"),
                ("PUT", "/v1/installations/phone/follows", ["topics": .array((0...500).map { .string("t\($0)") })], 422, "topics"),
                (
                    "PUT", "/v1/installations/phone/activities/a", ["event": 999_999, "attributesType": "MatchAttributes", "pushType": "channel"],
                    422, "event"
                ),
                (
                    "PUT", "/v1/installations/phone/activities/a", ["event": .int(Int64(match)), "attributesType": "Other", "pushType": "channel"],
                    422, "attributesType"
                ),
                (
                    "PUT", "/v1/installations/phone/activities/a",
                    ["event": .int(Int64(match)), "attributesType": "MatchAttributes", "pushType": "token"],
                    422, "pushToken"
                ),
                (
                    "PUT", "/v1/installations/phone/activities/a",
                    [
                        "event": .int(Int64(match)), "attributesType": "MatchAttributes", "pushType": "channel",
                        "startDate": .string(BroadcastHarness.iso(Date().addingTimeInterval(-60))),
                    ],
                    422, "startDate"
                ),
                (
                    "PUT", "/v1/installations/phone/activities/a",
                    ["event": .int(Int64(match)), "attributesType": "MatchAttributes", "pushType": "channel", "startDate": "tomorrow"],
                    422, "startDate"
                ),
                ("DELETE", "/v1/installations/phone/activities/never-seen?event=999999", .null, 422, "event"),
                ("DELETE", "/v1/installations/phone/activities/never-seen?event=1&externalId=ars-che", .null, 422, "event"),
                ("DELETE", "/v1/installations/phone/activities/never-seen?colour=red", .null, 422, "colour"),
                ("DELETE", "/v1/installations/phone/activities/never-seen", .null, 404, ""),
            ]
            for (method, path, body, status, field) in cases {
                let answer = try await harness.api(method, path, body == .null ? nil : body, key: key)
                #expect(
                    answer.status == status && (answer.json["error"]?["field"]?.stringValue ?? "") == field,
                    "\(method) \(path) \(body): \(answer.text)")
            }
            // A body over the limit.
            let big = try await harness.api("PUT", "/v1/installations/phone", ["locale": .string(String(repeating: "x", count: 70_000))], key: key)
            #expect(big.status == 413, "\(big.text)")
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM installations") == 1)
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM follows") == 0)
            #expect(try await harness.count("SELECT count(*)::bigint AS n FROM activities") == 0)
        }
    }

    @Test func stateHasAnETagThatChangesWhenTheChannelOpensAndAChannelOnRequest() async throws {
        // A one-minute lead time: events an hour and a half ahead get a channel only on request, within a
        // two-hour window, while early channels may hold one of the two quota slots.
        try await BroadcastHarness.run(serveArguments: [
            "--channel-lead-time", "60", "--channel-request-window", "7200",
            "--channel-request-share", "0.5", "--channel-quota", "2",
        ]) { harness in
            let key = try await harness.key(scope: "tokens")
            let soon = try await harness.createEvent("soon", startsAt: Date().addingTimeInterval(5400))
            let alsoSoon = try await harness.createEvent("also-soon", startsAt: Date().addingTimeInterval(5400))
            let later = try await harness.createEvent("later", startsAt: Date().addingTimeInterval(3 * 3600))
            let state = try await LoopbackHTTP.request(
                port: harness.ports[0], "GET", "/v1/events/\(soon)/state",
                headers: ["Authorization": "Bearer \(key)"])
            #expect(state.status == 200)
            let body = try JSONValue(parsing: state.body)
            #expect(body["externalId"] == "soon" && body["apnsChannelId"] == .null && body["channelState"] == .null, "\(state.text)")
            let etag = try #require(state.headers["etag"])
            #expect(state.headers["cache-control"] == "private, no-cache")
            let unchanged = try await harness.api("GET", "/v1/events/\(soon)/state", headers: ["If-None-Match": etag], key: key)
            #expect(unchanged.status == 304 && unchanged.body.isEmpty)
            let byExternal = try await harness.api(
                "GET", "/v1/apps/\(harness.appID)/events/by-external-id/soon/state",
                headers: ["If-None-Match": etag], key: key)
            #expect(byExternal.status == 304)

            let tooEarly = try await harness.api("PUT", "/v1/events/\(later)/channel", key: key)
            #expect(tooEarly.status == 422 && tooEarly.json["error"]?["field"] == "startsAt", "\(tooEarly.text)")
            let asked = try await harness.api("PUT", "/v1/events/\(soon)/channel", key: key)
            #expect(asked.status == 202 && asked.json["apnsChannelId"] == .null, "\(asked.text)")
            var channelID: String?
            try await harness.waitUntil("the requested channel opens") {
                let answer = try await harness.api("PUT", "/v1/events/\(soon)/channel", key: key)
                channelID = answer.status == 200 ? answer.json["apnsChannelId"]?.stringValue : nil
                return channelID != nil
            }
            let quota = try await harness.api("PUT", "/v1/events/\(alsoSoon)/channel", key: key)
            #expect(quota.status == 409 && quota.errorCode == "channel_quota", "\(quota.text)")
            let opened = try await harness.api("GET", "/v1/events/\(soon)/state", headers: ["If-None-Match": etag], key: key)
            #expect(
                opened.status == 200 && opened.json["apnsChannelId"]?.stringValue == channelID && opened.json["channelState"] == "open",
                "a new ETag once the channel opens: \(opened.text)")
        }
    }
}
