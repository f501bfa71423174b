import Foundation
import MarqueeCore
import MarqueeTestSupport
import Testing

@testable import MarqueeStore
@testable import Postgres

/// The token route (Sql/0039): an event with token activities and no channel that broadcasts has its outbox work
/// taken for them, with an aps.timestamp sequence a channel opened later goes on from.
@Suite(.enabled(if: TestDatabase.available))
struct TokenRouteTests {
    /// An installation with a token activity of the event.
    static func tokenActivity(_ f: PipelineFixture, eventID: Int, _ name: String = "phone") async throws {
        let installations = InstallationRepository(pool: f.pool)
        let (record, _) = try await installations.register(
            InstallationRegistration(appID: f.appID, installationID: name, osVersion: "17.4"), previousTokenRetention: 60)
        _ = try await installations.registerActivity(
            installation: record.id, appID: f.appID, activityID: "act-\(name)", event: .id(eventID), attributeType: "MatchAttributes",
            pushType: .token, pushToken: String(repeating: "a", count: 64))
    }

    /// The event's updates by disposition.
    static func dispositions(_ f: PipelineFixture, _ eventID: Int) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for row in try await f.pool.query(
            "SELECT disposition, count(*)::bigint AS n FROM updates WHERE event_id = \(eventID) GROUP BY 1")
        {
            counts[try row.decode(String.self, column: "disposition")] = try row.decode(Int.self, column: "n")
        }
        return counts
    }

    func route(_ f: PipelineFixture, _ eventID: Int) async throws -> (apsTimestamp: Int64, updateID: Int, priority: Int)? {
        try await f.pool.query("SELECT aps_timestamp, update_id, priority::integer AS priority FROM token_routes WHERE event_id = \(eventID)").first
            .map { (try $0.decode(column: "aps_timestamp"), try $0.decode(column: "update_id"), try $0.decode(column: "priority")) }
    }

    @Test func anEventWithoutAChannelSendsItsNewestStateToItsTokenActivitiesPacedAndThenItsEnd() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = TokenRouteRepository(pool: f.pool)
        let event = try await f.makeEvent(startsAt: Date().addingTimeInterval(3600))
        let first = try await f.postAccepted(event.id, ["home": 1, "away": 0], at: Date())
        #expect(try await repository.sendDue().isEmpty, "no token activity: the update waits for the channel")
        #expect(try await f.count("outbox") == 1)

        try await Self.tokenActivity(f, eventID: event.id)
        // The database's clock is injected (a minute ahead, so every row written below is due by then): the pacing
        // does not depend on how fast this test runs.
        let t0 = Date().addingTimeInterval(60)
        #expect(try await repository.sendDue(now: t0) == [event.id])
        let sent = try #require(try await route(f, event.id))
        #expect(sent.updateID == first.id && sent.apsTimestamp >= Int64(Date().timeIntervalSince1970) - 5 && sent.priority == 5)
        #expect(try await f.count("outbox") == 0)
        #expect(try await Self.dispositions(f, event.id) == ["broadcast": 1])

        // Paced: about one a second per event; past it, the newest goes and the older pending one is conflated.
        _ = try await f.postAccepted(event.id, ["home": 2, "away": 0], at: Date())
        let third = try await f.postAccepted(event.id, ["home": 3, "away": 0], at: Date())
        #expect(try await repository.sendDue(now: t0.addingTimeInterval(0.5)).isEmpty)
        #expect(try await repository.sendDue(now: t0.addingTimeInterval(2)) == [event.id])
        let paced = try #require(try await route(f, event.id))
        #expect(paced.updateID == third.id && paced.apsTimestamp > sent.apsTimestamp)
        #expect(try await Self.dispositions(f, event.id) == ["broadcast": 2, "conflated": 1])
        // Mirroring reads it as the event's newest state.
        let content = try #require(try await MirrorRepository(pool: f.pool).content(eventID: event.id))
        #expect(content.apsTimestamp == paced.apsTimestamp && content.contentState == ["home": 3, "away": 0] && content.action == .update)

        // The end: it is not closed unsent while a token activity can take it, and goes at once (no pacing).
        _ = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(action: .end, occurredAt: Date(), apiKeyID: f.apiKeyID, urgent: true),
            state: ["home": 3, "away": 1], idempotency: nil, response: PipelineFixture.answer)
        #expect(!(try await f.events.endWithoutChannel(eventID: event.id)))
        #expect(try await repository.sendDue(now: t0.addingTimeInterval(2.5)) == [event.id])
        let ended = try #require(try await route(f, event.id))
        #expect(ended.priority == 10 && ended.apsTimestamp > paced.apsTimestamp)
        #expect(try await f.events.get(id: event.id)?.status == .ended)
        #expect(try await Self.dispositions(f, event.id)["unsent"] == nil)
    }

    @Test func aChannelThatOpensLaterGoesOnAboveTheTokenRoutesTimestamp() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: Date().addingTimeInterval(3600))
        try await Self.tokenActivity(f, eventID: event.id)
        _ = try await f.postAccepted(event.id, ["home": 1, "away": 0], at: Date())
        // Sent on the route with a clock a minute ahead: its timestamp is ahead of the wall clock.
        let ahead = Date().addingTimeInterval(60)
        #expect(try await TokenRouteRepository(pool: f.pool).sendDue(now: ahead) == [event.id])
        let routed = try #require(try await route(f, event.id)).apsTimestamp
        #expect(routed == Int64(ahead.timeIntervalSince1970.rounded(.down)))

        // The channel opens: the route stops taking the event's work, and the channel's first broadcast goes above.
        _ = try await f.openChannel(eventID: event.id)
        _ = try await f.postAccepted(event.id, ["home": 2, "away": 0], at: Date())
        #expect(try await TokenRouteRepository(pool: f.pool).sendDue(now: Date().addingTimeInterval(120)).isEmpty)
        let claim = try #require(try await f.outbox.claim(instance: "one", limit: 1, lease: 30).first)
        #expect(try #require(claim.apsTimestamp) > routed)
        // And a start read now carries a timestamp no lower.
        #expect(try await f.pool.query("SELECT 1 FROM channels WHERE event_id = \(event.id) AND last_aps_timestamp IS NULL").count == 1)
    }

    @Test func anEventWithATokenActivityGoesLiveAtItsStartWithoutAChannel() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let onTokens = try await f.makeEvent("on-tokens", startsAt: Date().addingTimeInterval(-60))
        let bare = try await f.makeEvent("bare", startsAt: Date().addingTimeInterval(-60))
        try await Self.tokenActivity(f, eventID: onTokens.id)
        #expect(try await f.events.markStarted(limit: 10) == [onTokens.id])
        #expect(try await f.events.get(id: bare.id)?.status == .scheduled)
    }
}
