// The registry that app backends call (scope `tokens`): installations, their push-to-start tokens, what they
// follow, and their Live Activities. A field that is absent or null leaves the stored value alone, because
// encoders differ (JavaScript, Jackson and Go send null where Swift omits the key), and a registration that
// carries no token must never wipe a good one. A key bound to one app sees only that app; other keys name
// the app with `?app=` (or `app` in a registration), and an installation id found under two apps without
// it answers 409. docs/api.md#installations describes every route.
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `PUT|GET|DELETE /v1/installations/{id}`, its token, follows and activities.
public struct InstallationRoutes: APIRoutes {
    let installations: InstallationRepository
    let events: EventRepository
    let types: AttributeTypeCatalog
    let settings: AudienceSettings
    let registrations: Counter

    public init(pool: PostgresPool, types: AttributeTypeCatalog, settings: AudienceSettings, metrics: MetricsRegistry) {
        installations = InstallationRepository(pool: pool)
        events = EventRepository(pool: pool)
        self.types = types
        self.settings = settings
        registrations = metrics.counter(
            "marquee_installation_registrations_total", help: "Installation registrations (PUT), by app and outcome",
            labels: ["app", "outcome"])
    }

    public func register(in table: inout RouteTable) {
        table.add("PUT", "/v1/installations/{id}", access: .scope(.tokens), takesBody: true) { [self] in try await put($0) }
        table.add("GET", "/v1/installations/{id}", access: .scope(.tokens)) { [self] request in
            let (id, _) = try await find(request)
            return .json(Self.json(try await installations.record(id: id)))
        }
        table.add("DELETE", "/v1/installations/{id}", access: .scope(.tokens)) { [self] request in
            let (id, _) = try await find(request)
            try await installations.erase(installation: id)
            return HTTPResponse(status: 204)
        }
        table.add("DELETE", "/v1/installations/{id}/push-to-start-token", access: .scope(.tokens)) { [self] request in
            let (id, _) = try await find(request)
            try await installations.clearPushToStartToken(installation: id)
            return HTTPResponse(status: 204)
        }
        for (method, template, change) in [
            ("PUT", "/v1/installations/{id}/follows", InstallationRepository.FollowChange.replace),
            ("POST", "/v1/installations/{id}/follows", .add),
            ("POST", "/v1/installations/{id}/follows/remove", .remove),
        ] {
            table.add(method, template, access: .scope(.tokens), takesBody: true) { [self] request in try await follows(request, change) }
        }
        table.add("PUT", "/v1/installations/{id}/activities/{activityId}", access: .scope(.tokens), takesBody: true) { [self] in
            try await putActivity($0)
        }
        table.add("DELETE", "/v1/installations/{id}/activities/{activityId}", access: .scope(.tokens)) { [self] in try await endActivity($0) }
    }

    // MARK: Which app, which installation

    /// The installation id of the path: 1 to 200 characters.
    static func installationID(_ request: APIRequest) throws(APIError) -> String {
        let id = request.parameter("id")
        guard RegistrationLimits.identifier.contains(id.count) else {
            throw APIError.validation("an installation id is 1 to 200 characters", field: "id")
        }
        return id
    }

    /// The app the request names: the key's, or `?app=` (or `app` in `body`). A key bound to an app may name only it.
    static func namedApp(_ request: APIRequest, body: JSONFields? = nil) throws(APIError) -> Int? {
        let fromQuery = try request.query.integer("app")
        var fromBody: Int?
        if let body, body.optional("app") != nil { fromBody = Int(try body.int("app", in: 1...Int64.max)) }
        if let fromQuery, let fromBody, fromQuery != fromBody {
            throw APIError.validation("?app=\(fromQuery) and the body's app \(fromBody) differ", field: "app")
        }
        let named = fromBody ?? fromQuery
        if let bound = request.key?.appID {
            if let named, named != bound { throw APIError.validation("this API key is limited to app \(bound)", field: "app") }
            return bound
        }
        return named
    }

    /// The stored installation of the path (row id and app), or 404; 409 when several apps have it and none was named.
    private func find(_ request: APIRequest) async throws -> (id: Int, appID: Int) {
        let installationID = try Self.installationID(request)
        do {
            return try await installations.find(installationID: installationID, appID: try Self.namedApp(request))
        } catch let error as AudienceError {
            throw Self.apiError(error)
        }
    }

