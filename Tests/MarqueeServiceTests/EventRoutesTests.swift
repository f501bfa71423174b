import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres
import Testing

/// Events, updates and ends through APIServer.respond on a real, migrated PostgreSQL database.
@Suite(.enabled(if: APIHarness.available))
struct EventRoutesTests {
    /// A harness with one app, its MatchAttributes type and a key of each scope.
    struct Setup {
        let harness: APIHarness
        let app: Int
        let admin: String
        let ingest: String
        let tokens: String

        static func make() async throws -> Setup {
            let harness = try await APIHarness.make()
            let app = try await harness.app()
            let admin = try await harness.key(.admin)
            let registered = await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: app))
            #expect(registered.status == 201, "\(registered.text)")
            return Setup(
                harness: harness, app: app, admin: admin, ingest: try await harness.key(.ingest),
                tokens: try await harness.key(.tokens))
        }

        /// `POST /v1/events` with the fixture's attributes and state, overridden by `fields`.
        func create(_ externalID: String, startsAt: String = "2026-11-29T18:30:00Z", _ fields: [String: JSONValue] = [:]) async -> APIHarness.Answer {
            var body: JSONObject = [
                "app": .int(Int64(app)), "externalId": .string(externalID), "kind": "match", "attributeType": "MatchAttributes",
                "attributes": ["homeTeam": "Arsenal", "awayTeam": "Chelsea", "kickoff": "2026-11-29T18:30:00Z"],
                "contentState": EventRoutesTests.initialState, "startsAt": .string(startsAt),
            ]
            for (key, value) in fields { if value == .null { body.removeValue(forKey: key) } else { body[key] = value } }
            return await harness.send("POST", "/v1/events", key: admin, body: JSONValue.object(body).jsonString)
        }

        /// Creates an event and returns its id.
        func event(_ externalID: String = "match-\(UUID().uuidString.prefix(8))") async throws -> Int {
            let created = await create(externalID)
            #expect(created.status == 201, "\(created.text)")
            return Int(try #require(created.json?["id"]?.intValue))
        }

        /// A POST with optional Idempotency-Key.
        func post(_ path: String, key: String? = nil, body: String, idempotencyKey: String? = nil) async -> APIHarness.Answer {
            var headers: HTTPHeaders = ["authorization": "Bearer \(key ?? ingest)", "content-type": "application/json"]
            if let idempotencyKey { headers.add("Idempotency-Key", idempotencyKey) }
            return APIHarness.Answer(
                response: await harness.api.respond(
                    to: HTTPRequest(
                        method: "POST", path: path, headers: headers,
                        body: Array(body.utf8))))
        }

        /// Gives the event an open channel through the lifecycle's steps, as the scheduler would.
        func openChannel(_ event: Int) async throws {
            let channels = ChannelRepository(pool: harness.pool)
            let planned = try await channels.createPlanned(eventID: event)
            var lifecycle = try #require(planned.lifecycle)
            var before = lifecycle
            _ = try lifecycle.leadTimeReached()
            #expect(try await channels.transition(channelID: planned.id, from: before, to: lifecycle))
            before = lifecycle
            _ = try lifecycle.createSucceeded()
            #expect(
                try await channels.transition(
                    channelID: planned.id, from: before, to: lifecycle, apnsChannelID: "AAAAAAAAAAAAAAAAAAAAAA==", broadcasts: .resume))
        }

        func state(_ event: Int) async -> JSONValue? {
            await harness.send("GET", "/v1/events/\(event)/state", key: tokens).json
        }
    }

    static let initialState: JSONValue = [
        "homeScore": 0, "awayScore": 0, "period": "scheduled", "minute": 0, "kickoff": "2026-11-29T18:30:00Z", "goals": [],
    ]

    /// 2026-11-29T18:30:00Z as an app's JSONDecoder reads a Date: seconds since 2001-01-01.
    static let kickoffReferenceSeconds = JSONValue.double(Date(timeIntervalSince1970: 1_795_977_000).timeIntervalSinceReferenceDate)

    func expectError(
        _ answer: APIHarness.Answer, _ status: Int, code: String? = nil, field: String?? = .none,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(answer.status == status, "\(answer.text)", sourceLocation: sourceLocation)
        #expect(answer.json?["error"]?["message"]?.stringValue != nil, "not the error format: \(answer.text)", sourceLocation: sourceLocation)
        if let code { #expect(answer.errorCode == code, "\(answer.text)", sourceLocation: sourceLocation) }
        if case .some(let field) = field { #expect(answer.errorField == field, "\(answer.text)", sourceLocation: sourceLocation) }
    }

    // MARK: Events

    @Test func createListShowAndState() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let created = await s.create("epl-ars-che", ["topics": ["team:arsenal", "team:chelsea"], "endsAt": "2026-11-29T20:30:00Z"])
        #expect(created.status == 201, "\(created.text)")
        let event = try #require(created.json)
        #expect(event["app"] == .int(Int64(s.app)))
        #expect(event["externalId"] == "epl-ars-che")
        #expect(event["kind"] == "match")
        #expect(event["attributeType"] == "MatchAttributes")
        #expect(event["storagePolicy"] == "mostRecent")
        #expect(event["status"] == "scheduled")
        #expect(event["channelLost"] == false)
        #expect(event["startsAt"] == "2026-11-29T18:30:00Z")
        #expect(event["endsAt"] == "2026-11-29T20:30:00Z")
        #expect(event["topics"] == ["team:arsenal", "team:chelsea"])
        // Stored in app form: dates as reference-date seconds, as the device decodes them.
        #expect(event["attributes"]?["kickoff"] == Self.kickoffReferenceSeconds)
        #expect(event["contentState"]?["kickoff"] == Self.kickoffReferenceSeconds)
        #expect(event["contentState"]?["homeScore"] == 0)
        #expect(event["contentStateAt"]?.stringValue != nil)
        let id = try #require(event["id"]?.intValue)

        // The same external id again conflicts.
        expectError(await s.create("epl-ars-che"), 409, code: "conflict", field: "externalId")

        // Detail: no channel yet, no updates.
        let detail = try #require(await s.harness.send("GET", "/v1/events/\(id)", key: s.admin).json)
        #expect(detail["id"] == .int(id))
        #expect(detail["channel"] == .null)
        #expect(
            detail["counts"] == ["pending": 0, "broadcast": 0, "conflated": 0, "superseded": 0, "unsent": 0, "deliveries": 0, "failedDeliveries": 0])
        expectError(await s.harness.send("GET", "/v1/events/999999", key: s.admin), 404, code: "not_found")
        expectError(await s.harness.send("GET", "/v1/events/abc", key: s.admin), 422, field: "id")

        // State, for app backends (tokens) and operators (admin).
        let state = try #require(await s.state(Int(id)))
        #expect(state["event"] == .int(id))
        #expect(state["contentState"] == event["contentState"])
        #expect(state["timestamp"]?.intValue != nil)
        #expect(state["updatedAt"] == event["contentStateAt"])
        #expect(state["status"] == "scheduled")
        #expect(await s.harness.send("GET", "/v1/events/\(id)/state", key: s.admin).status == 200)
        expectError(await s.harness.send("GET", "/v1/events/\(id)/state", key: s.ingest), 403, code: "forbidden")
    }

    @Test func anEventCarriesItsAudienceLeadAndStartAlertAndItsStartMustFitADevicePush() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let alert: JSONValue = ["title": "Kick-off", "body": ["loc-key": "KICKOFF_BODY", "loc-args": ["Arsenal", "Chelsea"]], "sound": "default"]
        let created = await s.create("with-start", ["audienceLead": 900, "startAlert": alert])
        #expect(created.status == 201, "\(created.text)")
        #expect(created.json?["audienceLead"] == 900 && created.json?["startAlert"] == alert)
        let id = try #require(created.json?["id"]?.intValue)
        #expect(await s.harness.send("GET", "/v1/events/\(id)", key: s.admin).json?["startAlert"] == alert)
        #expect(await s.create("without-start").json?["audienceLead"] == .null)
        let bad: [(JSONValue, JSONValue, String)] = [
            (-1, .null, "audienceLead"), (604_801, .null, "audienceLead"), ("900", .null, "audienceLead"),
            (.null, ["title": "Kick-off"], "startAlert.body"), (.null, ["title": 1, "body": "x"], "startAlert.title"),
            (.null, ["title": "a", "body": "b", "colour": "red"], "startAlert.colour"),
        ]
        for (lead, startAlert, field) in bad {
            var fields: [String: JSONValue] = [:]
            if lead != .null { fields["audienceLead"] = lead }
            if startAlert != .null { fields["startAlert"] = startAlert }
            let answer = await s.create("bad-\(field)", fields)
            #expect(answer.status == 422 && answer.errorField == field, "\(fields): \(answer.text)")
        }
        // Attributes that fit an update (content-state only) but not a start, which carries them too.
        let big = await s.create(
            "too-big-to-start",
            [
                "attributes": [
                    "homeTeam": .string(String(repeating: "A", count: 3_000)), "awayTeam": .string(String(repeating: "C", count: 1_000)),
                    "kickoff": "2026-11-29T18:30:00Z",
                ]
            ])
        #expect(big.status == 422 && big.errorCode == "start_payload_too_large", "\(big.text)")
        #expect(try await s.harness.count("events") == 2)

        // An update of an event that starts its audience is checked as a start too: its state travels there with
        // the attributes. The same update of an event without a start alert fits a device push and is taken.
        let wide: JSONValue = [
            "homeTeam": .string(String(repeating: "A", count: 2_500)), "awayTeam": "Chelsea", "kickoff": "2026-11-29T18:30:00Z",
        ]
        let starting = try #require(await s.create("wide-start", ["attributes": wide, "startAlert": alert]).json?["id"]?.intValue)
        let quiet = try #require(await s.create("wide-quiet", ["attributes": wide]).json?["id"]?.intValue)
        var state = Self.initialState.objectValue!
        state["lastScorer"] = .string(String(repeating: "x", count: 1_500))
        let body = JSONValue.object(["contentState": .object(state)]).jsonString
        let refused = await s.post("/v1/events/\(starting)/updates", body: body)
        #expect(refused.status == 422 && refused.errorCode == "start_payload_too_large" && refused.errorField == "contentState", "\(refused.text)")
        #expect(await s.post("/v1/events/\(quiet)/updates", body: body).status == 202)
        #expect(try await s.harness.count("updates") == 1, "the refused update stored nothing")
    }

    @Test func theEventKeyAttributeIsFilledWithTheExternalIDOrChecked() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let keyed = """
            {"app": \(s.app), "name": "KeyedAttributes", "attributes": {"matchId": {"type": "string", "eventKey": true}, "homeTeam": "string"},
             "contentState": {"homeScore": "int"}}
            """
        #expect(await s.harness.send("POST", "/v1/attribute-types", key: s.admin, body: keyed).status == 201)
        let twoKeys = keyed.replacingOccurrences(of: #""homeTeam": "string""#, with: #""homeTeam": {"type": "string", "eventKey": true}"#)
            .replacingOccurrences(of: "KeyedAttributes", with: "TwoKeys")
        let refused = await s.harness.send("POST", "/v1/attribute-types", key: s.admin, body: twoKeys)
        #expect(refused.status == 422 && refused.errorField == "attributes.homeTeam.eventKey", "\(refused.text)")
        let fields: [String: JSONValue] = [
            "attributeType": "KeyedAttributes", "attributes": ["homeTeam": "Arsenal"], "contentState": ["homeScore": 0],
        ]
        let filled = await s.create("epl-ars-che", fields)
        #expect(filled.status == 201 && filled.json?["attributes"]?["matchId"] == "epl-ars-che", "\(filled.text)")
        var given = fields
        given["attributes"] = ["homeTeam": "Arsenal", "matchId": "epl-liv-eve"]
        #expect(await s.create("epl-liv-eve", given).status == 201)
        given["attributes"] = ["homeTeam": "Arsenal", "matchId": "another"]
        let wrong = await s.create("epl-mci-mun", given)
        #expect(wrong.status == 422 && wrong.errorField == "attributes.matchId", "\(wrong.text)")
        #expect(try await s.harness.count("events") == 2)
    }

    @Test func listFiltersAndPages() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        for (index, start) in ["2026-12-01T15:00:00Z", "2026-12-01T17:30:00Z", "2026-12-02T20:00:00Z"].enumerated() {
            let answer = await s.create("m\(index)", startsAt: start, ["topics": index == 1 ? ["team:arsenal"] : []])
            #expect(answer.status == 201, "\(answer.text)")
        }
        let flight = await s.create("UA1234", startsAt: "2026-12-01T16:00:00Z", ["kind": "flight"])
        #expect(flight.status == 201, "\(flight.text)")

        func externalIDs(_ query: String) async -> [String] {
            let answer = await s.harness.send("GET", "/v1/events\(query)", key: s.admin)
            #expect(answer.status == 200, "\(answer.text)")
            return answer.json?["events"]?.arrayValue?.compactMap { $0["externalId"]?.stringValue } ?? []
        }
        #expect(await externalIDs("") == ["m0", "UA1234", "m1", "m2"])
        #expect(await externalIDs("?kind=flight") == ["UA1234"])
        #expect(await externalIDs("?topic=team%3Aarsenal") == ["m1"])
        #expect(await externalIDs("?startsAfter=2026-12-01T16:00:00Z&startsBefore=2026-12-02T00:00:00Z") == ["UA1234", "m1"])
        #expect(await externalIDs("?app=\(s.app)&status=scheduled") == ["m0", "UA1234", "m1", "m2"])
        #expect(await externalIDs("?app=\(s.app + 1)").isEmpty)
        #expect(await externalIDs("?status=ended").isEmpty)

        // Keyset paging: every event once, in order, then a null cursor.
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let query = "?limit=3" + (cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? "")
            let page = try #require(await s.harness.send("GET", "/v1/events\(query)", key: s.admin).json)
            seen += page["events"]?.arrayValue?.compactMap { $0["externalId"]?.stringValue } ?? []
            cursor = page["nextCursor"]?.stringValue
            #expect(page["nextCursor"] != nil)
            pages += 1
        } while cursor != nil && pages < 5
        #expect(seen == ["m0", "UA1234", "m1", "m2"])
        #expect(pages == 2)

        for (query, field) in [
            ("?limit=0", "limit"), ("?limit=501", "limit"), ("?status=done", "status"), ("?kind=race", "kind"),
            ("?startsAfter=yesterday", "startsAfter"), ("?cursor=bm9wZQ", "cursor"), ("?app=x", "app"),
            ("?colour=red", "colour"),
        ] {
            expectError(await s.harness.send("GET", "/v1/events\(query)", key: s.admin), 422, code: "validation_failed", field: .some(field))
        }
    }

    @Test func createRefusesBadInputAndStoresNothing() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let cases: [([String: JSONValue], String?)] = [
            (
                [
                    "contentState": [
                        "homeScore": "two", "awayScore": 0, "period": "scheduled", "minute": 0, "kickoff": "2026-11-29T18:30:00Z",
                        "goals": [],
                    ]
                ], "contentState.homeScore"
            ),
            (
                [
                    "contentState": [
                        "homeScore": 0, "awayScore": 0, "period": "extraTime", "minute": 0, "kickoff": "2026-11-29T18:30:00Z",
                        "goals": [],
                    ]
                ], "contentState.period"
            ),
            (
                [
                    "contentState": [
                        "homeScore": 0, "awayScore": 0, "period": "scheduled", "minute": 0, "kickoff": "2026-11-29T18:30:00Z",
                        "goals": [["scorer": "Saka"]],
                    ]
                ], "contentState.goals[0].minute"
            ),
            (["contentState": .null], "contentState"),
            (["attributes": ["homeTeam": "Arsenal", "kickoff": "2026-11-29T18:30:00Z"]], "attributes.awayTeam"),
            (["app": "1"], "app"),
            (["kind": "race"], "kind"),
            (["attributeType": "FlightAttributes"], "attributeType"),
            (["app": 999_999], "app"),
            (["startsAt": "tomorrow"], "startsAt"),
            (["endsAt": "2026-11-29T18:00:00Z"], "endsAt"),
            (["storagePolicy": "forever"], "storagePolicy"),
            (["topics": "team:arsenal"], "topics"),
            (["topics": ["", "x"]], "topics[0]"),
            (["colour": "red"], "colour"),
            (["externalId": ""], "externalId"),
        ]
        for (fields, field) in cases {
            expectError(await s.create("bad", fields), 422, code: "validation_failed", field: .some(field))
        }
        let longName = JSONValue.string(String(repeating: "x", count: 4200))
        var huge = Self.initialState.objectValue!
        huge["lastScorer"] = longName
        let tooLarge = await s.create("huge", ["contentState": .object(huge)])
        expectError(tooLarge, 422, code: "payload_too_large", field: "contentState")
        let sizeMessage = tooLarge.json?["error"]?["message"]?.stringValue ?? ""
        #expect(sizeMessage.hasPrefix("the update's APNs payload is ") && sizeMessage.contains("over the 4096-byte limit"), "\(sizeMessage)")
        #expect(await s.create("bad", ["app": 999_999]).json?["error"]?["message"] == "app: no app with id 999999")
        expectError(await s.harness.send("POST", "/v1/events", key: s.admin, body: "{\"app\": "), 400, code: "invalid_json")
        #expect(try await s.harness.count("events") == 0)
        // A key bound to another app cannot create events for this one.
        let otherApp = try await s.harness.app(bundle: "com.example.flights")
        let bound = NewAPIKey.generate()
        _ = try await APIKeyRepository(pool: s.harness.pool).create(
            keyID: bound.id, name: "bound", scopes: ["admin"],
            salt: bound.salt, hash: bound.hash, appID: otherApp)
        let answer = await s.harness.send(
            "POST", "/v1/events", key: bound.text,
            body: """
                {"app": \(s.app), "externalId": "x", "kind": "match", "attributeType": "MatchAttributes", "attributes": {}, "contentState": {}, "startsAt": "2026-11-29T18:30:00Z"}
                """)
        expectError(answer, 422, field: "app")
        #expect(try await s.harness.count("events") == 0)
    }

    // MARK: Updates

    @Test func updatesWholeAndPatchedAndSuperseded() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let path = "/v1/events/\(event)/updates"

        let whole = await s.post(
            path,
            body: """
                {"contentState": {"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": "2026-11-29T18:30:00Z", "goals": []},
                 "occurredAt": "2026-11-29T18:31:00.250Z", "relevanceScore": 0.5, "staleDate": "2026-11-29T21:00:00Z"}
                """)
        #expect(whole.status == 202, "\(whole.text)")
        let update = try #require(whole.json?["update"])
        #expect(update["event"] == .int(Int64(event)))
        #expect(update["action"] == "update")
        #expect(update["disposition"] == "pending")
        #expect(update["occurredAt"] == "2026-11-29T18:31:00Z")
        #expect(update["id"]?.intValue != nil && update["receivedAt"]?.stringValue != nil)

        // A merge patch applies to the latest state.
        let patched = await s.post(
            path,
            body: """
                {"contentStatePatch": {"homeScore": 1, "minute": 54, "lastScorer": "Saka", "goals": [{"scorer": "Saka", "minute": 54}]},
                 "alert": {"title": "GOAL", "body": {"locKey": "goal_body", "locArgs": ["Saka", "54"]}, "sound": "default"},
                 "priority": "high", "occurredAt": "2026-11-29T19:24:00Z"}
                """)
        #expect(patched.status == 202, "\(patched.text)")
        var state = try #require(await s.state(event))
        #expect(
            state["contentState"] == [
                "homeScore": 1, "awayScore": 0, "period": "firstHalf", "minute": 54, "lastScorer": "Saka",
                "kickoff": Self.kickoffReferenceSeconds, "goals": [["scorer": "Saka", "minute": 54]],
            ])
        #expect(state["timestamp"] == .int(Int64(Date(iso8601: "2026-11-29T19:24:00Z")!.timeIntervalSince1970)))
        // The stored alert is in APNs form, as the dispatcher reads it.
        let alert = try await s.harness.pool.query("SELECT alert::text AS a FROM updates WHERE alert IS NOT NULL")[0].decode(String.self, column: "a")
        #expect(
            try JSONValue(parsing: alert) == ["title": "GOAL", "body": ["loc-key": "goal_body", "loc-args": ["Saka", "54"]], "sound": "default"])

        // null removes an optional field.
        #expect(await s.post(path, body: #"{"contentStatePatch": {"lastScorer": null}, "occurredAt": "2026-11-29T19:25:00Z"}"#).status == 202)
        state = try #require(await s.state(event))
        #expect(state["contentState"]?["lastScorer"] == nil)
        #expect(state["contentState"]?["homeScore"] == 1)

        // Older than the latest: accepted, recorded as superseded, the state untouched.
        let late = await s.post(path, body: #"{"contentStatePatch": {"minute": 40}, "occurredAt": "2026-11-29T19:10:00Z"}"#)
        #expect(late.status == 202, "\(late.text)")
        #expect(late.json?["update"]?["disposition"] == "superseded")
        #expect(await s.state(event)?["contentState"]?["minute"] == 54)

        let counts = await s.harness.send("GET", "/v1/events/\(event)", key: s.admin).json?["counts"]
        #expect(counts?["pending"] == 3)
        #expect(counts?["superseded"] == 1)
        #expect(try await s.harness.count("updates") == 4)
        #expect(try await s.harness.count("outbox") == 1)
    }

    /// An event created after its start: its initial state holds from the start, so a feed replaying the
    /// event from its start is not superseded by it, while input older than the start is.
    @Test func aLateCreatedEventTakesItsFeedFromTheStart() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let created = await s.create("replayed", startsAt: "2020-05-01T15:00:00Z")
        #expect(created.status == 201, "\(created.text)")
        #expect(created.json?["contentStateAt"] == "2020-05-01T15:00:00Z")
        let event = try #require(created.json?["id"]?.intValue)
        let kickOff = await s.post(
            "/v1/events/\(event)/updates",
            body: #"{"contentStatePatch": {"period": "firstHalf"}, "occurredAt": "2020-05-01T15:00:05Z"}"#)
        #expect(kickOff.json?["update"]?["disposition"] == "pending", "\(kickOff.text)")
        let early = await s.post(
            "/v1/events/\(event)/updates",
            body: #"{"contentStatePatch": {"minute": 1}, "occurredAt": "2020-05-01T14:00:00Z"}"#)
        #expect(early.json?["update"]?["disposition"] == "superseded", "\(early.text)")
    }

    @Test func refusedUpdatesStoreNothing() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let path = "/v1/events/\(event)/updates"
        let bigName = String(repeating: "x", count: 4000)
        let cases: [(String, Int, String, String?)] = [
            (#"{"contentStatePatch": {"homeScore": "one"}}"#, 422, "validation_failed", "contentStatePatch.homeScore"),
            (#"{"contentStatePatch": {"period": "overtime"}}"#, 422, "validation_failed", "contentStatePatch.period"),
            (#"{"contentStatePatch": {"homeScore": null}}"#, 422, "validation_failed", "contentStatePatch.homeScore"),
            (#"{"contentStatePatch": {"referee": "Taylor"}}"#, 422, "validation_failed", "contentStatePatch.referee"),
            (#"{"contentStatePatch": [1]}"#, 422, "validation_failed", "contentStatePatch"),
            (#"{"contentState": {"homeScore": 1}}"#, 422, "validation_failed", "contentState.awayScore"),
            (#"{"contentState": {"homeScore": 1}, "contentStatePatch": {"homeScore": 1}}"#, 422, "validation_failed", "contentStatePatch"),
            (#"{}"#, 422, "validation_failed", "contentState"),
            (#"{"contentStatePatch": {"minute": 2}, "colour": "red"}"#, 422, "validation_failed", "colour"),
            (#"{"contentStatePatch": {"minute": 2}, "dismissalDate": "2026-11-29T21:00:00Z"}"#, 422, "validation_failed", "dismissalDate"),
            (#"{"contentStatePatch": {"minute": 2}, "priority": "urgent"}"#, 422, "validation_failed", "priority"),
            // A feed clock an hour ahead would supersede every true update for an hour (serve --max-clock-skew, 60 s).
            (
                "{\"contentStatePatch\": {\"minute\": 2}, \"occurredAt\": \"\(Date().addingTimeInterval(3600).ISO8601Format())\"}",
                422, "validation_failed", "occurredAt"
            ),
            (#"{"contentStatePatch": {"minute": 2}, "relevanceScore": "high"}"#, 422, "validation_failed", "relevanceScore"),
            (#"{"contentStatePatch": {"minute": 2}, "relevanceScore": -1}"#, 422, "validation_failed", "relevanceScore"),
            // One scale with the freshness policy's (0 to 1,000,000): above its maximum is refused too (issue 48).
            (#"{"contentStatePatch": {"minute": 2}, "relevanceScore": 2000000}"#, 422, "validation_failed", "relevanceScore"),
            (#"{"contentStatePatch": {"minute": 2}, "occurredAt": 1764441000}"#, 422, "validation_failed", "occurredAt"),
            (#"{"contentStatePatch": {"minute": 2}, "occurredAt": "2026-11-29 late"}"#, 422, "validation_failed", "occurredAt"),
            (#"{"contentStatePatch": {"minute": 2}, "alert": {"title": 7, "body": "x"}}"#, 422, "validation_failed", "alert.title"),
            (#"{"contentStatePatch": {"minute": 2}, "alert": {"title": "GOAL"}}"#, 422, "validation_failed", "alert.body"),
            (
                #"{"contentStatePatch": {"minute": 2}, "alert": {"title": {"locArgs": []}, "body": "x"}}"#, 422, "validation_failed",
                "alert.title.locKey"
            ),
            ("{\"contentStatePatch\": {\"lastScorer\": \"\(bigName)\"}}", 422, "payload_too_large", "contentState"),
            (
                "{\"contentStatePatch\": {\"minute\": 2}, \"alert\": {\"title\": \"GOAL\", \"body\": \"\(bigName)\"}}", 422, "payload_too_large",
                "contentState"
            ),
            ("[1]", 422, "validation_failed", nil),
            (#"{"contentStatePatch": "#, 400, "invalid_json", nil),
        ]
        for (body, status, code, field) in cases {
            expectError(await s.post(path, body: body), status, code: code, field: .some(field))
        }
        expectError(await s.post("/v1/events/999999/updates", body: #"{"contentStatePatch": {"minute": 2}}"#), 404, code: "not_found")
        expectError(await s.post("/v1/events/x/updates", body: #"{"contentStatePatch": {"minute": 2}}"#), 422, field: "id")
        #expect(try await s.harness.count("updates") == 0)
        #expect(try await s.harness.count("outbox") == 0)
        #expect(try await s.harness.count("idempotency_keys") == 0)
        #expect(await s.state(event)?["contentState"] == (await s.harness.send("GET", "/v1/events/\(event)", key: s.admin).json?["contentState"]))
    }

    /// The limit applies to the payload APNs would get (`{"aps": {...}}` with this state), to the byte.
    @Test func payloadLimitIsTheRealPayloadSize() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let current = try #require(await s.state(event)?["contentState"]?.objectValue)
        func payloadSize(scorerLength: Int) -> Int {
            var state = current
            state["lastScorer"] = .string(String(repeating: "x", count: scorerLength))
            // Keys in schema order, as the encoder writes them.
            var ordered = JSONObject()
            for key in ["homeScore", "awayScore", "period", "minute", "lastScorer", "kickoff", "halfWindow", "goals"] {
                if let value = state[key] { ordered[key] = value }
            }
            // With the widest stale date and relevance score the send may add (the policy in force then decides).
            let widest = SendTimeFields().widestAtSend(for: .update)
            #expect(widest.staleDate != nil && widest.relevanceScore != nil)
            return LiveActivityPayload(action: .update, timestamp: 1_800_000_000, contentState: .object(ordered), fields: widest, alert: nil)
                .bytes.count
        }
        let fitting = 4096 - payloadSize(scorerLength: 0)
        #expect(payloadSize(scorerLength: fitting) == 4096)
        func post(_ length: Int) async -> APIHarness.Answer {
            await s.post(
                "/v1/events/\(event)/updates",
                body: "{\"contentStatePatch\": {\"lastScorer\": \"\(String(repeating: "x", count: length))\"}}")
        }
        expectError(await post(fitting + 1), 422, code: "payload_too_large", field: "contentState")
        #expect(try await s.harness.count("updates") == 0)
        let accepted = await post(fitting)
        #expect(accepted.status == 202, "\(accepted.text)")
        #expect(try await s.harness.count("updates") == 1)
        // The same state with an alert no longer fits.
        expectError(
            await s.post("/v1/events/\(event)/updates", body: #"{"contentStatePatch": {"minute": 1}, "alert": {"title": "a", "body": "b"}}"#),
            422, code: "payload_too_large")
    }

    /// Merge patches of different fields sent at once all land (each applies to the state the previous left),
    /// and concurrent duplicates of one idempotent request store it once and answer alike.
    @Test func concurrentPatchesAndDuplicates() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let path = "/v1/events/\(event)/updates"
        let patches = [#"{"homeScore": 2}"#, #"{"awayScore": 3}"#, #"{"minute": 77}"#, #"{"period": "secondHalf"}"#, #"{"lastScorer": "Havertz"}"#]
        let statuses = await withTaskGroup(of: Int.self) { group in
            for patch in patches { group.addTask { await s.post(path, body: "{\"contentStatePatch\": \(patch)}").status } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 202, count: patches.count))
        let state = try #require(await s.state(event)?["contentState"])
        #expect(state["homeScore"] == 2 && state["awayScore"] == 3 && state["minute"] == 77)
        #expect(state["period"] == "secondHalf" && state["lastScorer"] == "Havertz")

        let body = #"{"contentStatePatch": {"minute": 80}}"#
        let answers = await withTaskGroup(of: APIHarness.Answer.self) { group in
            for _ in 0..<4 { group.addTask { await s.post(path, body: body, idempotencyKey: "dup") } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers.allSatisfy { $0.status == 202 && $0.response.body == answers[0].response.body }, "\(answers.map(\.text))")
        #expect(try await s.harness.count("updates") == patches.count + 1)
    }

    @Test func idempotentRetries() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let path = "/v1/events/\(event)/updates"
        let body = #"{"contentStatePatch": {"homeScore": 1}, "occurredAt": "2026-11-29T19:00:00Z"}"#
        let first = await s.post(path, body: body, idempotencyKey: "feed-42")
        #expect(first.status == 202, "\(first.text)")
        let again = await s.post(path, body: body, idempotencyKey: "feed-42")
        #expect(again.status == 202)
        #expect(again.response.body == first.response.body)
        #expect(again.response.headers["content-type"] == "application/json")
        #expect(first.response.headers["idempotent-replayed"] == nil)
        #expect(again.response.headers["idempotent-replayed"] == "true")
        // The same request re-serialized (other whitespace, other key order) is the same request.
        let reserialized = await s.post(
            path, body: "{ \"occurredAt\":\"2026-11-29T19:00:00Z\",\n \"contentStatePatch\" : {\"homeScore\":1} }",
            idempotencyKey: "feed-42")
        #expect(reserialized.status == 202 && reserialized.response.body == first.response.body, "\(reserialized.text)")
        #expect(reserialized.response.headers["idempotent-replayed"] == "true")
        #expect(try await s.harness.count("updates") == 1)

        expectError(
            await s.post(path, body: #"{"contentStatePatch": {"homeScore": 2}}"#, idempotencyKey: "feed-42"),
            422, code: "idempotency_key_reused", field: "idempotency-key")
        // The same body on another event is another request.
        let other = try await s.event()
        expectError(await s.post("/v1/events/\(other)/updates", body: body, idempotencyKey: "feed-42"), 422, code: "idempotency_key_reused")
        // Keys are per API key.
        let secondKey = try await s.harness.key(.ingest)
        let fromOther = await s.post(path, key: secondKey, body: body, idempotencyKey: "feed-42")
        #expect(fromOther.status == 202)
        #expect(fromOther.response.body != first.response.body)
        #expect(try await s.harness.count("updates") == 2)
        // A refused request keeps no key: fixed, it goes through.
        expectError(await s.post(path, body: #"{"contentStatePatch": {"homeScore": "x"}}"#, idempotencyKey: "feed-43"), 422)
        #expect(await s.post(path, body: #"{"contentStatePatch": {"homeScore": 3}}"#, idempotencyKey: "feed-43").status == 202)

        for bad in ["", String(repeating: "k", count: 256), "caf\u{e9}"] {
            expectError(await s.post(path, body: body, idempotencyKey: bad), 400, code: "bad_request", field: "idempotency-key")
        }
        #expect(try await s.harness.count("updates") == 3)
        // A retry after the event ended still gets its first answer, not a 409.
        try await s.harness.pool.execute("UPDATE events SET status = 'ended' WHERE id = \(event)")
        let late = await s.post(path, body: body, idempotencyKey: "feed-42")
        #expect(late.status == 202 && late.response.body == first.response.body, "\(late.text)")
        expectError(await s.post(path, body: body, idempotencyKey: "feed-44"), 409, code: "conflict")
    }

    @Test func endWithAtThenNothingMore() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        // An open channel: the end waits for the dispatcher.
        try await s.openChannel(event)
        // The end takes the latest state by default, or a patch of it.
        let ended = await s.post(
            "/v1/events/\(event)/end",
            body: """
                {"contentStatePatch": {"period": "fullTime", "minute": 90}, "dismissalDate": "2026-11-29T21:00:00Z",
                 "at": "2026-11-29T20:35:00Z", "alert": {"title": "Full time", "body": "Arsenal 0-0 Chelsea"}}
                """)
        #expect(ended.status == 202, "\(ended.text)")
        #expect(ended.json?["update"]?["action"] == "end")
        #expect(ended.json?["update"]?["disposition"] == "pending")
        let row = try await s.harness.pool.query(
            """
            SELECT u.not_before AS u_at, o.not_before AS o_at, u.dismissal_date FROM updates u JOIN outbox o ON o.update_id = u.id
            """)[0]
        let at = Date(iso8601: "2026-11-29T20:35:00Z")
        #expect(try row.decode(Date?.self, column: "u_at") == at)
        #expect(try row.decode(Date?.self, column: "o_at") == at)
        #expect(try row.decode(Date?.self, column: "dismissal_date") == Date(iso8601: "2026-11-29T21:00:00Z"))
        let state = try #require(await s.state(event))
        #expect(state["status"] == "ending")
        #expect(state["contentState"]?["period"] == "fullTime")

        // Ending: no more updates; a second end replaces the first (its at included) only when it says so.
        expectError(await s.post("/v1/events/\(event)/updates", body: #"{"contentStatePatch": {"minute": 91}}"#), 409, code: "conflict")
        expectError(await s.post("/v1/events/\(event)/end", body: "{}"), 409, code: "conflict", field: "replace")
        #expect(try await s.harness.count("updates") == 1)
        #expect(await s.post("/v1/events/\(event)/end", body: #"{"replace": true}"#).status == 202)
        // Ended: nothing.
        try await s.harness.pool.execute("UPDATE events SET status = 'ended' WHERE id = \(event)")
        expectError(await s.post("/v1/events/\(event)/end", body: "{}"), 409, code: "conflict")
        expectError(await s.post("/v1/events/\(event)/updates", body: #"{"contentStatePatch": {"minute": 91}}"#), 409, code: "conflict")
        expectError(await s.post("/v1/events/\(event)/end", body: #"{"at": "soon"}"#), 422, field: "at")
        #expect(try await s.harness.count("updates") == 2)
    }

    /// A feed that retries its end with the same Idempotency-Key gets the first answer, not "ending already".
    @Test func aRetriedEndIsReplayedNotRefused() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        // An open channel, so the end waits for the dispatcher and the event stays ending.
        try await s.openChannel(event)
        let path = "/v1/events/\(event)/end"
        let first = await s.post(path, body: #"{"at": "2026-11-29T20:35:00Z"}"#, idempotencyKey: "end-1")
        #expect(first.status == 202, "\(first.text)")
        let retried = await s.post(path, body: #"{"at": "2026-11-29T20:35:00Z"}"#, idempotencyKey: "end-1")
        #expect(retried.status == 202 && retried.response.body == first.response.body, "\(retried.text)")
        #expect(retried.response.headers["idempotent-replayed"] == "true")
        expectError(await s.post(path, body: #"{"at": "2026-11-29T20:40:00Z"}"#, idempotencyKey: "end-2"), 409, field: "replace")
    }

    /// The dispatcher holds an end with `at` back until then, then sends it with its dismissal date.
    @Test(.enabled(if: PipelineServiceFixture.available)) func theDispatcherSendsAnEndAtItsTime() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        _ = try await f.openChannel(eventID: event.id)
        let at = f.clock.now.addingTimeInterval(600)
        let dismissal = f.clock.now.addingTimeInterval(900)
        _ = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(action: .end, dismissalDate: dismissal, occurredAt: nil, notBefore: at),
            contentState: { $0.latestState ?? [:] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        let dispatcher = f.dispatcher()
        #expect(try await dispatcher.dispatchOnce().isEmpty)
        f.clock.advance(by: 599)
        #expect(try await dispatcher.dispatchOnce().isEmpty)
        #expect(f.apns.broadcasts.isEmpty)
        f.clock.advance(by: 1)
        let results = try await dispatcher.dispatchOnce()
        guard case .sent = results.first else {
            Issue.record("expected the end to go, got \(results)")
            return
        }
        #expect(f.apns.broadcasts.last?.aps["event"] == "end")
        #expect(f.apns.broadcasts.last?.aps["dismissal-date"] == .int(Int64(dismissal.timeIntervalSince1970)))
        #expect(try await f.events.get(id: event.id)?.status == .ended)
    }

    /// Without an opened channel there is no activity to end: the event is ended at once.
    @Test func anEventWithoutAnOpenChannelEndsAtOnce() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let bare = try await s.event()
        #expect(await s.post("/v1/events/\(bare)/end", body: #"{"at": "2030-01-01T00:00:00Z"}"#).status == 202)
        #expect(await s.state(bare)?["status"] == "ended")
        #expect(await s.harness.send("GET", "/v1/events/\(bare)", key: s.admin).json?["counts"]?["unsent"] == 1)
        #expect(try await s.harness.count("outbox") == 0)
        expectError(await s.post("/v1/events/\(bare)/end", body: "{}"), 409, code: "conflict")

        let planned = try await s.event()
        let channel = try await ChannelRepository(pool: s.harness.pool).createPlanned(eventID: planned)
        let ended = await s.post("/v1/events/\(planned)/end", body: "{}")
        #expect(ended.status == 202, "\(ended.text)")
        #expect(await s.state(planned)?["status"] == "ended")
        #expect(try await ChannelRepository(pool: s.harness.pool).get(id: channel.id)?.state == .lifecycle(.deleted))
        let detail = await s.harness.send("GET", "/v1/events/\(planned)", key: s.admin).json
        #expect(detail?["channel"]?["state"] == "deleted")
    }

    @Test func keysBoundToAnotherAppSeeNoEvent() async throws {
        let s = try await Setup.make()
        defer { s.harness.pool.close() }
        let event = try await s.event()
        let otherApp = try await s.harness.app(bundle: "com.example.flights")
        var bound: [APIScope: String] = [:]
        for scope in [APIScope.ingest, .admin] {
            let key = NewAPIKey.generate()
            _ = try await APIKeyRepository(pool: s.harness.pool).create(
                keyID: key.id, name: "bound", scopes: [scope.rawValue],
                salt: key.salt, hash: key.hash, appID: otherApp)
            bound[scope] = key.text
        }
        // Warm the per-event type cache first, so the check under the lock is what refuses.
        #expect(await s.post("/v1/events/\(event)/updates", body: #"{"contentStatePatch": {"minute": 1}}"#).status == 202)
        expectError(await s.post("/v1/events/\(event)/updates", key: bound[.ingest], body: #"{"contentStatePatch": {"minute": 2}}"#), 404)
        expectError(await s.harness.send("GET", "/v1/events/\(event)", key: bound[.admin]), 404)
        #expect(await s.harness.send("GET", "/v1/events", key: bound[.admin]).json?["events"]?.arrayValue?.isEmpty == true)
        #expect(try await s.harness.count("updates") == 1)
    }
}
