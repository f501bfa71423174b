// Start runs of an event (scope `admin`, docs/api.md#start-runs): `POST /v1/events/{id}/starts` starts the
// audience now, with an optional topic filter and alert; `GET` lists the runs with their counts, rate, ETA
// and adoption. The fan-out (`StartFanOut`) does the sending; a run created here wakes this instance's.
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `POST` and `GET /v1/events/{id}/starts`.
public struct StartRoutes: APIRoutes {
    let events: EventRepository
    let types: AttributeTypeRepository
    let starts: StartRepository
    let settings: StartSettings
    let fanOut: StartFanOut?
    /// `marquee_start_runs_total` (StartMetrics.runs): a manual run is counted where it is created, here.
    let runs: Counter?

    public init(pool: PostgresPool, settings: StartSettings, fanOut: StartFanOut?, runs: Counter? = nil) {
        self.runs = runs
        events = EventRepository(pool: pool)
        types = AttributeTypeRepository(pool: pool)
        starts = StartRepository(pool: pool)
        self.settings = settings
        self.fanOut = fanOut
    }

    public func register(in table: inout RouteTable) {
        table.add("POST", "/v1/events/{id}/starts", access: .scope(.admin), takesBody: true) { [self] request in try await create(request) }
        table.add("GET", "/v1/events/{id}/starts", access: .scope(.admin)) { [self] request in
            let event = try await event(request)
            let runs = try await starts.runs(eventID: event.id)
            return .json(["runs": .array(runs.map(Self.json))])
        }
    }

    private func event(_ request: APIRequest) async throws -> EventRecord {
        let id = try EventRoutes.eventID(request)
        guard let event = try await events.get(id: id, appID: request.key?.appID) else { throw APIError.notFound("event \(id)") }
        return event
    }

    private func create(_ request: APIRequest) async throws -> HTTPResponse {
        let body = try request.body == nil ? JSONFields([:], at: .root) : request.bodyObject()
        try body.allowOnly(["topics", "alert"])
        let event = try await event(request)
        var topics: [String]?
        if body.optional("topics") != nil {
            let wanted = try EventRoutes.topics(body)
            for (index, topic) in wanted.enumerated() where !event.topics.contains(topic) {
                throw APIError.validation(
                    "not a topic of the event; its topics: \(event.topics.joined(separator: ", "))", field: "topics[\(index)]")
            }
            guard !wanted.isEmpty else {
                throw APIError.validation("an empty filter starts nobody; omit topics to start every follower", field: "topics")
            }
            topics = wanted
        }
        var alert: LiveActivityAlert?
        if let value = body.optional("alert") {
            do {
                alert = try LiveActivityAlert(json: value, at: ["alert"])
            } catch {
                throw APIError.validation(error.description, field: "\(error.path)")
            }
        }
        guard let startAlert = alert ?? event.startAlert.flatMap({ try? LiveActivityAlert(json: $0, at: ["startAlert"]) }) else {
            throw APIError(
                status: 422, code: "no_alert",
                message: "neither the request nor the event has a start alert; ActivityKit shows no push-to-start without one",
                field: "alert")
        }
        if alert != nil, let type = try await types.find(id: event.attributeTypeID) {
            try EventRoutes.checkStartSize(
                typeName: type.type.name, attributes: event.attributes, state: event.latestState ?? [:], alert: startAlert)
        }
        let id: Int
        do {
            id = try await starts.createManualRun(
                appID: request.key?.appID, eventID: event.id, topics: topics, alert: alert?.json, createdBy: request.key?.keyID,
                channelWait: settings.channelWait)
        } catch PipelineError.eventClosed(_, let status) {
            throw APIError(
                status: 409, code: "event_over", message: "event \(event.id) is \(status.rawValue); nothing starts for it any more", field: nil)
        } catch PipelineError.eventNotFound {
            throw APIError.notFound("event \(event.id)")
        }
        fanOut?.wake()
        guard let run = try await starts.runs(eventID: event.id).first(where: { $0.id == id }) else { throw APIError.notFound("start run \(id)") }
        runs?.increment([run.kind.rawValue, run.state.rawValue])
        return .json(Self.json(run), status: 202)
    }

    /// The API's view of a run (`StartRun` in the OpenAPI document).
    static func json(_ run: StartRunReport) -> JSONValue {
        let counts = run.counts
        let elapsed = max(0.001, (run.finishedAt ?? run.firstPassDoneAt ?? run.now).timeIntervalSince(run.startedAt))
        let answered = counts.accepted + counts.unknown + counts.rejected.values.reduce(0, +)
        let rate = Double(answered) / elapsed
        let remaining = max(0, run.estimatedAudience - counts.decided)
        let eta: JSONValue =
            run.state != .running ? .int(0) : remaining == 0 ? .int(0) : rate > 0 ? .double((Double(remaining) / rate * 10).rounded() / 10) : .null
        func object(_ values: [String: Int]) -> JSONValue {
            var object = JSONObject()
            for (key, value) in values.sorted(by: { $0.key < $1.key }) { object[key] = .int(Int64(value)) }
            return .object(object)
        }
        return [
            "id": .int(Int64(run.id)),
            "eventId": .int(Int64(run.eventID)),
            "kind": .string(run.kind.rawValue),
            "state": .string(run.state.rawValue),
            "skipReason": run.skipReason.map { .string($0.rawValue) } ?? .null,
            "topics": run.topics.map { .array($0.map(JSONValue.string)) } ?? .null,
            "dueAt": EventRoutes.json(run.dueAt),
            "startedAt": EventRoutes.json(run.startedAt),
            "firstPassDoneAt": EventRoutes.json(run.firstPassDoneAt),
            "finishedAt": EventRoutes.json(run.finishedAt),
            "counts": [
                "audience": .int(Int64(counts.audience)), "notStartable": .int(Int64(counts.notStartable)),
                "planned": .int(Int64(counts.planned)), "sending": .int(Int64(counts.sending)), "accepted": .int(Int64(counts.accepted)),
                "unknown": .int(Int64(counts.unknown)), "noChannel": .int(Int64(counts.noChannel)),
                "rejected": object(counts.rejected), "skipped": object(counts.skipped),
            ],
            "progress": [
                "decided": .int(Int64(counts.decided)), "estimatedAudience": .int(Int64(run.estimatedAudience)),
                "ratePerSecond": .double((rate * 10).rounded() / 10), "etaSeconds": eta,
            ],
            "lagSeconds": run.lastAcceptedAt.map { .double(($0.timeIntervalSince(run.startedAt) * 10).rounded() / 10) } ?? .null,
            "adoption": ["total": .int(Int64(run.adoption.values.reduce(0, +))), "byOSMajor": object(run.adoption)],
        ]
    }
}
