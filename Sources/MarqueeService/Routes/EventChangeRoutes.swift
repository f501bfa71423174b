// Events that move: `PATCH /v1/events/{id}` changes the times (an `ingest` key may), the topics, the audience
// lead and the start alert (those decide who gets a push-to-start and what it says: `admin` only). The
// attributes never change, because running activities keep the ones they started with. EventChangePlanner
// decides under the event's row lock; EventRepository.change performs and records the change with its key.
// The scheduler and the start fan-out read the event's times on every sweep, so they follow at once.
// `POST /v1/events/{id}/cancel` calls an event off. EventCancelPlan decides from what the event reached: with
// activities that may be running, the final state goes as the `end` broadcast (queued by the ingest in the same
// statement that makes the event `cancelled`, so the dispatcher sends it and mirroring follows); without, nothing
// is sent, and an open channel is deleted at once so it frees its quota slot. A start run stops at its next send
// window, since a cancelled event is not startable.
import Foundation
import MarqueeCore
import MarqueeStore
import Network

extension EventRoutes {
    func registerChanges(in table: inout RouteTable) {
        table.add("PATCH", "/v1/events/{id}", access: .scope(.ingest), takesBody: true) { [self] request in try await change(request) }
        table.add("POST", "/v1/events/{id}/cancel", access: .scope(.ingest), takesBody: true) { [self] request in try await cancel(request) }
    }

    private static let changeFields: Set<String> = [
        "startsAt", "endsAt", "topics", "audienceLead", "startAlert", "postponedState", "freshness",
    ]
    /// Fields of an event that never change after its creation, and why.
    private static let fixedFields: [String: String] = [
        "attributes": "running Live Activities keep the attributes they were started with; create another event",
        "attributeType": "devices decode the activity's attributes type; create another event",
        "storagePolicy": "an APNs channel's message storage policy cannot change once it is created",
        "kind": "an event's kind is fixed at creation", "externalId": "an event's external id is fixed at creation",
        "app": "an event belongs to its app",
    ]
    /// Fields only an `admin` key may change.
    private static let adminFields = ["topics", "startAlert"]

