import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres
import Testing

/// The API through APIServer.respond (no sockets) on a real, migrated PostgreSQL database.
@Suite(.enabled(if: APIHarness.available))
struct APIServerTests {
    /// Who may call each route. A route added without an entry here fails `everyRouteIsInTheScopeMatrix`.
    static let expectedAccess: [String: RouteAccess] = [
        "GET /healthz": .open,
        "GET /readyz": .open,
        "GET /metrics": .open,
        "GET /openapi.json": .open,
        "GET /v1/apps": .scope(.admin),
        "GET /v1/apps/{id}": .scope(.admin),
        "POST /v1/attribute-types": .scope(.admin),
        "GET /v1/attribute-types": .anyKey,
        "GET /v1/attribute-types/{name}": .anyKey,
        "PUT /v1/attribute-types/{name}/policy": .scope(.admin),
        "GET /v1/channels": .scope(.admin),
        "GET /v1/channels/{id}": .scope(.admin),
        "DELETE /v1/channels/{id}": .scope(.admin),
        "POST /v1/events/{id}/channel/recreate": .scope(.admin),
        "POST /v1/channels/reconcile": .scope(.admin),
        "POST /v1/channels/sweep": .scope(.admin),
        "GET /v1/status": .scope(.status),
        "GET /v1/status/board": .scope(.status),
        "GET /": .open,
        "GET /status": .open,
        "GET /status/status.css": .open,
        "GET /status/status.js": .open,
        "POST /v1/events": .scope(.admin),
        "GET /v1/events": .scope(.admin),
        "GET /v1/events/{id}": .scope(.admin),
        "GET /v1/events/{id}/state": .scope(.tokens),
        "POST /v1/events/{id}/starts": .scope(.admin),
        "GET /v1/events/{id}/starts": .scope(.admin),
        "POST /v1/events/{id}/updates": .scope(.ingest),
        "POST /v1/events/{id}/end": .scope(.ingest),
        "PATCH /v1/events/{id}": .scope(.ingest),
        "POST /v1/events/{id}/cancel": .scope(.ingest),
        "GET /v1/apps/{app}/events/by-external-id/{externalId}/state": .scope(.tokens),
        "PUT /v1/events/{id}/channel": .scope(.tokens),
        "PUT /v1/installations/{id}": .scope(.tokens),
        "GET /v1/installations/{id}": .scope(.tokens),
        "DELETE /v1/installations/{id}": .scope(.tokens),
        "DELETE /v1/installations/{id}/push-to-start-token": .scope(.tokens),
        "PUT /v1/installations/{id}/follows": .scope(.tokens),
        "POST /v1/installations/{id}/follows": .scope(.tokens),
        "POST /v1/installations/{id}/follows/remove": .scope(.tokens),
        "PUT /v1/installations/{id}/activities/{activityId}": .scope(.tokens),
        "DELETE /v1/installations/{id}/activities/{activityId}": .scope(.tokens),
    ]

