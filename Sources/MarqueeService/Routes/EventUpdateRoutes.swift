// Updates and ends (`ingest`): the hot path. A whole content-state is validated before it is stored;
// a merge patch is applied to the event's latest state and the result validated, and IngestRepository
// stores it only if that state is still the latest (else it is applied again to the newer one). Either
// way the real APNs payload (state, alert, stale date, relevance score, dismissal date, with the widest of these
// the send may add under the event's freshness policy) is built and
// refused with 422 `payload_too_large` past 4,096 bytes, so every accepted update can travel as a
// broadcast or a device push. The answer is 202 only once the
// update, the latest state and the outbox row are committed together.
//
// `Idempotency-Key` (per API key, 24 h): the request is identified by SHA-256 of method, path and body;
// the same key with the same request gets the first answer byte for byte (rebuilt from the stored
// update), with another request 422 `idempotency_key_reused`. Refusals (4xx) leave no key behind.
import Crypto
import Foundation
import MarqueeCore
import MarqueeStore
import Network

extension EventRoutes {
    func registerUpdates(in table: inout RouteTable) {
        table.add("POST", "/v1/events/{id}/updates", access: .scope(.ingest), takesBody: true) { [self] request in
            try await ingestUpdate(request, action: .update)
        }
        table.add("POST", "/v1/events/{id}/end", access: .scope(.ingest), takesBody: true) { [self] request in
            try await ingestUpdate(request, action: .end)
        }
    }

    private func ingestUpdate(_ request: APIRequest, action: UpdateAction) async throws -> HTTPResponse {
        let eventID = try Self.eventID(request)
        let idempotency = try Self.idempotency(request)
        let updateRequest = try UpdateRequest(body: request.body, action: action, maxClockSkew: maxClockSkew)
        let (type, startOverhead) = try await attributeType(eventID: eventID, key: request.key)
        let encodedWhole = try updateRequest.encodedContentState(type)
        let draft = updateRequest.draft(apiKeyID: request.key?.databaseID)
        // An end says how many accepted starts it cannot reach (read before it is queued, so the stored answer has it).
        let unreachable = action == .end ? try await events.unreachableStarts(eventID: eventID) : 0
        let answerOf: @Sendable (IngestedUpdate) -> StoredResponse = { update in
            var answer = Self.json(update, action: action).objectValue ?? [:]
            if let warning = Self.unreachableStartsWarning(unreachable) {
                answer["warnings"] = [warning]
                answer["unreachableStarts"] = .int(Int64(unreachable))
            }
            return StoredResponse(status: 202, body: Data(JSONValue.object(answer).jsonBytes))
        }
        let appID = request.key?.appID
        let result: IngestResult
        do {
            if let encodedWhole {
                result = try await ingest.ingest(
                    eventID: eventID, draft, state: try updateRequest.checked(encodedWhole, startOverhead: startOverhead), appID: appID,
                    idempotency: idempotency, response: answerOf)
            } else {
                result = try await ingest.ingest(
                    eventID: eventID, draft, appID: appID, idempotency: idempotency,
                    contentState: { snapshot in
                        try updateRequest.nextState(after: snapshot.latestState, type: type, startOverhead: startOverhead)
                    }, response: answerOf)
            }
        } catch PipelineError.eventNotFound {
            throw APIError.notFound("event \(eventID)")
        } catch PipelineError.eventClosed(_, let status) {
            throw APIError.conflict(
                status == .ending
                    ? "event \(eventID) is ending and takes only another end"
                    : "event \(eventID) is \(status.rawValue) and takes no more updates", field: nil)
        } catch PipelineError.endAlreadyAccepted {
            throw APIError.conflict(
                "event \(eventID) is ending already: an end was accepted; send \"replace\": true to "
                    + "replace it (its state, dismissal date and at)", field: "replace")
        } catch PipelineError.eventBusy {
            throw APIError(
                status: 503, code: "event_busy",
                message: "other updates of event \(eventID) kept changing the state this patch applies to; retry",
                field: nil)
        } catch PipelineError.idempotencyKeyReused {
            throw APIError(
                status: 422, code: "idempotency_key_reused",
                message: "this Idempotency-Key was used in the last 24 h with another request; use a new key",
                field: "idempotency-key")
        }
        if case .accepted(let update, _) = result, update.disposition == .pending {
            notifier?.committed(urgent: draft.urgent, dueIn: update.dueIn)
            if action == .end { try await EndWithoutChannel(channels: channels, events: events).endIfNoChannelCarries(eventID: eventID) }
        }
        let answer = result.response
        var headers: HTTPHeaders = ["content-type": "application/json"]
        // As Stripe does: a replay is the stored answer byte for byte, and says that it is one.
        if case .replayed = result { headers.add("idempotent-replayed", "true") }
        return HTTPResponse(status: answer.status, headers: headers, body: Array(answer.body))
    }