    /// The API's answer to a registry refusal.
    static func apiError(_ error: AudienceError) -> APIError {
        switch error {
        case .installationNotFound(let id): APIError.notFound("installation '\(id)'")
        case .installationInSeveralApps: APIError.conflict(error.description, field: "app")
        case .unknownEvent(_, let index): APIError.validation(error.description, field: index.map { "events[\($0)]" } ?? "event")
        case .tooManyFollows: APIError.validation(error.description, field: "events")
        case .activityEnded: APIError(status: 409, code: "activity_ended", message: error.description, field: "activityId")
        case .activityEventChanged: APIError(status: 409, code: "activity_event_changed", message: error.description, field: "event")
        case .activityNotFound(let id): APIError.notFound("activity '\(id)'")
        case .tokenContended: APIError.conflict(error.description, field: "pushToStartToken")
        }
    }

    // MARK: Registration

    private static let registrationFields: Set<String> = [
        "app", "pushToStartToken", "osVersion", "appBuild", "locale", "frequentPushesEnabled", "liveActivitiesEnabled",
    ]

    private func put(_ request: APIRequest) async throws -> HTTPResponse {
        let installationID = try Self.installationID(request)
        let body = try request.bodyObject()
        try body.allowOnly(Self.registrationFields)
        var appID = try Self.namedApp(request, body: body)
        if appID == nil {
            let apps = try await installations.apps(installationID: installationID)
            guard apps.count <= 1 else {
                throw Self.apiError(.installationInSeveralApps(installationID, apps: apps))
            }
            guard let only = apps.first else {
                throw APIError.validation("a new installation needs its app: pass app in the body or ?app=", field: "app")
            }
            appID = only
        }
        var registration = InstallationRegistration(appID: appID!, installationID: installationID)
        registration.pushToStartToken = try Self.token(body, "pushToStartToken")
        if let text = try body.optionalString("osVersion") {
            guard OSVersion(text) != nil else {
                throw APIError.validation("an OS version is major[.minor[.patch]], each 1 to 3 digits, like 17.2.1", field: "osVersion")
            }
            registration.osVersion = text
        }
        registration.appBuild = try Self.shortText(body, "appBuild", limits: RegistrationLimits.appBuild)
        registration.locale = try Self.shortText(body, "locale", limits: RegistrationLimits.locale)
        registration.frequentPushesEnabled = try body.optionalBool("frequentPushesEnabled")
        registration.liveActivitiesEnabled = try body.optionalBool("liveActivitiesEnabled")
        let record: InstallationRecord
        let created: Bool
        do {
            (record, created) = try await installations.register(registration, previousTokenRetention: settings.previousTokenRetention)
        } catch let error as AudienceError {
            throw Self.apiError(error)
        } catch let error as PostgresError where error.sqlState == .foreignKeyViolation {
            throw APIError.validation("no app with id \(registration.appID)", field: "app")
        }
        registrations.increment(["\(registration.appID)", created ? "created" : "updated"])
        return .json(Self.json(record), status: created ? 201 : 200)
    }

    /// An optional token field, validated by `DeviceTokenText` and lower-cased.
    static func token(_ body: JSONFields, _ key: String) throws(APIError) -> String? {
        guard let text = try body.optionalString(key) else { return nil }
        switch DeviceTokenText.validate(text) {
        case .success(let token): return token
        case .failure(let error): throw APIError.validation("not a device token: \(error)", field: body.field(key))
        }
    }

    static func shortText(_ body: JSONFields, _ key: String, limits: ClosedRange<Int>) throws(APIError) -> String? {
        guard let text = try body.optionalString(key) else { return nil }
        guard limits.contains(text.count) else {
            throw APIError.validation("\(limits.lowerBound) to \(limits.upperBound) characters", field: body.field(key))
        }
        return text
    }

    // MARK: Follows

    private func follows(_ request: APIRequest, _ change: InstallationRepository.FollowChange) async throws -> HTTPResponse {
        let (references, topics) = try Self.followTargets(try request.bodyObject())
        let (id, appID) = try await find(request)
        do {
            let follows = try await installations.changeFollows(change, installation: id, appID: appID, events: references, topics: topics)
            return .json(["follows": Self.json(follows)])
        } catch AudienceError.tooManyFollows(let count, let limit) {
            throw APIError.validation(
                "\(count) follows; an installation follows at most \(limit) events and topics",
                field: topics.isEmpty ? "events" : "topics")
        } catch let error as AudienceError {
            throw Self.apiError(error)
        }
    }

