import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Testing

/// The registry's routes with keys bound to one app, and installations that two apps share an id for.
@Suite(.enabled(if: APIHarness.available))
struct InstallationRoutesTests {
    static let token = String(repeating: "ab", count: 32)

    func boundKey(_ harness: APIHarness, app: Int) async throws -> String {
        let key = NewAPIKey.generate()
        _ = try await APIKeyRepository(pool: harness.pool).create(
            keyID: key.id, name: "bound", scopes: ["tokens"], salt: key.salt,
            hash: key.hash, appID: app)
        return key.text
    }

    @Test func aBoundKeySeesOnlyItsAppAndSharedIDsNeedTheApp() async throws {
        let harness = try await APIHarness.make()
        defer { harness.pool.close() }
        let first = try await harness.app()
        let second = try await harness.app(environment: "production")
        let admin = try await harness.key(.admin)
        #expect(await harness.send("POST", "/v1/attribute-types", key: admin, body: Fixtures.matchType(app: second)).status == 201)
        let tokens = try await harness.key(.tokens)
        let bound = try await boundKey(harness, app: first)
        // The bound key registers without naming its app; naming another is refused with the field.
        #expect(await harness.send("PUT", "/v1/installations/shared", key: bound, body: #"{"osVersion": "18.0"}"#).status == 201)
        let other = await harness.send("PUT", "/v1/installations/x", key: bound, body: "{\"app\": \(second)}")
        #expect(other.status == 422 && other.errorField == "app", "\(other.text)")
        #expect(await harness.send("GET", "/v1/installations/shared?app=\(second)", key: bound).errorField == "app")
        // The same installation id in the second app: an unbound key must say which.
        #expect(await harness.send("PUT", "/v1/installations/shared", key: tokens, body: "{\"app\": \(second)}").status == 201)
        let ambiguous = await harness.send("GET", "/v1/installations/shared", key: tokens)
        #expect(ambiguous.status == 409 && ambiguous.errorField == "app", "\(ambiguous.text)")
        #expect(await harness.send("PUT", "/v1/installations/shared", key: tokens, body: #"{"locale": "de_DE"}"#).status == 409)
        #expect(await harness.send("GET", "/v1/installations/shared?app=\(second)", key: tokens).json?["app"] == .int(Int64(second)))
        #expect(await harness.send("GET", "/v1/installations/shared", key: bound).json?["app"] == .int(Int64(first)))
        // An activity for an event of another app is an unknown event, and writes nothing.
        let event = await harness.send(
            "POST", "/v1/events", key: admin,
            body: """
                {"app": \(second), "externalId": "other-app-match", "kind": "match", "attributeType": "MatchAttributes",
                 "attributes": {"homeTeam": "A", "awayTeam": "B", "kickoff": "2026-11-29T18:30:00Z"},
                 "contentState": \(EventRoutesTests.initialState.jsonString),
                 "startsAt": "2026-12-29T18:30:00Z"}
                """)
        let eventID = try #require(event.json?["id"]?.intValue, "\(event.text)")
        let activity = await harness.send(
            "PUT", "/v1/installations/shared/activities/a1", key: bound,
            body: #"{"event": \#(eventID), "attributesType": "MatchAttributes", "pushType": "channel"}"#)
        #expect(activity.status == 422 && activity.errorField == "event", "\(activity.text)")
        let follow = await harness.send("PUT", "/v1/installations/shared/follows", key: bound, body: #"{"events": [{"event": \#(eventID)}]}"#)
        #expect(follow.status == 422 && follow.errorField == "events[0]", "\(follow.text)")
        #expect(try await harness.count("activities") == 0)
        #expect(try await harness.count("follows") == 0)
        // The other app's key-less state routes answer 404 to the bound key.
        #expect(await harness.send("GET", "/v1/events/\(eventID)/state", key: bound).status == 404)
        #expect(await harness.send("GET", "/v1/apps/\(second)/events/by-external-id/other-app-match/state", key: bound).status == 404)
        #expect(await harness.send("GET", "/v1/apps/\(second)/events/by-external-id/other-app-match/state", key: tokens).status == 200)
    }
}
