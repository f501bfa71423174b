import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres
import Testing

/// The operators' channel routes over a real database, with the recording APNs of the pipeline tests.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct ChannelRoutesTests {
    struct Harness {
        let fixture: PipelineServiceFixture
        let api: APIServer
        let key: String

        static func make() async throws -> Harness {
            let fixture = try await PipelineServiceFixture.make()
            let registry = MetricsRegistry()
            let keys = APIKeyVerifier(lookup: APIKeyRepository(pool: fixture.pool))
            let scheduler = fixture.scheduler()
            let api = APIServer(
                routes: [ChannelRoutes(pool: fixture.pool, scheduler: scheduler), StatusRoutes(pool: fixture.pool, scheduler: scheduler)], keys: keys,
                metrics: registry, logger: Logger { _ in })
            let key = NewAPIKey.generate()
            _ = try await APIKeyRepository(pool: fixture.pool).create(
                keyID: key.id, name: "ops", scopes: ["admin"], salt: key.salt,
                hash: key.hash)
            return Harness(fixture: fixture, api: api, key: key.text)
        }

        func send(_ method: String, _ path: String, body: String? = nil) async -> (status: Int, json: JSONValue) {
            var headers: HTTPHeaders = ["authorization": "Bearer \(key)"]
            if body != nil { headers.add("content-type", "application/json") }
            let response = await api.respond(to: HTTPRequest(method: method, path: path, headers: headers, body: Array((body ?? "").utf8)))
            return (response.status, (try? JSONValue(parsing: response.body)) ?? .null)
        }

        func state(_ channelID: Int) async throws -> String? {
            try await fixture.channels.get(id: channelID)?.state.rawValue
        }
    }

    @Test func listsAndShowsChannelsWithTheirDeliveries() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let event = try await harness.fixture.makeEvent()
        let channel = try await harness.fixture.openChannel(eventID: event.id)
        _ = try await harness.fixture.makeEvent()

        let listed = await harness.send("GET", "/v1/channels?state=open&app=\(harness.fixture.appID)")
        #expect(listed.status == 200)
        #expect(listed.json["channels"]?.arrayValue?.map { $0["id"]?.intValue } == [Int64(channel.id)])
        #expect(listed.json["channels"]?.arrayValue?.first?["apnsChannelId"]?.stringValue == channel.apnsChannelID)
        // Query parameters: a bad value is a 422 naming it; an empty one counts as absent.
        for (query, field) in [("state=closed", "state"), ("limit=0", "limit"), ("limit=501", "limit"), ("app=x", "app"), ("event=-1", "event")] {
            let refused = await harness.send("GET", "/v1/channels?\(query)")
            #expect(refused.status == 422 && refused.json["error"]?["field"]?.stringValue == field, "\(query)")
        }
        #expect(await harness.send("GET", "/v1/channels?limit=&state=").json["channels"]?.arrayValue?.count == 1)
        let forced = await harness.send("DELETE", "/v1/channels/\(channel.id)?force=maybe")
        #expect(forced.status == 422 && forced.json["error"]?["field"]?.stringValue == "force")
        let malformed = await harness.send("POST", "/v1/events/abc/channel/recreate")
        #expect(malformed.status == 422 && malformed.json["error"]?["field"]?.stringValue == "id")

        let shown = await harness.send("GET", "/v1/channels/\(channel.id)")
        #expect(shown.status == 200 && shown.json["event"]?.intValue == Int64(event.id))
        #expect(shown.json["deliveries"]?.arrayValue != nil)
        #expect(await harness.send("GET", "/v1/channels/999999").status == 404)
        #expect(await harness.send("GET", "/v1/channels/abc").status == 404)
    }

    @Test func deletingAnOpenChannelNeedsForce() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let event = try await harness.fixture.makeEvent()
        let channel = try await harness.fixture.openChannel(eventID: event.id)

        let refused = await harness.send("DELETE", "/v1/channels/\(channel.id)")
        #expect(refused.status == 409, "\(refused.json)")
        #expect(refused.json["error"]?["message"]?.stringValue?.contains("force") == true)
        #expect(try await harness.state(channel.id) == "open")
        #expect(harness.fixture.apns.state.withLock { $0.deletes }.isEmpty)
        #expect(await harness.send("DELETE", "/v1/channels/\(channel.id)?force=maybe").status == 422)

        let forced = await harness.send("DELETE", "/v1/channels/\(channel.id)?force=true")
        #expect(forced.status == 202 && forced.json["state"] == "deleted", "\(forced.json)")
        #expect(harness.fixture.apns.state.withLock { $0.deletes } == [channel.apnsChannelID!])
        #expect(!harness.fixture.apns.listed.contains(channel.apnsChannelID!))
    }

    @Test func anUnknownChannelIsDeletedOnAnOperatorsWord() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let orphan = harness.fixture.apns.makeChannel()
        #expect(await harness.send("POST", "/v1/channels/reconcile", body: "{}").status == 200)
        let unknown = try #require(try await harness.fixture.channels.get(appID: harness.fixture.appID, apnsChannelID: orphan))
        #expect(unknown.state == .unknown)

        let deleted = await harness.send("DELETE", "/v1/channels/\(unknown.id)")
        #expect(deleted.status == 202 && deleted.json["state"] == "deleted", "\(deleted.json)")
        #expect(harness.fixture.apns.state.withLock { $0.deletes } == [orphan])
        #expect(!harness.fixture.apns.listed.contains(orphan))
    }

    @Test func recreateActsOnlyOnALostChannel() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let event = try await harness.fixture.makeEvent()
        let channel = try await harness.fixture.openChannel(eventID: event.id)

        let refused = await harness.send("POST", "/v1/events/\(event.id)/channel/recreate")
        #expect(refused.status == 409 && harness.fixture.apns.state.withLock { $0.creates } == 0)

        // APNs forgets the channel: the event is flagged and broadcasting stops.
        var lifecycle = channel.lifecycle!
        let before = lifecycle
        _ = try lifecycle.channelNotRegistered()
        try await harness.fixture.channels.transition(
            channelID: channel.id, from: before, to: lifecycle, error: "ChannelNotRegistered", broadcasts: .stop)
        #expect(try await harness.fixture.events.get(id: event.id)?.channelLost == true)
        #expect(await harness.send("GET", "/v1/channels/\(channel.id)").json["lastError"] == "ChannelNotRegistered")

        let recreated = await harness.send("POST", "/v1/events/\(event.id)/channel/recreate")
        #expect(recreated.status == 202 && recreated.json["state"] == "open", "\(recreated.json)")
        // The new channel starts clean: the lost one's error is not shown on it (issue 48).
        #expect(recreated.json["lastError"] == .null && recreated.json["lastErrorAt"] == .null, "\(recreated.json)")
        let listed = await harness.send("GET", "/v1/channels?event=\(event.id)").json["channels"]?.arrayValue ?? []
        #expect(listed.count == 1 && listed.allSatisfy { $0["lastError"] == .null }, "\(listed)")
        #expect(recreated.json["apnsChannelId"]?.stringValue != channel.apnsChannelID)
        #expect(harness.fixture.apns.state.withLock { $0.creates } == 1)
        #expect(try await harness.fixture.events.get(id: event.id)?.channelLost == false)
        #expect(await harness.send("POST", "/v1/events/999999/channel/recreate").status == 404)
    }

    @Test func reconcileReportsUnknownChannelsAndDeletesThemOnlyWhenAsked() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let orphan = harness.fixture.apns.makeChannel()

        let preview = await harness.send("POST", "/v1/channels/reconcile", body: #"{"dryRun": true}"#)
        #expect(preview.status == 200)
        #expect(preview.json["apps"]?.arrayValue?.first?["unrecorded"] == [.string(orphan)])
        #expect(try await harness.fixture.channels.get(appID: harness.fixture.appID, apnsChannelID: orphan) == nil)

        let reported = await harness.send("POST", "/v1/channels/reconcile", body: "{}")
        #expect(reported.status == 200 && Self.app(reported.json)?["unknown"] == [.string(orphan)], "\(reported.json)")
        #expect(Self.app(reported.json)?["unrecorded"] == [.string(orphan)] && reported.json["sweep"]?["unknown"] == [.string(orphan)])
        #expect(harness.fixture.apns.listed.contains(orphan))

        // The configured grace (24 h) still protects a channel first seen just now.
        let early = await harness.send("POST", "/v1/channels/reconcile", body: #"{"deleteUnknown": true}"#)
        #expect(early.status == 200 && Self.app(early.json)?["deleted"] == [] && Self.app(early.json)?["unrecorded"] == [])
        try await harness.fixture.pool.execute("UPDATE channels SET first_seen_at = first_seen_at - interval '2 days'")
        let deleted = await harness.send("POST", "/v1/channels/reconcile", body: #"{"deleteUnknown": true}"#)
        #expect(Self.app(deleted.json)?["deleted"] == [.string(orphan)], "\(deleted.json)")
        #expect(!harness.fixture.apns.listed.contains(orphan))
        #expect(await harness.send("POST", "/v1/channels/reconcile", body: #"{"dryRun": "yes"}"#).status == 422)
        #expect(await harness.send("POST", "/v1/channels/reconcile", body: #"{"force": true}"#).status == 422)
    }

    /// The one app's entry of a reconcile answer.
    static func app(_ json: JSONValue) -> JSONValue? { json["apps"]?.arrayValue?.first }

    @Test func sweepAndStatus() async throws {
        let harness = try await Harness.make()
        defer { harness.fixture.pool.close() }
        let event = try await harness.fixture.makeEvent()

        let swept = await harness.send("POST", "/v1/channels/sweep")
        #expect(swept.status == 200 && swept.json["opened"]?.arrayValue?.count == 1, "\(swept.json)")
        #expect(try await harness.fixture.channels.channels(eventID: event.id).first?.state == .lifecycle(.open))

        // While another instance leads, a sweep from here is refused.
        let other = try await LeaderLeaseRepository(pool: harness.fixture.pool).acquire(
            name: "channel-scheduler", holder: "elsewhere", duration: 600,
            now: harness.fixture.clock.now)
        #expect(other != nil)
        let busy = await harness.send("POST", "/v1/channels/sweep")
        #expect(busy.status == 409, "\(busy.json)")
        #expect(busy.json["error"]?["message"]?.stringValue?.contains("elsewhere") == true, "\(busy.json)")

        let status = await harness.send("GET", "/v1/status")
        #expect(status.status == 200)
        let app = status.json["apps"]?.arrayValue?.first
        #expect(app?["inUse"] == 1 && app?["quota"] == 10_000 && app?["channelsByState"]?["open"] == 1, "\(status.json)")
        #expect(status.json["outboxBacklog"]?.intValue != nil && status.json["lostChannels"] == [])
    }
}
