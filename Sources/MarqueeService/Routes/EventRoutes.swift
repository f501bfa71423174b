// Events: a match or a flight, with its attribute type, attributes, schedule and latest content-state.
// Attributes and the initial content-state are validated and stored in app form (what the device's
// JSONDecoder reads), so `contentState` in answers is exactly what a broadcast carries. The initial state
// holds from now, or from `startsAt` for an event that already started, so a feed replaying an event
// from its start is not superseded by the state the event was created with. A key bound to
// one app (api_keys.app_id) sees only that app's events; another app's event is "not found".
// Updates and ends are in EventUpdateRoutes.swift.
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres
import Synchronization

/// `POST /v1/events`, `GET /v1/events`, `GET /v1/events/{id}` (admin), and the update and end routes of
/// EventUpdateRoutes.swift (ingest). The state an app reads is in EventStateRoutes.swift.
public struct EventRoutes: APIRoutes {
    let events: EventRepository
    let channels: ChannelRepository
    let mirroring: MirrorRepository
    let ingest: IngestRepository
    let types: AttributeTypeCatalog
    /// Wakes dispatchers after an accepted update (nil: they find it by polling).
    let notifier: OutboxNotifier?
    /// The attribute type of each event seen (it never changes), so an ingest looks nothing up.
    let typeOfEvent = EventTypeCache()
    let apps: AppRepository
    /// How far ahead of this server's clock an `occurredAt` may be (`PipelineSettings.maxClockSkew`): a feed
    /// whose clock runs ahead would otherwise supersede every true update after it until its time comes.
    let maxClockSkew: TimeInterval
    /// The start fan-out's settings: the default audience lead (the 8-hour warning) and the restart on postponement.
    let startSettings: StartSettings
    /// `marquee_start_runs_total` (StartMetrics.runs): a postponement stops the event's open runs here.
    let startRuns: Counter?

    /// `pacing`: the dispatcher's one broadcast per channel per interval (seconds), so a queued update is
    /// due when its channel may broadcast (nil: at once; the dispatcher's claim paces it then).
    public init(
        pool: PostgresPool, types: AttributeTypeCatalog, notifier: OutboxNotifier? = nil, pacing: TimeInterval? = nil,
        maxClockSkew: TimeInterval = PipelineSettings().maxClockSkew, starts: StartSettings = StartSettings(),
        startRuns: Counter? = nil
    ) {
        startSettings = starts
        self.startRuns = startRuns
        events = EventRepository(pool: pool)
        channels = ChannelRepository(pool: pool)
        mirroring = MirrorRepository(pool: pool)
        ingest = IngestRepository(pool: pool, pacing: pacing)
        apps = AppRepository(pool: pool)
        self.types = types
        self.notifier = notifier
        self.maxClockSkew = maxClockSkew
    }

    public func register(in table: inout RouteTable) {
        table.add("POST", "/v1/events", access: .scope(.admin), takesBody: true) { [self] request in try await create(request) }
        table.add("GET", "/v1/events", access: .scope(.admin)) { [self] request in try await list(request) }
        table.add("GET", "/v1/events/{id}", access: .scope(.admin)) { [self] request in try await detail(request) }
        registerUpdates(in: &table)
        registerChanges(in: &table)
    }

    private static let createFields: Set<String> = [
        "app", "externalId", "kind", "attributeType", "attributes", "contentState", "startsAt", "endsAt", "storagePolicy", "topics",
        "audienceLead", "startAlert", "freshness",
    ]