    /// Refuses a dismissal date more than 4 hours after the end goes out (now, or its `at`) with 422 naming it.
    static func checkDismissal(_ dismissalDate: Date, notBefore: Date?) throws(APIError) {
        let latest = DismissalPolicy.latest(sentAt: Date(), notBefore: notBefore)
        guard dismissalDate <= latest else {
            throw APIError.validation(
                "is \(Int(dismissalDate.timeIntervalSince(latest) + DismissalPolicy.maximumAfterEnd)) s after the end "
                    + "(\(notBefore == nil ? "now" : "its at")); an ended Live Activity stays at most 4 hours, so at the latest "
                    + latest.ISO8601Format(), field: "dismissalDate")
        }
    }

    /// The event's attribute type and the bytes its push-to-start adds to a state (nil: it has no start
    /// alert), cached per event. 404 for an event outside the key's app.
    private func attributeType(eventID: Int, key: VerifiedAPIKey?) async throws -> (ActivityType, startOverhead: Int?) {
        if let typeID = typeOfEvent.typeID(eventID: eventID), let overhead = typeOfEvent.startOverhead(eventID: eventID),
            let stored = try await types.find(id: typeID)
        {
            return (stored.type, overhead)
        }
        guard let event = try await events.get(id: eventID, appID: key?.appID), let stored = try await types.find(id: event.attributeTypeID)
        else { throw APIError.notFound("event \(eventID)") }
        let alert = event.startAlert.flatMap { try? LiveActivityAlert(json: $0, at: ["startAlert"]) }
        let overhead = EventRoutes.startOverhead(typeName: stored.type.name, attributes: event.attributes, alert: alert)
        typeOfEvent.remember(eventID: eventID, typeID: event.attributeTypeID, startOverhead: .some(overhead))
        return (stored.type, overhead)
    }

    /// The `Idempotency-Key` header, bound to the caller's key and a hash of method, path and body.
    private static func idempotency(_ request: APIRequest) throws(APIError) -> IdempotencyRequest? {
        guard let key = request.http.headers["idempotency-key"] else { return nil }
        guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw APIError.badRequest("an Idempotency-Key is 1 to 255 printable ASCII characters", field: "idempotency-key")
        }
        guard let apiKeyID = request.key?.databaseID else { return nil }
        // The body as a JSON value, not as bytes: the same request re-serialized by a retrying client (other
        // whitespace, another key order) is the same request.
        let head = Array("\(request.http.method) \(request.http.path)\n".utf8)
        let value = request.body?.sortingKeys().jsonBytes ?? request.http.body
        // Keys stored before this hashed the bytes (they live 24 h): a retry of those still matches.
        return IdempotencyRequest(
            apiKeyID: apiKeyID, key: key, requestHash: Data(SHA256.hash(head + value)),
            earlierHashes: [Data(SHA256.hash(head + request.http.body))])
    }

    /// The answer to an accepted update or end.
    static func json(_ update: IngestedUpdate, action: UpdateAction) -> JSONValue {
        [
            "update": [
                "id": .int(Int64(update.id)),
                "event": .int(Int64(update.eventID)),
                "action": .string(action.rawValue),
                "disposition": .string(update.disposition.rawValue),
                "occurredAt": json(update.occurredAt),
                "receivedAt": json(update.receivedAt),
            ]
        ]
    }
}
