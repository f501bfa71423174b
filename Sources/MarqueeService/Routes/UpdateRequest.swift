// What an update or an end says, read from its body before any database work: the part of
// `POST /v1/events/{id}/updates` and `…/end` that a caller's bytes reach first. It has no I/O, so the route,
// its tests and the update-body fuzzer (Fuzz/) share it. Every refusal is an `APIError` naming the field.
import Foundation
import MarqueeCore
import MarqueeStore

/// An update's or an end's body, validated; the content-state is checked against the event's type later.
public struct UpdateRequest: Sendable {
    public let action: UpdateAction
    /// The whole new content-state, as sent (not yet checked against the type).
    public let contentState: JSONValue?
    /// A JSON merge patch to the latest content-state, as sent.
    public let contentStatePatch: JSONValue?
    public let alert: LiveActivityAlert?
    public let staleDate: Date?
    public let relevanceScore: Double?
    public let priority: RequestedPriority
    /// When the feed saw it; nil: the time of arrival under the event lock (IngestRepository), never superseded.
    public let occurredAt: Date?
    /// An end's dismissal date.
    public let dismissalDate: Date?
    /// An end's `at`: not sent before.
    public let notBefore: Date?
    /// An end's `replace`: it replaces an end already accepted.
    public let replacesEnd: Bool

    static let updateFields: Set<String> = [
        "contentState", "contentStatePatch", "alert", "staleDate", "relevanceScore", "priority", "occurredAt",
    ]
    static let endFields = updateFields.union(["dismissalDate", "at", "replace"])

    /// Reads a body (nil: none was sent). `maxClockSkew`: how far ahead of this server's clock `occurredAt` may be.
    public init(body: JSONValue?, action: UpdateAction, maxClockSkew: TimeInterval) throws(APIError) {
        let fields = try JSONFields(body ?? .null, at: .root)
        try fields.allowOnly(action == .end ? Self.endFields : Self.updateFields)
        self.action = action
        contentState = fields.optional("contentState")
        contentStatePatch = fields.optional("contentStatePatch")
        if contentState != nil, contentStatePatch != nil {
            throw APIError.validation("send contentState or contentStatePatch, not both", field: "contentStatePatch")
        }
        if action == .update, contentState == nil, contentStatePatch == nil {
            throw APIError.validation(
                "required: contentState (the whole state) or contentStatePatch (a JSON merge patch)",
                field: "contentState")
        }
        alert = try fields.optional("alert").map(Self.alert)
        staleDate = try fields.optionalDate("staleDate")
        let relevanceScore = try fields.optionalDouble("relevanceScore")
        if let relevanceScore, !FreshnessSettings.scoreRange.contains(relevanceScore) {
            throw APIError.validation("relevanceScore \(FreshnessSettings.scoreRule)", field: "relevanceScore")
        }
        self.relevanceScore = relevanceScore
        priority = try fields.choice("priority", default: .auto)
        let occurredAt = try fields.optionalDate("occurredAt")
        if let occurredAt, occurredAt.timeIntervalSinceNow > maxClockSkew {
            throw APIError.validation(
                "occurredAt is \(Int(occurredAt.timeIntervalSinceNow)) s ahead of the server's clock, more than the "
                    + "\(Int(maxClockSkew)) s allowed (serve --max-clock-skew): it would supersede every true update until then; "
                    + "check the feed's clock", field: "occurredAt")
        }
        self.occurredAt = occurredAt
        dismissalDate = action == .end ? try fields.optionalDate("dismissalDate") : nil
        notBefore = action == .end ? try fields.optionalDate("at") : nil
        replacesEnd = action == .end ? try fields.optionalBool("replace") ?? false : false
        if let dismissalDate { try EventRoutes.checkDismissal(dismissalDate, notBefore: notBefore) }
    }

    /// What the store is given besides the state.
    public func draft(apiKeyID: Int?) -> UpdateDraft {
        UpdateDraft(
            action: action, alert: alert?.json, staleDate: staleDate, dismissalDate: dismissalDate,
            relevanceScore: relevanceScore, priority: priority, occurredAt: occurredAt,
            apiKeyID: apiKeyID, urgent: priority == .high || alert != nil, notBefore: notBefore,
            replacesEnd: replacesEnd)
    }

    /// The whole content-state in app form, validated against `type` (nil: the request sent a patch or nothing).
    public func encodedContentState(_ type: ActivityType) throws(APIError) -> JSONValue? {
        guard let contentState else { return nil }
        return try EventRoutes.validated { () throws(ValidationError) in try type.encodeContentState(contentState) }
    }

    /// The state this request leaves on an event whose latest state is `latest`: its patch applied, or the latest
    /// state (an end without a state), checked by `checked`.
    public func nextState(after latest: JSONValue?, type: ActivityType, startOverhead: Int?) throws(APIError) -> JSONValue {
        if let contentStatePatch {
            return try checked(
                try EventRoutes.validated { () throws(ValidationError) in
                    try type.patchContentState(latest ?? [:], with: contentStatePatch, at: ["contentStatePatch"])
                }, startOverhead: startOverhead)
        }
        guard let latest else {
            throw APIError.validation("the event has no content-state yet; send one", field: "contentState")
        }
        return try checked(latest, startOverhead: startOverhead)
    }

    /// Refuses a state whose APNs payload would not fit (422 `payload_too_large`), or, for an update of an event
    /// that starts its audience (`startOverhead`: what its push-to-start adds), whose push-to-start would not fit
    /// a device push (422 `start_payload_too_large`). So every accepted update can travel.
    public func checked(_ state: JSONValue, startOverhead: Int?) throws(APIError) -> JSONValue {
        try EventRoutes.checkSize(
            action, state: state,
            explicit: SendTimeFields(staleDate: staleDate, relevanceScore: relevanceScore, dismissalDate: dismissalDate), alert: alert)
        if action == .update, let startOverhead, state.jsonBytes.count + startOverhead > PayloadLimit.device.rawValue {
            throw APIError(
                status: 422, code: "start_payload_too_large",
                message: "with this content-state the event's push-to-start (attributes, state and start alert) would be "
                    + "\(state.jsonBytes.count + startOverhead) bytes, more than the \(PayloadLimit.device.rawValue) a device push takes",
                field: contentState != nil ? "contentState" : "contentStatePatch")
        }
        return state
    }

    /// An alert as the API takes it: `title` and `body` are a string or `{"locKey", "locArgs"}`; `sound` is optional.
    private static func alert(_ value: JSONValue) throws(APIError) -> LiveActivityAlert {
        func apsForm(_ text: JSONValue?) -> JSONValue? {
            guard case .object(let object)? = text else { return text }
            var converted = JSONObject()
            for (key, member) in object { converted[key == "locKey" ? "loc-key" : key == "locArgs" ? "loc-args" : key] = member }
            return .object(converted)
        }
        var converted = value
        if case .object(var object) = value {
            for key in ["title", "body"] { if let text = apsForm(object[key]) { object[key] = text } }
            converted = .object(object)
        }
        do {
            return try LiveActivityAlert(json: converted, at: ["alert"])
        } catch {
            let field = "\(error.path)".replacingOccurrences(of: "loc-key", with: "locKey").replacingOccurrences(of: "loc-args", with: "locArgs")
            let message = error.description.replacingOccurrences(of: "loc-key", with: "locKey").replacingOccurrences(of: "loc-args", with: "locArgs")
            throw APIError.validation(message, field: field)
        }
    }
}