    private func create(_ request: APIRequest) async throws -> HTTPResponse {
        let body = try request.bodyObject()
        try body.allowOnly(Self.createFields)
        let appID = Int(try body.int("app", in: 1...Int64.max))
        if let bound = request.key?.appID, bound != appID {
            throw APIError.validation("this API key is limited to app \(bound)", field: "app")
        }
        let externalID = try body.string("externalId")
        guard (1...200).contains(externalID.count) else { throw APIError.validation("1 to 200 characters", field: "externalId") }
        let kind: EventKind = try body.choice("kind")
        let typeName = try body.string("attributeType")
        guard let stored = try await types.find(name: typeName, appID: appID) else {
            if try await apps.find(id: appID) == nil { throw APIError.validation("no app with id \(appID)", field: "app") }
            throw APIError.validation(
                "app \(appID) has no attribute type '\(typeName)'; register it with POST /v1/attribute-types",
                field: "attributeType")
        }
        var rawAttributes = body.optional("attributes") ?? [:]
        if let key = stored.type.eventKey, case .object(var object) = rawAttributes {
            // The event key names the event to an activity started by a push: its external id, filled or checked.
            switch object[key] {
            case nil, .some(.null): object[key] = .string(externalID)
            case .some(.string(externalID)): break
            case .some:
                throw APIError.validation(
                    "the event key attribute holds the event's externalId '\(externalID)'; omit it or send that",
                    field: "attributes.\(key)")
            }
            rawAttributes = .object(object)
        }
        let attributes = try Self.validated { () throws(ValidationError) in try stored.type.encodeAttributes(rawAttributes) }
        let rawState = try body.required("contentState")
        let state = try Self.validated { () throws(ValidationError) in try stored.type.encodeContentState(rawState) }
        try Self.checkSize(.update, state: state)
        let startsAt = try body.date("startsAt")
        let endsAt = try body.optionalDate("endsAt")
        if let endsAt, endsAt <= startsAt { throw APIError.validation("must be after startsAt", field: "endsAt") }
        let storagePolicy: MessageStoragePolicy = try body.choice("storagePolicy", default: .mostRecent)
        let topics = try Self.topics(body)
        let audienceLead = try body.optional("audienceLead").map { _ in Int(try body.int("audienceLead", in: 0...604_800)) }
        var startAlert: LiveActivityAlert?
        if let alert = body.optional("startAlert") {
            do {
                startAlert = try LiveActivityAlert(json: alert, at: ["startAlert"])
            } catch {
                throw APIError.validation(error.description, field: "\(error.path)")
            }
        }
        let freshness = try body.optional("freshness").flatMap(Self.freshness)
        try Self.checkStartSize(typeName: stored.type.name, attributes: attributes, state: state, alert: startAlert)
        do {
            let event = try await events.create(
                NewEvent(
                    appID: appID, externalID: externalID, kind: kind, attributeTypeID: stored.id, attributes: attributes,
                    storagePolicy: storagePolicy, startsAt: startsAt, endsAt: endsAt, topics: topics, initialState: state,
                    initialStateAt: startsAt < Date() ? startsAt : nil, audienceLead: audienceLead, startAlert: startAlert?.json,
                    freshness: freshness))
            typeOfEvent.remember(
                eventID: event.id, typeID: stored.id,
                startOverhead: .some(Self.startOverhead(typeName: stored.type.name, attributes: attributes, alert: startAlert)))
            var answer = Self.json(event, typeName: stored.type.name).objectValue ?? [:]
            answer["warnings"] = Self.json(
                EventWarning.warnings(
                    startsAt: startsAt, endsAt: endsAt, lead: audienceLead.map(TimeInterval.init) ?? startSettings.audienceLead))
            return .json(.object(answer), status: 201)
        } catch PipelineError.externalIDTaken(let app, let external) {
            throw APIError.conflict(
                "app \(app) already has an event with external id '\(external)'; GET /v1/events?app=\(app) finds it",
                field: "externalId")
        } catch PipelineError.invalidReference(let what) {
            throw APIError.validation("invalid reference: \(what)", field: "app")
        }
    }

    private static let listParameters: Set<String> = ["app", "status", "kind", "topic", "startsAfter", "startsBefore", "limit", "cursor"]

    private func list(_ request: APIRequest) async throws -> HTTPResponse {
        let query = request.query
        if let unknown = query.names.first(where: { !Self.listParameters.contains($0) }) {
            throw APIError.validation(
                "unknown query parameter; allowed: \(Self.listParameters.sorted().joined(separator: ", "))",
                field: unknown)
        }
        var filter = EventFilter(
            status: try query.choice("status"), kind: try query.choice("kind"), topic: query.text("topic"),
            startsAfter: try query.date("startsAfter"), startsBefore: try query.date("startsBefore"))
        filter.appID = try query.integer("app")
        if let bound = request.key?.appID {
            if let app = filter.appID, app != bound { throw APIError.validation("this API key is limited to app \(bound)", field: "app") }
            filter.appID = bound
        }
        let limit = try query.integer("limit", in: 1...500) ?? 100
        let page: EventPage
        do {
            page = try await events.list(filter, limit: limit, cursor: query.text("cursor"))
        } catch PipelineError.invalidCursor {
            throw APIError.validation("not a cursor this service issued; list again without one", field: "cursor")
        }
        var listed: [JSONValue] = []
        listed.reserveCapacity(page.events.count)
        for event in page.events { listed.append(Self.json(event, typeName: try await typeName(event))) }
        return .json(["events": .array(listed), "nextCursor": page.nextCursor.map(JSONValue.string) ?? .null])
    }

    private func detail(_ request: APIRequest) async throws -> HTTPResponse {
        let event = try await find(request)
        async let counts = events.counts(eventID: event.id)
        async let eventChannels = channels.channels(eventID: event.id)
        async let mirrored = mirroring.progress(eventID: event.id)
        let channel = try await eventChannels.first
        var json = Self.json(event, typeName: try await typeName(event)).objectValue ?? JSONObject()
        json["channel"] = channel.map(Self.json) ?? .null
        json["counts"] = Self.json(try await counts)
        // The token activities (devices that cannot join the channel) and how many are behind its newest broadcast.
        let progress = try await mirrored
        json["mirroring"] = [
            "activities": .int(Int64(progress.activities)), "behind": .int(Int64(progress.behind)),
            "lastLagSeconds": progress.lastLag.map { .double(($0 * 1000).rounded() / 1000) } ?? .null,
        ]
        return .json(.object(json))
    }

