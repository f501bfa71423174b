// What an app's backend asks about an event when the app comes to the foreground (scope `tokens`): its
// current state and its channel, by Marquee's id or by the app's external id, with a strong ETag so an
// unchanged answer costs a 304; and a channel on request, for an app that starts a Live Activity with
// `pushType: .channel(id)` itself (the iOS 26 scheduled start, docs/api.md#a-channel-on-request). The
// request never waits on APNs: creates stay the scheduler leader's work, and the request wakes it.
import Crypto
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `GET /v1/events/{id}/state`, `GET /v1/apps/{app}/events/by-external-id/{externalId}/state` and
/// `PUT /v1/events/{id}/channel`.
public struct EventStateRoutes: APIRoutes {
    let events: EventRepository
    let channels: ChannelRepository
    let scheduler: ChannelScheduler?
    let settings: PipelineSettings

    /// How long a client should wait before asking again for a channel being created.
    static let retryAfterSeconds = 2

    public init(pool: PostgresPool, scheduler: ChannelScheduler?, settings: PipelineSettings) {
        events = EventRepository(pool: pool)
        channels = ChannelRepository(pool: pool)
        self.scheduler = scheduler
        self.settings = settings
    }

    public func register(in table: inout RouteTable) {
        table.add("GET", "/v1/events/{id}/state", access: .scope(.tokens)) { [self] request in
            try await state(request, of: try await event(request))
        }
        table.add("GET", "/v1/apps/{app}/events/by-external-id/{externalId}/state", access: .scope(.tokens)) { [self] request in
            guard let app = Int(request.parameter("app")), app > 0 else { throw APIError.validation("an app id is a positive integer", field: "app") }
            let external = request.parameter("externalId")
            guard (1...200).contains(external.count) else { throw APIError.validation("1 to 200 characters", field: "externalId") }
            guard request.key?.appID.map({ $0 == app }) ?? true, let event = try await events.get(appID: app, externalID: external) else {
                throw APIError.notFound("event with external id '\(external)' in app \(app)")
            }
            return try await state(request, of: event)
        }
        table.add("PUT", "/v1/events/{id}/channel", access: .scope(.tokens)) { [self] request in
            try await requestChannel(for: try await event(request))
        }
    }

    /// The event of the path, within the key's app; 404 otherwise.
    private func event(_ request: APIRequest) async throws -> EventRecord {
        let id = try EventRoutes.eventID(request)
        guard let event = try await events.get(id: id, appID: request.key?.appID) else { throw APIError.notFound("event \(id)") }
        return event
    }

    // MARK: State

    private func state(_ request: APIRequest, of event: EventRecord) async throws -> HTTPResponse {
        let channel = try await channels.channels(eventID: event.id).first
        let body: JSONValue = [
            "event": .int(Int64(event.id)),
            "externalId": .string(event.externalID),
            "contentState": event.latestState ?? .null,
            "timestamp": event.latestStateAt.map { .int(EventRoutes.unixSeconds($0)) } ?? .null,
            "updatedAt": EventRoutes.json(event.latestStateAt),
            "status": .string(event.status.rawValue),
            "apnsChannelId": Self.usableChannelID(channel).map(JSONValue.string) ?? .null,
            "channelState": channel.map { .string($0.state.rawValue) } ?? .null,
            "channelLost": .bool(event.channelLost),
        ]
        let bytes = body.jsonBytes
        let etag = "\"" + Hex.encode(Array(SHA256.hash(bytes).prefix(16))) + "\""
        var headers: HTTPHeaders = ["etag": etag, "cache-control": "private, no-cache"]
        if let match = request.http.headers["if-none-match"], Self.matches(match, etag: etag) {
            return HTTPResponse(status: 304, headers: headers)
        }
        headers.add("content-type", "application/json")
        return HTTPResponse(status: 200, headers: headers, body: bytes)
    }

    /// Apple's id of a channel that carries broadcasts (or is about to be ended), the one `.channel(…)` takes.
    static func usableChannelID(_ channel: ChannelRecord?) -> String? {
        guard let channel, case .lifecycle(let state) = channel.state, ChannelLifecycle.broadcastingStates.contains(state) else { return nil }
        return channel.apnsChannelID
    }

    /// `If-None-Match`: `*` or a list of tags, weak ones compared weakly (RFC 9110 13.1.2).
    static func matches(_ header: String, etag: String) -> Bool {
        header.split(separator: ",").contains { candidate in
            var tag = candidate.trimmingCharacters(in: .whitespaces)
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            return tag == "*" || tag == etag
        }
    }

    // MARK: A channel on request

    private func requestChannel(for event: EventRecord) async throws -> HTTPResponse {
        guard !EventLifecycle.endingStates.contains(event.status) && !EventLifecycle.finalStates.contains(event.status) else {
            throw APIError(
                status: 409, code: "event_closed", message: "event \(event.id) is \(event.status.rawValue); it gets no channel",
                field: nil)
        }
        if event.channelLost {
            throw APIError(
                status: 409, code: "channel_lost",
                message: "APNs no longer knows event \(event.id)'s channel; an operator must recreate it", field: nil)
        }
        let current = try await channels.channels(eventID: event.id).first {
            if case .lifecycle(let state) = $0.state { return ChannelLifecycle.currentStates.contains(state) }
            return false
        }
        if let current { return answer(for: current) }
        let now = Date()
        let leadTime = settings.channelLeadTime
        let window = min(settings.audience.channelRequestWindow ?? leadTime, 86400)
        let ahead = event.startsAt.timeIntervalSince(now)
        guard ahead <= window else {
            throw APIError.validation(
                "event \(event.id) starts in \(Int(ahead)) s, further ahead than the channel request window of \(Int(window)) s; "
                    + "start the activity with pushType .token, or ask again later", field: "startsAt")
        }
        let used = try await channels.quotaCount(appID: event.appID)
        guard used < settings.channelQuota else {
            throw APIError(
                status: 409, code: "channel_quota",
                message: "app \(event.appID) holds \(used) of its \(settings.channelQuota) channels (--channel-quota)", field: nil)
        }
        if ahead > leadTime {
            let allowed = Int((Double(settings.channelQuota) * settings.audience.channelRequestShare).rounded(.down))
            let early = try await channels.quotaCount(appID: event.appID, eventsStartingAfter: now.addingTimeInterval(leadTime))
            guard early < allowed else {
                throw APIError(
                    status: 409, code: "channel_quota",
                    message: "channels opened before the lead time hold \(early) of the \(allowed) slots --channel-request-share allows",
                    field: nil)
            }
        }
        let planned = try await channels.createPlanned(eventID: event.id)
        scheduler?.wake()
        return answer(for: planned)
    }

    /// 200 with Apple's id for an open channel, 202 with `Retry-After` while it is being made, 409 when it cannot be.
    private func answer(for channel: ChannelRecord) -> HTTPResponse {
        if let id = Self.usableChannelID(channel) {
            return .json(["apnsChannelId": .string(id), "channelState": .string(channel.state.rawValue)])
        }
        if case .lifecycle(.createFailed) = channel.state {
            return APIError(
                status: 409, code: "channel_failed",
                message: "APNs refused the event's channel (\(channel.lastError ?? "no reason recorded")); an operator must act",
                field: nil
            ).response
        }
        var response = HTTPResponse.json(["apnsChannelId": .null, "channelState": .string(channel.state.rawValue)], status: 202)
        response.headers.add("retry-after", "\(Self.retryAfterSeconds)")
        return response
    }
}