    private func change(_ request: APIRequest) async throws -> HTTPResponse {
        let eventID = try Self.eventID(request)
        let body = try request.bodyObject()
        if let (field, reason) = Self.fixedFields.first(where: { body.object[$0.key] != nil }).map({ ($0.key, $0.value) }) {
            throw APIError(status: 409, code: "immutable_field", message: "\(field) cannot change: \(reason)", field: field)
        }
        try body.allowOnly(Self.changeFields)
        if let field = Self.adminFields.first(where: { body.object[$0] != nil }), request.key?.scopes.contains(.admin) != true {
            throw APIError(
                status: 403, code: "forbidden",
                message: "changing \(field) needs an API key with the 'admin' scope (it decides who is started and what the start says); "
                    + "an 'ingest' key may change startsAt, endsAt, audienceLead and freshness", field: field)
        }
        var change = EventChange()
        change.startsAt = try body.optionalDate("startsAt")
        change.endsAt = try body.optionalDate("endsAt")
        if body.object["topics"] != nil { change.topics = try Self.topics(body) }
        if let lead = body.object["audienceLead"] {
            change.audienceLead = .some(lead.isNull ? nil : Int(try body.int("audienceLead", in: 0...604_800)))
        }
        if let freshness = body.object["freshness"] { change.freshness = .some(try Self.freshness(freshness)) }
        var newAlert: LiveActivityAlert?
        if let alert = body.object["startAlert"] {
            if alert.isNull {
                change.startAlert = .some(nil)
            } else {
                do {
                    newAlert = try LiveActivityAlert(json: alert, at: ["startAlert"])
                } catch {
                    throw APIError.validation(error.description, field: "\(error.path)")
                }
                change.startAlert = .some(newAlert?.json)
            }
        }
        let type = try await eventType(eventID: eventID, key: request.key)
        if let state = body.optional("postponedState") {
            let encoded = try Self.validated { () throws(ValidationError) in try type.encodeContentState(state, at: ["postponedState"]) }
            try Self.checkSize(.end, state: encoded)
            change.postponedState = encoded
        }
        guard !change.isEmpty else {
            throw APIError.validation("nothing to change; send one of \(Self.changeFields.sorted().joined(separator: ", "))", field: nil)
        }
        if let newAlert {
            // The new alert must leave the push-to-start within a device push's 4,096 bytes.
            guard let event = try await events.get(id: eventID, appID: request.key?.appID) else { throw APIError.notFound("event \(eventID)") }
            let typeName = try await types.find(id: event.attributeTypeID)?.type.name ?? ""
            try Self.checkStartSize(typeName: typeName, attributes: event.attributes, state: event.latestState ?? [:], alert: newAlert)
        }
        let defaultLead = startSettings.audienceLead
        let restartOnPostpone = startSettings.restartOnPostpone
        let asked = change
        let result: (event: EventRecord, plan: EventChangePlan, stoppedRuns: [StartRunKind])
        do {
            result = try await events.change(eventID: eventID, appID: request.key?.appID, apiKeyID: request.key?.databaseID, change) {
                event, startsWentOut in
                EventChangePlanner.plan(
                    asked,
                    facts: EventChangeFacts(
                        status: event.status, startsAt: event.startsAt, endsAt: event.endsAt, audienceLead: event.audienceLead,
                        defaultAudienceLead: defaultLead, startsWentOut: startsWentOut, restartOnPostpone: restartOnPostpone))
            }
        } catch PipelineError.eventNotFound {
            throw APIError.notFound("event \(eventID)")
        } catch let refusal as EventChangeRefusal {
            switch refusal {
            case .closed(let status):
                throw APIError.conflict("event \(eventID) is \(status.rawValue): its schedule and settings no longer change", field: nil)
            case .endsNotAfterStart:
                throw APIError.validation(
                    "endsAt must be after startsAt", field: change.endsAt != nil || change.startsAt == nil ? "endsAt" : "startsAt")
            }
        }
        for kind in result.stoppedRuns { startRuns?.increment([kind.rawValue, StartRunState.stopped.rawValue]) }
        // The size of its push-to-start, kept per process for the ingest, changes with the alert.
        if change.startAlert != nil { typeOfEvent.forgetStartOverhead(eventID: eventID) }
        var json = Self.json(result.event, typeName: try await types.find(id: result.event.attributeTypeID)?.type.name ?? "").objectValue ?? [:]
        json["warnings"] = Self.json(result.plan.warnings)
        json["postponed"] = .bool(result.plan.event == .postponed)
        return .json(.object(json))
    }

    private static let cancelFields: Set<String> = ["contentState", "contentStatePatch", "dismissalDate"]