    // MARK: Shared with the update routes

    /// The `{id}` path parameter as an event id.
    static func eventID(_ request: APIRequest) throws(APIError) -> Int {
        guard let id = Int(request.parameter("id")), id > 0 else { throw APIError.validation("an event id is a positive integer", field: "id") }
        return id
    }

    /// The event of the path, within the key's app; 404 otherwise.
    private func find(_ request: APIRequest) async throws -> EventRecord {
        let id = try Self.eventID(request)
        guard let event = try await events.get(id: id, appID: request.key?.appID) else { throw APIError.notFound("event \(id)") }
        typeOfEvent.remember(eventID: event.id, typeID: event.attributeTypeID)
        return event
    }

    private func typeName(_ event: EventRecord) async throws -> String {
        try await types.find(id: event.attributeTypeID)?.type.name ?? ""
    }

    /// Runs schema validation, turning its error into a 422 naming the field's path.
    static func validated(_ body: () throws(ValidationError) -> JSONValue) throws(APIError) -> JSONValue {
        do {
            return try body()
        } catch {
            throw APIError.validation(error.description, field: error.path.isRoot ? nil : "\(error.path)")
        }
    }

    /// Refuses an update or end over the ingest limit (4,096 bytes) with 422 `payload_too_large`, counting the
    /// widest stale date, relevance score and dismissal date the send may add (`SendTimeFields.widestAtSend`).
    static func checkSize(
        _ action: UpdateAction, state: JSONValue, explicit: SendTimeFields = SendTimeFields(), alert: LiveActivityAlert? = nil
    ) throws(APIError) {
        let payload = LiveActivityPayload(
            action: action, timestamp: unixSeconds(Date()), contentState: state, fields: explicit.widestAtSend(for: action), alert: alert)
        do {
            _ = try payload.body(within: .ingest)
        } catch {
            throw APIError(
                status: 422, code: "payload_too_large", message: "the update's APNs \(error.description)",
                field: "contentState")
        }
    }

    /// The event's push-to-start as wide as it can go out: on the longest `input-push-channel` a channel id
    /// takes, with the widest stale date and relevance score the send may add.
    static func widestStart(typeName: String, attributes: JSONValue, state: JSONValue, alert: LiveActivityAlert) -> LiveActivityPayload {
        let widest = SendTimeFields().widestAtSend(for: .update)
        return .start(
            timestamp: unixSeconds(Date()), attributesType: typeName, attributes: attributes, contentState: state, alert: alert,
            subscription: .channel(String(repeating: "A", count: 64)), staleDate: widest.staleDate, relevanceScore: widest.relevanceScore)
    }

    /// The bytes an event's push-to-start adds to its content-state's JSON, or nil without a start alert: an
    /// update's state plus this must fit a device push while starts may go out.
    static func startOverhead(typeName: String, attributes: JSONValue, alert: LiveActivityAlert?) -> Int? {
        guard let alert else { return nil }
        return widestStart(typeName: typeName, attributes: attributes, state: [:], alert: alert).bytes.count - JSONValue.object([:]).jsonBytes.count
    }

    /// Refuses an event whose push-to-start would exceed a device push's 4,096 bytes, with 422
    /// `start_payload_too_large`: the start carries the attributes, the state and the alert together.
    static func checkStartSize(typeName: String, attributes: JSONValue, state: JSONValue, alert: LiveActivityAlert?) throws(APIError) {
        let payload = widestStart(
            typeName: typeName, attributes: attributes, state: state, alert: alert ?? LiveActivityAlert(title: .plain(""), body: .plain("")))
        do {
            _ = try payload.body(within: .device)
        } catch {
            throw APIError(
                status: 422, code: "start_payload_too_large",
                message: "the event's push-to-start (attributes, content-state and start alert) \(error.description)", field: "attributes")
        }
    }

    /// An event's `freshness` members (docs/api.md, "Freshness policies"); `null`: none of its own.
    static func freshness(_ value: JSONValue) throws(APIError) -> FreshnessSettings? {
        guard !value.isNull else { return nil }
        do {
            return try FreshnessSettings(json: value, path: "freshness.")
        } catch {
            throw .validation(error)
        }
    }