    /// A follows body, `{"events": [...], "topics": [...]}`: each list at most `followLimit` long, topics without repeats.
    static func followTargets(_ body: JSONFields) throws(APIError) -> (events: [EventReference], topics: [String]) {
        try body.allowOnly(["events", "topics"])
        let limit = InstallationRepository.followLimit
        var references: [EventReference] = []
        if let value = body.optional("events") {
            guard case .array(let items) = value else {
                throw APIError.validation("expected an array, found \(value.typeName)", field: body.field("events"))
            }
            guard items.count <= limit else { throw APIError.validation("at most \(limit) events", field: body.field("events")) }
            for (index, item) in items.enumerated() {
                let path = body.path.appending(key: "events").appending(index: index)
                references.append(try Self.eventReference(try JSONFields(item, at: path), field: "\(path)"))
            }
        }
        var topics: [String] = []
        if let value = body.optional("topics") {
            guard case .array(let items) = value else {
                throw APIError.validation("expected an array, found \(value.typeName)", field: body.field("topics"))
            }
            guard items.count <= limit else { throw APIError.validation("at most \(limit) topics", field: body.field("topics")) }
            for (index, item) in items.enumerated() {
                guard let topic = item.stringValue, RegistrationLimits.identifier.contains(topic.count) else {
                    throw APIError.validation(
                        "a topic is a string of 1 to 200 characters", field: "\(body.path.appending(key: "topics").appending(index: index))")
                }
                if !topics.contains(topic) { topics.append(topic) }
            }
        }
        return (references, topics)
    }

    /// `{"event": 42}` or `{"externalId": "..."}`, exactly one (members of a larger object when `alone` is false).
    static func eventReference(_ fields: JSONFields, field: String, alone: Bool = true) throws(APIError) -> EventReference {
        if alone { try fields.allowOnly(["event", "externalId"]) }
        switch (fields.optional("event"), fields.optional("externalId")) {
        case (.some, nil): return .id(Int(try fields.int("event", in: 1...Int64.max)))
        case (nil, .some):
            let external = try fields.string("externalId")
            guard RegistrationLimits.identifier.contains(external.count) else {
                throw APIError.validation("1 to 200 characters", field: fields.field("externalId"))
            }
            return .externalID(external)
        default: throw APIError.validation("give exactly one of event and externalId", field: field)
        }
    }

    // MARK: Activities

    static func activityID(_ request: APIRequest) throws(APIError) -> String {
        let id = request.parameter("activityId")
        guard RegistrationLimits.identifier.contains(id.count) else {
            throw APIError.validation("an activity id is 1 to 200 characters", field: "activityId")
        }
        return id
    }

    private func putActivity(_ request: APIRequest) async throws -> HTTPResponse {
        let activityID = try Self.activityID(request)
        let body = try request.bodyObject()
        try body.allowOnly(["event", "externalId", "attributesType", "pushType", "pushToken", "startDate"])
        let reference = try Self.eventReference(body, field: "event", alone: false)
        let attributesType = try body.string("attributesType")
        // A scheduled activity (iOS 26): iOS starts it at its start date, which is ahead.
        let startDate: Date? = body.optional("startDate") == nil ? nil : try body.date("startDate")
        if let startDate, startDate <= Date() {
            throw APIError.validation("startDate is when iOS starts a scheduled activity: a time in the future", field: "startDate")
        }
        let pushType: ActivityPushType = try body.choice("pushType")
        let token = try Self.token(body, "pushToken")
        switch (pushType, token) {
        case (.token, nil): throw APIError.validation("a token activity sends its pushToken", field: "pushToken")
        case (.channel, .some): throw APIError.validation("a channel activity has no pushToken", field: "pushToken")
        default: break
        }
        let (id, appID) = try await find(request)
        let event: EventRecord? =
            switch reference {
            case .id(let eventID): try await events.get(id: eventID, appID: appID)
            case .externalID(let external): try await events.get(appID: appID, externalID: external)
            }
        guard let event else {
            throw APIError.validation("the app has no event \(reference)", field: body.optional("event") == nil ? "externalId" : "event")
        }
        let typeName = try await types.find(id: event.attributeTypeID)?.type.name
        guard typeName == attributesType else {
            throw APIError.validation("event \(event.id) shows attribute type '\(typeName ?? "")', not '\(attributesType)'", field: "attributesType")
        }
        do {
            let (activity, created) = try await installations.registerActivity(
                installation: id, appID: appID, activityID: activityID, event: .id(event.id), attributeType: attributesType,
                pushType: pushType, pushToken: token, startDate: startDate)
            return .json(Self.json(activity), status: created ? 201 : 200)
        } catch let error as AudienceError {
            throw Self.apiError(error)
        }
    }