    /// Checks the one error format and returns the answer.
    @discardableResult
    func expectError(
        _ answer: APIHarness.Answer, _ status: Int, code: String? = nil, field: String?? = .none,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> APIHarness.Answer {
        #expect(answer.status == status, "\(answer.text)", sourceLocation: sourceLocation)
        #expect(answer.response.headers["content-type"] == "application/json", sourceLocation: sourceLocation)
        let error = answer.json?["error"]
        #expect(
            error?["code"]?.stringValue != nil && error?["message"]?.stringValue != nil && error?["field"] != nil,
            "not the error format: \(answer.text)", sourceLocation: sourceLocation)
        if let code { #expect(answer.errorCode == code, "\(answer.text)", sourceLocation: sourceLocation) }
        if case .some(let field) = field { #expect(answer.errorField == field, "\(answer.text)", sourceLocation: sourceLocation) }
        return answer
    }

    @Test func everyRouteIsInTheScopeMatrix() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let routes = Set(harness.api.routes.endpoints.map { "\($0.method) \($0.template)" })
        #expect(routes == Set(Self.expectedAccess.keys))
        for route in harness.api.routes.all {
            #expect(Self.expectedAccess["\(route.method) \(route.template)"] == route.access, "\(route.method) \(route.template)")
        }
    }

    @Test func scopeMatrixOnEveryRoute() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let app = try await harness.app()
        var keys: [APIScope: String] = [:]
        for scope in APIScope.allCases { keys[scope] = try await harness.key(scope) }
        let unknown = NewAPIKey.generate().text
        var typeNumber = 0
        for route in harness.api.routes.all {
            let path = route.template.replacingOccurrences(of: "{id}", with: "\(app)")
                .replacingOccurrences(of: "{name}", with: "MatchAttributes").replacingOccurrences(of: "{app}", with: "\(app)")
                .replacingOccurrences(of: "{externalId}", with: "match-1").replacingOccurrences(of: "{activityId}", with: "activity-1")
            let label = "\(route.method) \(route.template)"
            func call(_ key: String?) async -> APIHarness.Answer {
                typeNumber += 1
                let body = route.takesBody ? Fixtures.matchType(app: app, name: "Type\(typeNumber)") : nil
                return await harness.send(route.method, path, key: key, body: body)
            }
            switch route.access {
            case .open:
                let answer = await call(nil)
                // `/` redirects to the status page.
                #expect(answer.status == (route.template == "/" ? 302 : 200), "\(label): \(answer.text)")
            case .anyKey, .scope:
                expectError(await call(nil), 401, code: "unauthorized", field: "authorization")
                expectError(await call(unknown), 401, code: "unauthorized")
                expectError(await call("mq_not_a_key"), 401, code: "unauthorized")
                for scope in APIScope.allCases {
                    let answer = await call(keys[scope])
                    let permitted: Bool = if case .scope(let required) = route.access { scope.permits(required) } else { true }
                    if permitted {
                        #expect(answer.status != 401 && answer.status != 403, "\(label) with \(scope): \(answer.text)")
                        #expect(answer.status < 500, "\(label) with \(scope): \(answer.text)")
                    } else {
                        expectError(answer, 403, code: "forbidden", field: "authorization")
                    }
                }
            }
        }
        #expect(harness.logLines.all.contains { $0.contains("status=403") })
        // Logs name the key id, never the key.
        for key in keys.values {
            #expect(!harness.logLines.all.contains { $0.contains(key) || $0.contains(String(key.suffix(43))) })
        }
    }