    private func cancel(_ request: APIRequest) async throws -> HTTPResponse {
        let eventID = try Self.eventID(request)
        let body = try request.bodyObject()
        try body.allowOnly(Self.cancelFields)
        let whole = body.optional("contentState")
        let patch = body.optional("contentStatePatch")
        if whole != nil, patch != nil {
            throw APIError.validation("send contentState or contentStatePatch, not both", field: "contentStatePatch")
        }
        let dismissalDate = try body.optionalDate("dismissalDate")
        if let dismissalDate { try Self.checkDismissal(dismissalDate, notBefore: nil) }
        guard let event = try await events.get(id: eventID, appID: request.key?.appID),
            let facts = try await events.cancelFacts(eventID: eventID, appID: request.key?.appID),
            let type = try await types.find(id: event.attributeTypeID)?.type
        else { throw APIError.notFound("event \(eventID)") }
        guard
            let plan = EventCancelPlan.plan(facts)
        else { throw APIError.conflict("event \(eventID) is \(facts.status.rawValue): there is nothing left to cancel", field: nil) }
        // The final state is validated either way, so a bad request changes nothing whatever the plan.
        let encodedWhole = try whole.map { value in try Self.validated { () throws(ValidationError) in try type.encodeContentState(value) } }
        func checked(_ state: JSONValue) throws -> JSONValue {
            try Self.checkSize(.end, state: state, explicit: SendTimeFields(dismissalDate: dismissalDate))
            return state
        }
        func finalState(_ latest: JSONValue?) throws -> JSONValue {
            if let encodedWhole { return try checked(encodedWhole) }
            if let patch {
                return try checked(
                    try Self.validated { () throws(ValidationError) in
                        try type.patchContentState(latest ?? [:], with: patch, at: ["contentStatePatch"])
                    })
            }
            return try checked(latest ?? [:])
        }
        _ = try finalState(event.latestState)
        let apiKeyID = request.key?.databaseID
        var answer: JSONObject = [:]
        switch plan {
        case .endActivities:
            var draft = UpdateDraft(action: .end, dismissalDate: dismissalDate, occurredAt: nil, apiKeyID: apiKeyID, urgent: true)
            draft.cancels = true
            let result: IngestResult
            do {
                result = try await ingest.ingest(
                    eventID: eventID, draft, appID: request.key?.appID, contentState: { snapshot in try finalState(snapshot.latestState) },
                    response: { update in StoredResponse(status: 202, body: Data(Self.json(update, action: .end).jsonBytes)) })
            } catch PipelineError.eventClosed(_, let status) {
                throw APIError.conflict("event \(eventID) is \(status.rawValue): there is nothing left to cancel", field: nil)
            } catch PipelineError.eventBusy {
                throw APIError(
                    status: 503, code: "event_busy", message: "other updates of event \(eventID) kept changing the state this patch applies to; retry"
                )
            }
            if case .accepted(let update, _) = result {
                notifier?.committed(urgent: true, dueIn: update.dueIn)
                answer["update"] = Self.json(update, action: .end)["update"]
            }
            try await events.recordChange(.cancelRequested, eventID: eventID, appID: event.appID, apiKeyID: apiKeyID, changes: ["broadcast": true])
        case .closeQuietly:
            guard try await events.cancelQuietly(eventID: eventID, apiKeyID: apiKeyID) != nil else {
                throw APIError.conflict("event \(eventID) ended meanwhile: there is nothing left to cancel", field: nil)
            }
            try await releaseChannel(eventID: eventID)
            answer["update"] = .null
        }
        guard let cancelled = try await events.get(id: eventID) else { throw APIError.notFound("event \(eventID)") }
        answer["event"] = Self.json(cancelled, typeName: type.name)
        answer["broadcast"] = .bool(plan == .endActivities)
        answer["unreachableStarts"] = .int(Int64(facts.unreachableStarts))
        answer["warnings"] = .array(Self.unreachableStartsWarning(facts.unreachableStarts).map { [$0] } ?? [])
        return .json(.object(answer), status: 202)
    }

    /// Performs QuietCancelChannelPlan for the event's current channel: stores its next lifecycle, and hands a delete
    /// at APNs to the scheduler now (see docs/operations.md).
    private func releaseChannel(eventID: Int) async throws {
        guard let current = try await channels.channels(eventID: eventID).first, let lifecycle = current.lifecycle,
            let plan = QuietCancelChannelPlan.plan(lifecycle)
        else { return }
        let deleteNow: Date? =
            switch plan.action {
            case .deleteChannel: Date()
            default: nil
            }
        try await channels.transition(channelID: current.id, from: lifecycle, to: plan.next, nextAttemptAt: deleteNow)
    }

    /// The event's attribute type; 404 for an event outside the key's app.
    private func eventType(eventID: Int, key: VerifiedAPIKey?) async throws -> ActivityType {
        guard let event = try await events.get(id: eventID, appID: key?.appID), let stored = try await types.find(id: event.attributeTypeID)
        else { throw APIError.notFound("event \(eventID)") }
        return stored.type
    }

    /// The `warnings` array of an answer (`Warning` in the OpenAPI document).
    /// The warning of an end or cancel that cannot reach every started activity (nil: it reaches them all).
    static func unreachableStartsWarning(_ count: Int) -> JSONValue? {
        guard count > 0 else { return nil }
        return [
            "code": "starts_unreachable", "field": .null,
            "message": .string(
                "\(count) accepted push-to-start\(count == 1 ? "" : "s") cannot be reached by this end: the app never registered "
                    + "\(count == 1 ? "its activity" : "their activities") and no channel carries the end to \(count == 1 ? "it" : "them"), "
                    + "so those devices show the activity until iOS ends it (register every activity: docs/api.md#activities)"),
        ]
    }

    static func json(_ warnings: [EventWarning]) -> JSONValue {
        .array(
            warnings.map { warning in
                switch warning {
                case .outlivesActivity:
                    [
                        "code": .string(warning.rawValue), "field": "endsAt",
                        "message": .string(
                            "from the audience start (startsAt minus the audience lead) to endsAt is more than 8 hours: "
                                + "the system ends a Live Activity after 8 hours, before this event ends"),
                    ]
                }
            })
    }
}
