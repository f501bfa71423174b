// The values of events as the store reads and writes them: a new event, its record, filters and pages, counts and
// its latest state.
import Foundation
import MarqueeCore
import Postgres

/// A new event as `POST /v1/events` describes it, already validated against its schema.
public struct NewEvent: Sendable, Equatable {
    public var appID: Int
    public var externalID: String
    public var kind: EventKind
    public var attributeTypeID: Int
    public var attributes: JSONValue
    public var storagePolicy: MessageStoragePolicy
    public var startsAt: Date
    public var endsAt: Date?
    public var topics: [String]
    /// The initial content-state (becomes the latest state, with no update row); nil: none yet.
    public var initialState: JSONValue?
    /// When the initial state holds from; nil: the database's now.
    public var initialStateAt: Date?
    /// Seconds before `startsAt` at which the audience is to be started; nil: the start fan-out's default.
    public var audienceLead: Int?
    /// The alert of the event's push-to-start, as `LiveActivityAlert.json` writes it; nil: none.
    public var startAlert: JSONValue?
    /// The event's own freshness policy members, over its attribute type's; nil: none.
    public var freshness: FreshnessSettings?

    public init(
        appID: Int, externalID: String, kind: EventKind, attributeTypeID: Int, attributes: JSONValue = [:],
        storagePolicy: MessageStoragePolicy = .mostRecent, startsAt: Date, endsAt: Date? = nil,
        topics: [String] = [], initialState: JSONValue? = nil, initialStateAt: Date? = nil, audienceLead: Int? = nil,
        startAlert: JSONValue? = nil, freshness: FreshnessSettings? = nil
    ) {
        self.appID = appID
        self.externalID = externalID
        self.kind = kind
        self.attributeTypeID = attributeTypeID
        self.attributes = attributes
        self.storagePolicy = storagePolicy
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.topics = topics
        self.initialState = initialState
        self.initialStateAt = initialStateAt
        self.audienceLead = audienceLead
        self.startAlert = startAlert
        self.freshness = freshness
    }
}

/// One row of `events`.
public struct EventRecord: Sendable, Equatable {
    public var id: Int
    public var appID: Int
    public var externalID: String
    public var kind: EventKind
    public var attributeTypeID: Int
    public var attributes: JSONValue
    public var storagePolicy: MessageStoragePolicy
    public var status: EventStatus
    /// APNs no longer knows the event's channel: an operator must act.
    public var channelLost: Bool
    public var startsAt: Date
    public var endsAt: Date?
    public var topics: [String]
    public var latestState: JSONValue?
    public var latestStateAt: Date?
    public var latestUpdateID: Int?
    public var createdAt: Date
    public var updatedAt: Date
    /// Seconds before `startsAt` at which the audience is to be started; nil: the start fan-out's default.
    public var audienceLead: Int?
    /// The alert of the event's push-to-start; nil: none.
    public var startAlert: JSONValue?
    /// The event's own freshness policy members; nil: its attribute type's (or the defaults).
    public var freshness: FreshnessSettings?

    static let columns = """
        id, app_id, external_id, kind, attribute_type_id, attributes, storage_policy, status, channel_lost, \
        starts_at, ends_at, topics, latest_state, latest_state_at, latest_update_id, created_at, updated_at, \
        audience_lead, start_alert, freshness
        """

    init(row: PostgresRow) throws {
        id = try row.decode(Int.self, column: "id")
        appID = try row.decode(Int.self, column: "app_id")
        externalID = try row.decode(String.self, column: "external_id")
        kind = try row.decode(EventKind.self, column: "kind")
        attributeTypeID = try row.decode(Int.self, column: "attribute_type_id")
        attributes = try row.decodeJSON(column: "attributes") ?? [:]
        storagePolicy = try row.decodeRaw(MessageStoragePolicy.self, column: "storage_policy")
        status = try row.decode(EventStatus.self, column: "status")
        channelLost = try row.decode(Bool.self, column: "channel_lost")
        startsAt = try row.decode(Date.self, column: "starts_at")
        endsAt = try row.decode(Date?.self, column: "ends_at")
        topics = try row.decode([String].self, column: "topics")
        latestState = try row.decodeJSON(column: "latest_state")
        latestStateAt = try row.decode(Date?.self, column: "latest_state_at")
        latestUpdateID = try row.decode(Int?.self, column: "latest_update_id")
        createdAt = try row.decode(Date.self, column: "created_at")
        updatedAt = try row.decode(Date.self, column: "updated_at")
        audienceLead = try row.decode(Int?.self, column: "audience_lead")
        startAlert = try row.decodeJSON(column: "start_alert")
        freshness = try row.freshnessSettings(column: "freshness")
    }
}

/// Filters of `GET /v1/events`; nil matches everything.
public struct EventFilter: Sendable, Equatable {
    public var appID: Int?
    public var status: EventStatus?
    public var kind: EventKind?
    /// Events carrying this topic.
    public var topic: String?
    /// Events starting at or after this instant.
    public var startsAfter: Date?
    /// Events starting before this instant.
    public var startsBefore: Date?

    public init(
        appID: Int? = nil, status: EventStatus? = nil, kind: EventKind? = nil, topic: String? = nil,
        startsAfter: Date? = nil, startsBefore: Date? = nil
    ) {
        self.appID = appID
        self.status = status
        self.kind = kind
        self.topic = topic
        self.startsAfter = startsAfter
        self.startsBefore = startsBefore
    }
}

/// One page of events, ordered by start time then id; `nextCursor` is nil on the last page.
public struct EventPage: Sendable, Equatable {
    public var events: [EventRecord]
    /// Opaque; pass it back to `list` for the next page.
    public var nextCursor: String?
}

/// What became of an event's updates, and how many APNs exchanges its channels had.
public struct EventCounts: Sendable, Equatable {
    public var pending = 0
    public var broadcast = 0
    public var conflated = 0
    public var superseded = 0
    public var unsent = 0
    public var deliveries = 0
    public var failedDeliveries = 0

    public init(
        pending: Int = 0, broadcast: Int = 0, conflated: Int = 0, superseded: Int = 0, unsent: Int = 0,
        deliveries: Int = 0, failedDeliveries: Int = 0
    ) {
        self.pending = pending
        self.broadcast = broadcast
        self.conflated = conflated
        self.superseded = superseded
        self.unsent = unsent
        self.deliveries = deliveries
        self.failedDeliveries = failedDeliveries
    }
}

/// The content-state an app fetches on foreground (`GET /v1/events/{id}/state`).
public struct LatestState: Sendable, Equatable {
    public var eventID: Int
    /// nil until the event has a state.
    public var state: JSONValue?
    public var at: Date?
    public var updateID: Int?
}
