import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres
import Testing

/// `PATCH /v1/events/{id}` through APIServer.respond on a real, migrated PostgreSQL database.
@Suite(.enabled(if: APIHarness.available))
struct EventChangeRoutesTests {
    typealias Setup = EventRoutesTests.Setup

    func patch(_ s: Setup, _ event: Int, key: String? = nil, _ body: JSONValue) async -> APIHarness.Answer {
        await s.harness.send("PATCH", "/v1/events/\(event)", key: key ?? s.ingest, body: body.jsonString)
    }

    func expectError(
        _ answer: APIHarness.Answer, _ status: Int, code: String? = nil, field: String?? = .none, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        EventRoutesTests().expectError(answer, status, code: code, field: field, sourceLocation: sourceLocation)
    }

    /// The recorded changes of the event: (kind, the key's public id, changes).
    func changes(_ s: Setup, _ event: Int) async throws -> [(kind: String, key: String?, changes: JSONValue)] {
        try await s.harness.pool.query(
            """
            SELECT c.kind, k.prefix, c.changes::text AS changes FROM event_changes c LEFT JOIN api_keys k ON k.id = c.api_key_id
            WHERE c.event_id = \(event) ORDER BY c.id
            """
        ).map { row in
            (
                try row.decode(String.self, column: "kind"), try row.decode(String?.self, column: "prefix"),
                try JSONValue(parsing: try row.decode(String.self, column: "changes"))
            )
        }
    }

    static func keyID(_ key: String) -> String { String(key.dropFirst(3).prefix(12)) }

    @Test func anIngestKeyMovesTheTimesAndEachChangeIsRecordedWithItsKey() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let moved = await patch(s, event, ["startsAt": "2026-11-29T19:30:00Z", "endsAt": "2026-11-29T21:45:00Z"])
        #expect(moved.status == 200, "\(moved.text)")
        #expect(moved.json?["startsAt"] == "2026-11-29T19:30:00Z" && moved.json?["endsAt"] == "2026-11-29T21:45:00Z")
        #expect(moved.json?["status"] == "scheduled")
        #expect(moved.json?["warnings"] == [])
        let again = await patch(s, event, key: s.admin, ["endsAt": "2026-11-29T22:00:00Z", "audienceLead": 1200])
        #expect(again.status == 200, "\(again.text)")
        #expect(again.json?["startsAt"] == "2026-11-29T19:30:00Z" && again.json?["audienceLead"] == 1200)