    @Test func badInputIsRefusedWithTheErrorFormatAndWritesNothing() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let app = try await harness.app()
        let admin = try await harness.key(.admin)
        let valid = Fixtures.matchType(app: app)
        let cases: [(body: [UInt8], contentType: String?, status: Int, code: String, field: String??)] = [
            (Array(#"{"app": 1, "name": "#.utf8), "application/json", 400, "invalid_json", .some(nil)),
            (Array("".utf8), "application/json", 400, "invalid_json", .none),
            (Array(#"{"app": 1,}"#.utf8), "application/json", 400, "invalid_json", .none),
            ([0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D], "application/json", 400, "invalid_json", .none),
            (
                Array((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8), "application/json", 400, "invalid_json",
                .none
            ),
            (Array("[1, 2]".utf8), "application/json", 422, "validation_failed", .some(nil)),
            (
                Array(valid.replacingOccurrences(of: "\"app\": \(app)", with: "\"app\": \"\(app)\"").utf8), "application/json", 422,
                "validation_failed", "app"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"app\": \(app)", with: "\"app\": 999999").utf8), "application/json", 422, "validation_failed",
                "app"
            ),
            (Array(valid.replacingOccurrences(of: "\"app\": \(app)", with: "\"app\": 0").utf8), "application/json", 422, "validation_failed", "app"),
            (
                Array(valid.replacingOccurrences(of: "\"app\": \(app),", with: "\"app\": \(app), \"colour\": \"red\",").utf8), "application/json",
                422, "validation_failed", "colour"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"minute\": \"int\"", with: "\"minute\": \"integer\"").utf8), "application/json", 422,
                "validation_failed", "contentState.minute"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"minute\": \"int\"", with: "\"minute\": 5").utf8), "application/json", 422,
                "validation_failed", "contentState.minute"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"name\": \"MatchAttributes\"", with: "\"name\": \"not a type\"").utf8), "application/json",
                422, "validation_failed", "name"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"name\": \"MatchAttributes\"", with: "\"name\": 7").utf8), "application/json", 422,
                "validation_failed", "name"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"name\": \"MatchAttributes\"", with: "\"name\": \"Über\"").utf8), "application/json", 422,
                "validation_failed", "name"
            ),
            (
                Array(valid.replacingOccurrences(of: "\"minute\": \"int\"", with: "\"\": \"int\"").utf8), "application/json", 422,
                "validation_failed", .none
            ),
            (Array(#"{"app": 1, "name": "A", "attributes": {}}"#.utf8), "application/json", 422, "validation_failed", "contentState"),
            (Array(valid.utf8), "text/plain", 415, "unsupported_media_type", "content-type"),
            (Array(valid.utf8), nil, 415, "unsupported_media_type", "content-type"),
            (Array(valid.utf8), "application/jsonx", 415, "unsupported_media_type", "content-type"),
            (Array(valid.utf8), "application/json-patch+json", 415, "unsupported_media_type", "content-type"),
            (Array(valid.utf8) + Array(repeating: 0x20, count: APIServer.defaultMaxBodySize), "application/json", 413, "payload_too_large", .none),
        ]
        for testCase in cases {
            let answer = await harness.send("POST", "/v1/attribute-types", key: admin, bytes: testCase.body, contentType: testCase.contentType)
            expectError(answer, testCase.status, code: testCase.code, field: testCase.field)
        }
        #expect(try await harness.count("attribute_types") == 0)
        // The parse error says where.
        let answer = await harness.send("POST", "/v1/attribute-types", key: admin, body: "{\"app\": 1,\n  \"name\": tru}")
        #expect(answer.json?["error"]?["message"]?.stringValue?.contains("line 2") == true, "\(answer.text)")
        // The valid body then goes through, once.
        #expect(
            await harness.send("POST", "/v1/attribute-types", key: admin, body: valid, contentType: " Application/JSON ; charset=utf-8").status == 201
        )
        #expect(try await harness.count("attribute_types") == 1)
    }

    struct MatchState: Decodable, Equatable {
        enum Period: String, Decodable { case scheduled, firstHalf, halfTime, secondHalf, fullTime }
        struct Goal: Decodable, Equatable {
            var scorer: String
            var minute: Int
        }
        var homeScore: Int
        var awayScore: Int
        var period: Period
        var minute: Int
        var lastScorer: String?
        var kickoff: Date
        var halfWindow: ClosedRange<Date>?
        var goals: [Goal]
    }

    @Test func attributeTypeRoundTripDecodesIntoSwiftStructs() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let app = try await harness.app()
        let admin = try await harness.key(.admin)
        let ingest = try await harness.key(.ingest)
        let posted = try JSONValue(parsing: Fixtures.matchType(app: app))
        let created = await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: app))
        #expect(created.status == 201, "\(created.text)")

        let fetched = await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: ingest)
        #expect(fetched.status == 200, "\(fetched.text)")
        let document = try #require(fetched.json)
        #expect(document["app"] == .int(Int64(app)))
        #expect(document["name"] == "MatchAttributes")
        // Faithful: equal, and in the order the fields were declared (the order content-state is written in).
        #expect(document["contentState"] == posted["contentState"])
        #expect(document["attributes"] == posted["attributes"])
        #expect(document["contentState"]?.objectValue?.keys == posted["contentState"]?.objectValue?.keys)
        #expect(document["attributes"]?.objectValue?.keys == posted["attributes"]?.objectValue?.keys)

        // What comes back encodes content-state that a plain JSONDecoder reads into the app's struct.
        let type = try ActivityType(json: [
            "name": document["name"]!, "attributes": document["attributes"]!,
            "contentState": document["contentState"]!,
        ])
        let state = try type.contentState.encode([
            "homeScore": 2, "awayScore": 1, "period": "secondHalf", "minute": 67, "lastScorer": "Kane",
            "kickoff": "2026-11-29T18:30:00Z", "halfWindow": ["2026-11-29T18:30:00Z", "2026-11-29T19:15:00Z"],
            "goals": [["scorer": "Kane", "minute": 12]],
        ])
        let decoded = try JSONDecoder().decode(MatchState.self, from: state.jsonData)
        let kickoff = try Date("2026-11-29T18:30:00Z", strategy: .iso8601)
        #expect(
            decoded
                == MatchState(
                    homeScore: 2, awayScore: 1, period: .secondHalf, minute: 67, lastScorer: "Kane", kickoff: kickoff,
                    halfWindow: kickoff...kickoff.addingTimeInterval(45 * 60), goals: [.init(scorer: "Kane", minute: 12)]))

        // The same document again is a no-op; another under the same name conflicts; neither writes.
        #expect(await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: app)).status == 200)
        let changed = Fixtures.matchType(app: app).replacingOccurrences(of: "\"minute\": \"int\"", with: "\"minute\": \"double\"")
        expectError(await harness.send("POST", "/v1/attribute-types", key: admin, body: changed), 409, code: "conflict", field: "name")
        #expect(try await harness.count("attribute_types") == 1)
        let again = await harness.send("GET", "/v1/attribute-types/MatchAttributes?app=\(app)", key: ingest)
        #expect(again.json?["contentState"] == posted["contentState"])

        // Listing, filtering and lookups that find nothing.
        #expect(await harness.send("GET", "/v1/attribute-types", key: ingest).json?["attributeTypes"]?.arrayValue?.count == 1)
        #expect(await harness.send("GET", "/v1/attribute-types?app=\(app + 1)", key: ingest).json?["attributeTypes"]?.arrayValue?.count == 0)
        expectError(await harness.send("GET", "/v1/attribute-types?app=x", key: ingest), 422, field: "app")
        expectError(await harness.send("GET", "/v1/attribute-types/Nope", key: ingest), 404, code: "not_found")
        expectError(await harness.send("GET", "/v1/attribute-types/MatchAttributes?app=\(app + 1)", key: ingest), 404)
    }

    @Test func aTypesPolicyIsReplacedWholeAndRefusedWhenAMemberIsBad() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let app = try await harness.app()
        let admin = try await harness.key(.admin)
        let ingest = try await harness.key(.ingest)
        #expect(await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: app)).status == 201)
        let fresh = await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: ingest)
        #expect(fresh.json?["policy"] == [:])
        #expect(
            fresh.json?["policyInForce"]
                == ["staleAfter": nil, "relevanceScore": 50, "alertBoost": 50, "alertBoostSeconds": 300, "dismissAfter": nil])

        let set = await harness.send(
            "PUT", "/v1/attribute-types/MatchAttributes/policy", key: admin, body: #"{"staleAfter": 120, "dismissAfter": 900}"#)
        #expect(set.status == 200, "\(set.text)")
        #expect(set.json?["policy"] == ["staleAfter": 120, "dismissAfter": 900])
        #expect(set.json?["policyInForce"]?["staleAfter"] == 120)
        #expect(set.json?["policyInForce"]?["relevanceScore"] == 50)
        #expect(
            await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: ingest).json?["policy"] == ["staleAfter": 120, "dismissAfter": 900])

        // Bad members, an unknown type, the wrong scope: each refused, and the stored policy unchanged.
        let path = "/v1/attribute-types/MatchAttributes/policy"
        expectError(await harness.send("PUT", path, key: admin, body: #"{"staleAfter": 0}"#), 422, field: "staleAfter")
        expectError(await harness.send("PUT", path, key: admin, body: #"{"staleAfter": -30}"#), 422, field: "staleAfter")
        expectError(await harness.send("PUT", path, key: admin, body: #"{"dismissAfter": 14401}"#), 422, field: "dismissAfter")
        expectError(await harness.send("PUT", path, key: admin, body: #"{"relevanceScore": "high"}"#), 422, field: "relevanceScore")
        expectError(await harness.send("PUT", path, key: admin, body: #"{"staleAfterSeconds": 60}"#), 422, field: "staleAfterSeconds")
        expectError(await harness.send("PUT", path, key: admin, body: "[1]"), 422)
        expectError(await harness.send("PUT", "/v1/attribute-types/NoSuchAttributes/policy", key: admin, body: #"{"staleAfter": 60}"#), 404)
        expectError(await harness.send("PUT", path, key: ingest, body: #"{"staleAfter": 60}"#), 403)
        #expect(
            await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: ingest).json?["policy"] == ["staleAfter": 120, "dismissAfter": 900])
        #expect(try await harness.count("attribute_type_policies") == 1)

        // An empty policy removes the row: the defaults are in force again.
        let cleared = await harness.send("PUT", path, key: admin, body: "{}")
        #expect(cleared.status == 200, "\(cleared.text)")
        #expect(cleared.json?["policy"] == [:])
        #expect(try await harness.count("attribute_type_policies") == 0)
    }

    @Test func aNameInTwoAppsNeedsTheAppParameter() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let development = try await harness.app()
        let production = try await harness.app(environment: "production")
        let admin = try await harness.key(.admin)
        expectError(await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: admin), 404)
        #expect(await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: development)).status == 201)
        // A miss was not cached; the hit is (for every app and for this app).
        #expect(await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: admin).json?["app"] == .int(Int64(development)))
        #expect(await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: production)).status == 201)
        // Registering on this instance forgets the cached all-apps answer: the name is now ambiguous.
        expectError(await harness.send("GET", "/v1/attribute-types/MatchAttributes", key: admin), 409, field: "app")
        #expect(
            await harness.send("GET", "/v1/attribute-types/MatchAttributes?app=\(production)", key: admin).json?["app"]
                == .int(Int64(production)))
    }

    @Test func appsAreReadOnlyAndNeverShowTheKeyFile() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let app = try await harness.app()
        let admin = try await harness.key(.admin)
        let list = await harness.send("GET", "/v1/apps", key: admin)
        #expect(list.json?["apps"]?.arrayValue?.first?["bundleId"] == "com.example.scores")
        #expect(!list.text.contains("AuthKey.p8"))
        #expect(await harness.send("GET", "/v1/apps/\(app)", key: admin).json?["environment"] == "development")
        expectError(await harness.send("GET", "/v1/apps/\(app + 1)", key: admin), 404, code: "not_found")
        expectError(await harness.send("GET", "/v1/apps/abc", key: admin), 422, field: "id")
        expectError(await harness.send("GET", "/v1/apps/99999999999999999999", key: admin), 422, field: "id")
    }

    @Test func unknownRoutesAndMethodsGetJSONErrors() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        expectError(await harness.send("GET", "/v1/nothing"), 404, code: "not_found")
        expectError(await harness.send("GET", "/v1/apps/"), 404, code: "not_found")
        let answer = expectError(await harness.send("DELETE", "/v1/attribute-types"), 405, code: "method_not_allowed")
        #expect(
            Set(answer.response.headers["allow"]?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } ?? []) == ["GET", "POST"])
        expectError(await harness.send("POST", "/healthz", body: "{}"), 405)
        let head = await harness.send("HEAD", "/healthz")
        #expect(head.status == 200 && head.response.body.isEmpty)
    }

    @Test func readinessNeedsACurrentSchema() async throws {
        let migrated = try await APIHarness.make()
        defer { migrated.pool.close() }
        #expect(await migrated.send("GET", "/readyz").status == 200)
        #expect(await migrated.send("GET", "/healthz").json?["status"] == "ok")
        let empty = try await APIHarness.make(migrated: false)
        defer { empty.pool.close() }
        let notReady = expectError(await empty.send("GET", "/readyz"), 503, code: "unavailable")
        #expect(notReady.json?["error"]?["message"]?.stringValue?.contains("schema is not current") == true, "\(notReady.text)")
        #expect(await empty.send("GET", "/healthz").status == 200)
    }

    @Test func metricsCountRequestsByRouteTemplateAndStatus() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let admin = try await harness.key(.admin)
        _ = await harness.send("GET", "/healthz")
        _ = await harness.send("GET", "/v1/apps/41", key: admin)
        _ = await harness.send("GET", "/v1/apps/42", key: admin)
        _ = await harness.send("GET", "/nowhere")
        let metrics = await harness.send("GET", "/metrics")
        #expect(metrics.response.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(metrics.text.contains(#"marquee_http_requests_total{method="GET",route="/healthz",status="200"} 1"#))
        #expect(metrics.text.contains(#"marquee_http_requests_total{method="GET",route="/v1/apps/{id}",status="404"} 2"#))
        #expect(metrics.text.contains(#"marquee_http_requests_total{method="GET",route="unmatched",status="404"} 1"#))
        #expect(metrics.text.contains(#"marquee_http_request_duration_seconds_count{method="GET",route="/healthz",status="200"} 1"#))
        #expect(metrics.text.contains("process_resident_memory_bytes "))
        #expect(metrics.text.contains("process_start_time_seconds "))
    }

    @Test func aRevokedKeyStopsWorkingWhenItsCacheEntryExpires() async throws {
        let harness = try await APIHarness.make(keyCache: .seconds(3600))
        defer { harness.pool.close() }
        let admin = try await harness.key(.admin)
        #expect(await harness.send("GET", "/v1/apps", key: admin).status == 200)
        let keyID = try #require(APIKeyText(admin)?.id)
        #expect(try await APIKeyRepository(pool: harness.pool).revoke(keyID: keyID)?.isRevoked == true)
        // Within the cache period the verified row is reused (documented: up to 10 s in serve) ...
        #expect(await harness.send("GET", "/v1/apps", key: admin).status == 200)
        // ... but a wrong secret for a cached id is still refused: the hash is checked on every request.
        let forged = "mq_\(keyID)_" + String(repeating: "A", count: 43)
        expectError(await harness.send("GET", "/v1/apps", key: forged), 401)
        harness.keys.clearCache()
        expectError(await harness.send("GET", "/v1/apps", key: admin), 401, code: "unauthorized")
        #expect(try await APIKeyRepository(pool: harness.pool).find(keyID: keyID)?.lastUsedAt != nil)
    }

    @Test func withoutACacheRevocationIsImmediate() async throws {
        let harness = try await APIHarness.make(keyCache: .zero)
        defer { harness.pool.close() }
        let tokens = try await harness.key(.tokens)
        #expect(await harness.send("GET", "/v1/attribute-types", key: tokens).status == 200)
        _ = try await APIKeyRepository(pool: harness.pool).revoke(keyID: try #require(APIKeyText(tokens)?.id))
        expectError(await harness.send("GET", "/v1/attribute-types", key: tokens), 401)
    }

    @Test func aKeyTriedBeforeItExistedWorksOnceCreated() async throws {
        let harness = try await APIHarness.make(keyCache: .seconds(3600))
        defer { harness.pool.close() }
        let key = NewAPIKey.generate()
        expectError(await harness.send("GET", "/v1/attribute-types", key: key.text), 401)
        _ = try await APIKeyRepository(pool: harness.pool).create(keyID: key.id, name: "late", scopes: ["tokens"], salt: key.salt, hash: key.hash)
        #expect(await harness.send("GET", "/v1/attribute-types", key: key.text).status == 200)
    }
}

extension APIServerTests {
    /// A refused key is logged with its public id (never its secret), so an operator can tell which feed lost access.
    @Test func refusedKeysAreLoggedWithTheirPublicID() async throws {
        let harness = try await APIHarness.make(keyCache: .zero)
        defer { harness.pool.close() }
        let repository = APIKeyRepository(pool: harness.pool)
        let feed = NewAPIKey.generate()
        _ = try await repository.create(keyID: feed.id, name: "feed", scopes: ["ingest"], salt: feed.salt, hash: feed.hash)
        #expect(await harness.send("GET", "/v1/status", key: feed.text).status == 403)
        _ = try await repository.revoke(keyID: feed.id)
        #expect(await harness.send("GET", "/v1/attribute-types", key: feed.text).status == 401)
        let refused = harness.logLines.all.filter { $0.contains("msg=request") && ($0.contains("status=403") || $0.contains("status=401")) }
        #expect(refused.count == 2, "\(harness.logLines.all)")
        #expect(refused.allSatisfy { $0.contains("key_id=\(feed.id)") && !$0.contains(feed.text) }, "\(refused)")
        // Without a key there is nothing to name.
        #expect(await harness.send("GET", "/v1/status").status == 401)
        #expect(harness.logLines.all.last?.contains("key_id=-") == true, "\(harness.logLines.all.last ?? "")")
    }
}