    private func endActivity(_ request: APIRequest) async throws -> HTTPResponse {
        let activityID = try Self.activityID(request)
        let allowed: Set<String> = ["state", "app", "event", "externalId"]
        if let unknown = request.query.names.first(where: { !allowed.contains($0) }) {
            throw APIError.validation("unknown query parameter; allowed: app, state, event, externalId", field: unknown)
        }
        let event: ActivityLifecycle.Event =
            switch request.query.text("state") {
            case nil, "ended": .ended
            case "dismissed": .dismissed
            default: throw APIError.validation("state is ended or dismissed", field: "state")
            }
        // The activity's event, for one never registered (a push-started activity): its end is kept as a tombstone.
        let reference: EventReference?
        switch (try request.query.integer("event"), request.query.text("externalId")) {
        case (nil, nil): reference = nil
        case (let id?, nil): reference = .id(id)
        case (nil, let external?):
            guard RegistrationLimits.identifier.contains(external.count) else {
                throw APIError.validation("1 to 200 characters", field: "externalId")
            }
            reference = .externalID(external)
        default: throw APIError.validation("give at most one of event and externalId", field: "event")
        }
        let (id, appID) = try await find(request)
        do {
            return .json(
                Self.json(
                    try await installations.endActivity(
                        installation: id, appID: appID, activityID: activityID, event: event, eventReference: reference)))
        } catch let error as AudienceError {
            throw Self.apiError(error)
        }
    }

    // MARK: JSON views

    /// A token as shown: its first 8 characters.
    static func shown(_ token: String) -> JSONValue { .string(String(token.prefix(8))) }

    /// The API's view of an installation (`Installation` in the OpenAPI document).
    public static func json(_ record: InstallationRecord) -> JSONValue {
        let token: JSONValue =
            record.pushToStartToken.map { token in
                [
                    "prefix": shown(token.token),
                    "registeredAt": EventRoutes.json(token.registeredAt),
                    "seenAt": EventRoutes.json(token.seenAt),
                    "previousPrefix": token.previousToken.map(shown) ?? .null,
                    "previousUntil": EventRoutes.json(token.previousUntil),
                    "refusedReason": token.refusedReason.map(JSONValue.string) ?? .null,
                    "refusedAt": EventRoutes.json(token.refusedAt),
                ]
            } ?? .null
        return [
            "installationId": .string(record.installationID),
            "app": .int(Int64(record.appID)),
            "osVersion": record.osVersion.map(JSONValue.string) ?? .null,
            "appBuild": record.appBuild.map(JSONValue.string) ?? .null,
            "locale": record.locale.map(JSONValue.string) ?? .null,
            "frequentPushesEnabled": .bool(record.frequentPushesEnabled),
            "liveActivitiesEnabled": .bool(record.liveActivitiesEnabled),
            "pushToStartToken": token,
            "topicRefusedAt": EventRoutes.json(record.topicRefusedAt),
            "follows": json(record.follows),
            "activities": .array(record.activities.map(json)),
            "createdAt": EventRoutes.json(record.createdAt),
            "updatedAt": EventRoutes.json(record.updatedAt),
            "registeredAt": EventRoutes.json(record.registeredAt),
        ]
    }

    static func json(_ follows: [StoredFollow]) -> JSONValue {
        var events: [JSONValue] = []
        var topics: [JSONValue] = []
        for follow in follows {
            switch follow {
            case .event(let id, let external): events.append(["event": .int(Int64(id)), "externalId": .string(external)])
            case .topic(let topic): topics.append(.string(topic))
            }
        }
        return ["events": .array(events), "topics": .array(topics)]
    }

    /// The API's view of an activity (`Activity` in the OpenAPI document).
    public static func json(_ activity: StoredActivity) -> JSONValue {
        [
            "activityId": .string(activity.activityID),
            "event": .int(Int64(activity.eventID)),
            "attributesType": .string(activity.attributeType),
            "pushType": .string(activity.pushType.rawValue),
            "pushToken": activity.pushToken.map(shown) ?? .null,
            "state": .string(activity.state.rawValue),
            "createdAt": EventRoutes.json(activity.createdAt),
            "updatedAt": EventRoutes.json(activity.updatedAt),
            "endedAt": EventRoutes.json(activity.endedAt),
            "startDate": EventRoutes.json(activity.startDate),
            "audienceRound": .int(Int64(activity.audienceRound)),
            "dismissedByUser": .bool(activity.userDismissed),
        ]
    }
}

/// The audience's settings (`marquee serve` flags).
public struct AudienceSettings: Sendable, Equatable {
    /// How long a replaced push-to-start token is kept to match a late 410 (`--previous-token-retention`).
    public var previousTokenRetention: TimeInterval = 7 * 86400
    /// Push-to-start tokens not sent again within this are pruned by the hourly pass (`--token-max-age`).
    public var tokenMaxAge: TimeInterval = 60 * 86400
    /// How far ahead of its start an app may ask for an event's channel (`--channel-request-window`); nil:
    /// the channel lead time. At most 24 hours.
    public var channelRequestWindow: TimeInterval?
    /// The share of the quota that channels opened on request before the lead time may hold
    /// (`--channel-request-share`, 0 to 1; 0 turns early opening off).
    public var channelRequestShare: Double = 0

    public init() {}
}