        let shown = await s.harness.send("GET", "/v1/events/\(event)", key: s.admin)
        #expect(shown.json?["endsAt"] == "2026-11-29T22:00:00Z", "\(shown.text)")
        let recorded = try await changes(s, event)
        try #require(recorded.count == 2)
        #expect(recorded[0].kind == "rescheduled" && recorded[0].key == Self.keyID(s.ingest))
        #expect(recorded[0].changes["startsAt"] == ["from": "2026-11-29T18:30:00Z", "to": "2026-11-29T19:30:00Z"], "\(recorded[0].changes)")
        #expect(recorded[0].changes["endsAt"]?["to"] == "2026-11-29T21:45:00Z")
        #expect(recorded[1].key == Self.keyID(s.admin))
        #expect(recorded[1].changes["audienceLead"] == ["from": .null, "to": 1200] && recorded[1].changes["startsAt"] == nil)
    }

    @Test func topicsAndTheStartAlertNeedAnAdminKey() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        expectError(await patch(s, event, ["topics": ["team:chelsea"]]), 403, code: "forbidden", field: "topics")
        expectError(await patch(s, event, ["startAlert": ["title": "Kick-off", "body": "now"]]), 403, code: "forbidden", field: "startAlert")
        expectError(await patch(s, event, key: s.tokens, ["startsAt": "2026-11-29T19:30:00Z"]), 403, code: "forbidden")
        #expect(try await changes(s, event).isEmpty)

        let edited = await patch(
            s, event, key: s.admin, ["topics": ["team:chelsea", "team:arsenal"], "startAlert": ["title": "Kick-off", "body": "Arsenal v Chelsea"]])
        #expect(edited.status == 200, "\(edited.text)")
        #expect(edited.json?["topics"] == ["team:chelsea", "team:arsenal"])
        #expect(edited.json?["startAlert"]?["title"] == "Kick-off")
        let removed = await patch(s, event, key: s.admin, ["startAlert": .null])
        #expect(removed.status == 200 && removed.json?["startAlert"] == .null, "\(removed.text)")
        #expect(try await changes(s, event).map(\.kind) == ["rescheduled", "rescheduled"])
    }

    @Test func badChangesAreRefusedWithTheirFieldAndChangeNothing() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        _ = await patch(s, event, ["endsAt": "2026-11-29T20:30:00Z"])
        expectError(await patch(s, event, ["endsAt": "2026-11-29T18:00:00Z"]), 422, code: "validation_failed", field: "endsAt")
        expectError(await patch(s, event, ["startsAt": "2026-11-29T21:00:00Z"]), 422, code: "validation_failed", field: "startsAt")
        expectError(
            await patch(s, event, key: s.admin, ["attributes": ["homeTeam": "Spurs"]]), 409, code: "immutable_field", field: "attributes")
        expectError(await patch(s, event, ["storagePolicy": "none"]), 409, code: "immutable_field", field: "storagePolicy")
        expectError(await patch(s, event, ["startsAt": "tomorrow"]), 422, field: "startsAt")
        expectError(await patch(s, event, ["audienceLead": -1]), 422, field: "audienceLead")
        expectError(await patch(s, event, ["colour": "red"]), 422, field: "colour")
        expectError(
            await patch(s, event, ["startsAt": "2026-11-29T21:30:00Z", "endsAt": "2026-11-29T23:30:00Z", "postponedState": ["homeScore": "one"]]),
            422, field: "postponedState.homeScore")
        // A postponedState alone changes nothing.
        expectError(await patch(s, event, ["postponedState": EventRoutesTests.initialState]), 422)
        expectError(await patch(s, event, [:]), 422)
        expectError(await patch(s, 999_999, ["startsAt": "2026-11-29T19:30:00Z"]), 404)
        let shown = await s.harness.send("GET", "/v1/events/\(event)", key: s.admin)
        #expect(shown.json?["startsAt"] == "2026-11-29T18:30:00Z" && shown.json?["endsAt"] == "2026-11-29T20:30:00Z", "\(shown.text)")
        #expect(try await changes(s, event).count == 1)

        // An ended or cancelled event no longer moves.
        for status in [EventStatus.ended, .cancelled] {
            let closed = try await s.event()
            try await s.harness.pool.execute("UPDATE events SET status = \(status.rawValue) WHERE id = \(closed)")
            expectError(await patch(s, closed, ["startsAt": "2026-11-29T19:30:00Z"]), 409, code: "conflict")
            #expect(try await changes(s, closed).isEmpty)
        }
    }

    @Test func anEventsOwnFreshnessIsSetAtCreationChangedByPatchAndRefusedNamingTheMember() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        expectError(await s.create("fresh-bad", ["freshness": ["staleAfter": 0]]), 422, code: "validation_failed", field: "freshness.staleAfter")
        expectError(await s.create("fresh-bad", ["freshness": ["dismissAfter": 14_401]]), 422, field: "freshness.dismissAfter")
        expectError(await s.create("fresh-bad", ["freshness": ["stale": 60]]), 422, field: "freshness.stale")
        expectError(await s.create("fresh-bad", ["freshness": 60]), 422, field: "freshness")
        #expect(try await s.harness.count("events") == 0)

        let created = await s.create("fresh-1", ["freshness": ["staleAfter": 90, "relevanceScore": 20]])
        #expect(created.status == 201, "\(created.text)")
        #expect(created.json?["freshness"] == ["staleAfter": 90, "relevanceScore": 20])
        let event = Int(try #require(created.json?["id"]?.intValue))

        // The feed's key replaces the event's members; a bad one changes nothing; null removes them.
        expectError(await patch(s, event, ["freshness": ["staleAfter": -1]]), 422, field: "freshness.staleAfter")
        expectError(await patch(s, event, ["freshness": ["relevanceScore": "high"]]), 422, field: "freshness.relevanceScore")
        #expect(await s.harness.send("GET", "/v1/events/\(event)", key: s.admin).json?["freshness"] == ["staleAfter": 90, "relevanceScore": 20])
        let changed = await patch(s, event, ["freshness": ["staleAfter": 30]])
        #expect(changed.status == 200 && changed.json?["freshness"] == ["staleAfter": 30], "\(changed.text)")
        let recorded = try await changes(s, event)
        #expect(recorded.count == 1 && recorded.first?.changes["freshness"] != nil, "\(recorded)")
        let cleared = await patch(s, event, ["freshness": nil])
        #expect(cleared.status == 200 && cleared.json?["freshness"] == .null, "\(cleared.text)")
    }

    @Test func aNewStartAlertIsWeighedByTheNextUpdate() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        var events: [Int] = []
        for name in ["sized", "control"] {
            let created = await s.create(name, ["startAlert": ["title": "Kick-off", "body": "soon"]])
            events.append(Int(try #require(created.json?["id"]?.intValue, "\(created.text)")))
        }
        var state = try #require(EventRoutesTests.initialState.objectValue)
        let small = JSONValue.object(["contentState": .object(state)]).jsonString
        state["lastScorer"] = .string(String(repeating: "x", count: 2500))
        let large = JSONValue.object(["contentState": .object(state)]).jsonString
        // An update reads the event's start size into this process's cache.
        for event in events { #expect(await s.post("/v1/events/\(event)/updates", body: small).status == 202) }
        let long = String(repeating: "y", count: 900)
        let edited = await patch(s, events[0], key: s.admin, ["startAlert": ["title": .string(long), "body": .string(long)]])
        #expect(edited.status == 200, "\(edited.text)")
        // With the long start alert the large state no longer fits the push-to-start: the cached size was dropped.
        expectError(await s.post("/v1/events/\(events[0])/updates", body: large), 422, code: "start_payload_too_large")
        #expect(await s.post("/v1/events/\(events[1])/updates", body: large).status == 202)
        // A start alert that does not fit with the latest state is refused, and changes nothing.
        let longer = String(repeating: "z", count: 1800)
        expectError(
            await patch(s, events[1], key: s.admin, ["startAlert": ["title": .string(longer), "body": .string(longer)]]), 422,
            code: "start_payload_too_large")
        #expect(try await changes(s, events[1]).isEmpty)
    }

    @Test func anEventThatOutlivesAnActivityIsAcceptedWithAWarning() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        // 18:30 − the default lead (600 s) to 02:25 is 8 h 5 min.
        let long = await patch(s, event, ["endsAt": "2026-11-30T02:25:00Z"])
        #expect(long.status == 200, "\(long.text)")
        let warnings = try #require(long.json?["warnings"]?.arrayValue)
        #expect(warnings.count == 1 && warnings.first?["code"] == "activity_outlives_8h" && warnings.first?["field"] == "endsAt", "\(long.text)")
        let fits = await patch(s, event, ["endsAt": "2026-11-30T02:15:00Z"])
        #expect(fits.json?["warnings"] == [], "\(fits.text)")
    }

    // MARK: cancel

    func cancel(_ s: Setup, _ event: Int, key: String? = nil, _ body: JSONValue = [:]) async -> APIHarness.Answer {
        await s.harness.send("POST", "/v1/events/\(event)/cancel", key: key ?? s.ingest, body: body.jsonString)
    }

    func channelState(_ s: Setup, _ event: Int) async throws -> String? {
        try await s.harness.pool.query("SELECT state FROM channels WHERE event_id = \(event) ORDER BY id DESC LIMIT 1").first?.decode(
            String.self, column: "state")
    }

    @Test func aCancelBeforeAnyStartSendsNothingAndHandsAnOpenChannelToItsDelete() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        try await s.openChannel(event)
        let update = JSONValue.object(["contentState": EventRoutesTests.initialState]).jsonString
        #expect(await s.post("/v1/events/\(event)/updates", body: update).status == 202)
        let cancelled = await cancel(s, event, ["dismissalDate": "2026-11-29T19:00:00Z"])
        #expect(cancelled.status == 202, "\(cancelled.text)")
        #expect(cancelled.json?["broadcast"] == false && cancelled.json?["update"] == .null, "\(cancelled.text)")
        #expect(cancelled.json?["event"]?["status"] == "cancelled")
        // The pending update never goes; the channel waits for the scheduler's delete at APNs.
        #expect(try await s.harness.count("outbox") == 0)
        let unsent = try await s.harness.pool.query(
            "SELECT count(*) AS n FROM updates WHERE event_id = \(event) AND disposition = \(UpdateDisposition.unsent.rawValue)")
        #expect(try unsent[0].decode(Int.self, column: "n") == 1)
        #expect(try await channelState(s, event) == ChannelLifecycle.State.deleting.rawValue)
        let recorded = try await changes(s, event)
        #expect(recorded.map(\.kind) == ["cancelRequested"] && recorded.first?.key == Self.keyID(s.ingest))
        #expect(recorded.first?.changes["broadcast"] == false)

        // Once cancelled, nothing more: no cancel, no update, no change.
        expectError(await cancel(s, event), 409, code: "conflict")
        expectError(await s.post("/v1/events/\(event)/updates", body: update), 409)
        expectError(await patch(s, event, ["startsAt": "2026-11-29T19:30:00Z"]), 409)

        // Without a channel there is nothing to delete: a planned one is dropped.
        let planned = try await s.event()
        _ = try await ChannelRepository(pool: s.harness.pool).createPlanned(eventID: planned)
        #expect(await cancel(s, planned).status == 202)
        #expect(try await channelState(s, planned) == ChannelLifecycle.State.deleted.rawValue)
    }

    @Test func aCancelWithRunningActivitiesQueuesTheEndAndLeavesTheEventCancelled() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        try await s.openChannel(event)
        // A broadcast reached the channel: activities may listen on it.
        let channel = try #require(
            try await s.harness.pool.query("SELECT id FROM channels WHERE event_id = \(event)").first?.decode(Int.self, column: "id"))
        try await s.harness.pool.execute(
            """
            INSERT INTO deliveries (app_id, kind, channel_id, status, latency_us, priority, attempt, aps_timestamp)
            VALUES (\(s.app), 'broadcast', \(channel), 200, 1000, 5, 1, 1)
            """)
        var final = try #require(EventRoutesTests.initialState.objectValue)
        final["lastScorer"] = "called off"
        let cancelled = await cancel(s, event, ["contentState": .object(final)])
        #expect(cancelled.status == 202, "\(cancelled.text)")
        #expect(cancelled.json?["broadcast"] == true && cancelled.json?["update"]?["action"] == "end", "\(cancelled.text)")
        #expect(cancelled.json?["event"]?["status"] == "cancelled" && cancelled.json?["event"]?["contentState"]?["lastScorer"] == "called off")
        #expect(try await s.harness.count("outbox") == 1)
        #expect(try await channelState(s, event) == ChannelLifecycle.State.open.rawValue)
        #expect(try await changes(s, event).first?.changes["broadcast"] == true)
        expectError(await cancel(s, event), 409)
    }

    @Test func aBadCancelChangesNothing() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        expectError(await cancel(s, event, ["contentState": ["homeScore": "one"]]), 422, field: "contentState.homeScore")
        expectError(await cancel(s, event, ["reason": "rain"]), 422, field: "reason")
        expectError(await cancel(s, event, ["contentState": [:], "contentStatePatch": [:]]), 422, field: "contentStatePatch")
        expectError(await cancel(s, event, key: s.tokens), 403)
        expectError(await cancel(s, 999_999), 404)
        #expect(try await changes(s, event).isEmpty)
        let shown = await s.harness.send("GET", "/v1/events/\(event)", key: s.admin)
        #expect(shown.json?["status"] == "scheduled")
        try await s.harness.pool.execute("UPDATE events SET status = \(EventStatus.ended.rawValue) WHERE id = \(event)")
        expectError(await cancel(s, event), 409, code: "conflict")
    }

    @Test func aDismissalDateMoreThanFourHoursAfterTheEndIsRefused() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        try await s.openChannel(event)
        let now = Date()
        func iso(_ offset: TimeInterval) -> JSONValue { .string(now.addingTimeInterval(offset).ISO8601Format()) }
        let end = "/v1/events/\(event)/end"
        expectError(await s.post(end, body: JSONValue.object(["dismissalDate": iso(4 * 3600 + 60)]).jsonString), 422, field: "dismissalDate")
        // Counted from the end's `at` when it is held.
        expectError(
            await s.post(end, body: JSONValue.object(["dismissalDate": iso(7 * 3600), "at": iso(2 * 3600)]).jsonString), 422,
            field: "dismissalDate")
        expectError(await cancel(s, event, ["dismissalDate": iso(5 * 3600)]), 422, field: "dismissalDate")
        #expect(try await s.harness.count("updates") == 0)
        #expect(await s.post(end, body: JSONValue.object(["dismissalDate": iso(5 * 3600), "at": iso(2 * 3600)]).jsonString).status == 202)
        let replaced = JSONValue.object(["dismissalDate": iso(3 * 3600), "replace": true]).jsonString
        let second = await s.post(end, body: replaced)
        #expect(second.status == 202, "\(second.text)")
    }
}