    static func unixSeconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }

    static func topics(_ body: JSONFields) throws(APIError) -> [String] {
        guard let value = body.optional("topics") else { return [] }
        guard case .array(let items) = value else {
            throw APIError.validation("expected an array of strings, found \(value.typeName)", field: "topics")
        }
        var topics: [String] = []
        for (index, item) in items.enumerated() {
            guard let topic = item.stringValue, (1...200).contains(topic.count) else {
                throw APIError.validation("a topic is a string of 1 to 200 characters", field: "topics[\(index)]")
            }
            if !topics.contains(topic) { topics.append(topic) }
        }
        return topics
    }

    // MARK: JSON views

    static func json(_ date: Date?) -> JSONValue { date.map { .string($0.ISO8601Format()) } ?? .null }

    /// The API's view of an event (`Event` in the OpenAPI document).
    public static func json(_ event: EventRecord, typeName: String) -> JSONValue {
        [
            "id": .int(Int64(event.id)),
            "app": .int(Int64(event.appID)),
            "externalId": .string(event.externalID),
            "kind": .string(event.kind.rawValue),
            "attributeType": .string(typeName),
            "attributes": event.attributes,
            "storagePolicy": .string(event.storagePolicy.rawValue),
            "status": .string(event.status.rawValue),
            "channelLost": .bool(event.channelLost),
            "startsAt": json(event.startsAt),
            "endsAt": json(event.endsAt),
            "topics": .array(event.topics.map(JSONValue.string)),
            "audienceLead": event.audienceLead.map { .int(Int64($0)) } ?? .null,
            "startAlert": event.startAlert ?? .null,
            "freshness": event.freshness?.json ?? .null,
            "contentState": event.latestState ?? .null,
            "contentStateAt": json(event.latestStateAt),
            "createdAt": json(event.createdAt),
            "updatedAt": json(event.updatedAt),
        ]
    }

    /// The API's view of a channel (`Channel` in the OpenAPI document).
    public static func json(_ channel: ChannelRecord) -> JSONValue {
        [
            "id": .int(Int64(channel.id)),
            "app": .int(Int64(channel.appID)),
            "event": channel.eventID.map { .int(Int64($0)) } ?? .null,
            "apnsChannelId": channel.apnsChannelID.map(JSONValue.string) ?? .null,
            "storagePolicy": .string(channel.storagePolicy.rawValue),
            "state": .string(channel.state.rawValue),
            "attempts": .int(Int64(channel.attempts)),
            "nextAttemptAt": json(channel.nextAttemptAt),
            "requestedAt": json(channel.requestedAt),
            "openedAt": json(channel.openedAt),
            "endedAt": json(channel.endedAt),
            "deletedAt": json(channel.deletedAt),
            "firstSeenAt": json(channel.firstSeenAt),
            "lastApsTimestamp": channel.lastApsTimestamp.map(JSONValue.int) ?? .null,
            "lastError": channel.lastError.map(JSONValue.string) ?? .null,
            "lastErrorAt": json(channel.lastErrorAt),
            "createdAt": json(channel.createdAt),
        ]
    }

    /// What became of an event's updates (`EventCounts` in the OpenAPI document).
    public static func json(_ counts: EventCounts) -> JSONValue {
        [
            "pending": .int(Int64(counts.pending)),
            "broadcast": .int(Int64(counts.broadcast)),
            "conflated": .int(Int64(counts.conflated)),
            "superseded": .int(Int64(counts.superseded)),
            "unsent": .int(Int64(counts.unsent)),
            "deliveries": .int(Int64(counts.deliveries)),
            "failedDeliveries": .int(Int64(counts.failedDeliveries)),
        ]
    }
}

/// What this process knows of each event it saw: its attribute type id (an event's type never changes) and,
/// once an update needed it, the size its push-to-start adds to a content-state.
final class EventTypeCache: Sendable {
    struct Shape: Sendable {
        var typeID: Int
        /// `.some(nil)`: the event has no start alert, so no automatic start; nil: not read yet.
        var startOverhead: Int??
    }

    private let shapes = Mutex<[Int: Shape]>([:])
    private static let capacity = 100_000

    func typeID(eventID: Int) -> Int? { shapes.withLock { $0[eventID]?.typeID } }

    /// The start overhead of the event, if read (see `Shape.startOverhead`).
    func startOverhead(eventID: Int) -> Int?? { shapes.withLock { $0[eventID]?.startOverhead } }

    /// Forgets the start overhead of the event (its start alert changed): the next update reads it again.
    func forgetStartOverhead(eventID: Int) {
        shapes.withLock { cache in cache[eventID]?.startOverhead = nil }
    }

    func remember(eventID: Int, typeID: Int, startOverhead: Int?? = nil) {
        shapes.withLock { cache in
            if cache.count >= Self.capacity { cache.removeAll() }
            let known = cache[eventID]?.startOverhead
            cache[eventID] = Shape(typeID: typeID, startOverhead: startOverhead ?? known)
        }
    }
}
