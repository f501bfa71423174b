// What the pipeline repositories share: their typed errors, the Postgres conformances of the
// enumerations they persist (declared in MarqueeCore), and the row-decoding shortcuts for JSON and
// raw-value columns.
import Foundation
import MarqueeCore
import Postgres

/// A refusal by a pipeline repository; each case says what the caller should do.
public enum PipelineError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No such event (or not in the given app): answer 404.
    case eventNotFound(Int)
    /// The event is ended or cancelled (or ending, for a plain update): answer 409, nothing was stored.
    case eventClosed(Int, EventStatus)
    /// The event is ending: it took an end already, which a second one replaces only when it says so: answer 409.
    case endAlreadyAccepted(Int)
    /// The app already has an event with this external id: answer 409 and show the existing one.
    case externalIDTaken(appID: Int, externalID: String)
    /// The app or attribute type does not exist, or the type belongs to another app: answer 422.
    case invalidReference(String)
    /// The idempotency key was used in the last 24 h with another request body: answer 422.
    case idempotencyKeyReused(key: String)
    /// Concurrent updates of the event kept changing its latest state under a derived one (a merge
    /// patch): answer 503; the client retries.
    case eventBusy(Int)
    /// The aps.timestamp is not above the channel's last one: take a new one from `TimestampSequencer`.
    case apsTimestampNotIncreasing(channelID: Int, attempted: Int64)
    /// The caller no longer holds the lease (expired, taken over, or released): stop leader work.
    case leaseNotHeld(name: String)
    /// A list cursor that this service did not issue: start again without a cursor.
    case invalidCursor

    public var description: String {
        switch self {
        case .eventNotFound(let id): "event \(id) not found"
        case .eventClosed(let id, let status): "event \(id) is \(status.rawValue) and takes no more updates"
        case .endAlreadyAccepted(let id): "event \(id) is ending already; an end that replaces the first must say so"
        case .externalIDTaken(let app, let external): "app \(app) already has an event with external id \(external); fetch it instead"
        case .invalidReference(let what): "invalid reference: \(what)"
        case .idempotencyKeyReused(let key): "idempotency key \(key) was used with another request body in the last 24 h; use a new key"
        case .eventBusy(let id): "event \(id) kept changing under this update; retry it"
        case .apsTimestampNotIncreasing(let channel, let ts):
            "aps.timestamp \(ts) is not above channel \(channel)'s last one; take the next from TimestampSequencer"
        case .leaseNotHeld(let name): "lease \(name) is not held any more; stop leader work and try to acquire it again"
        case .invalidCursor: "the list cursor is not valid; list again without one"
        }
    }
}

// MarqueeCore's enums are stored through their raw values.
extension EventKind: PostgresCodable {}
extension EventStatus: PostgresCodable {}
extension UpdateAction: PostgresCodable {}
extension UpdateDisposition: PostgresCodable {}

extension JSONValue {
    /// The value bound as jsonb.
    var postgresJSON: PostgresJSON { PostgresJSON(jsonString) }
}

extension PostgresRow {
    /// A jsonb column parsed into a JSONValue; NULL is nil.
    func decodeJSON(column: String) throws -> JSONValue? {
        guard let json = try decode(PostgresJSON?.self, column: column) else { return nil }
        return try JSONValue(parsing: json.text)
    }

    /// A text column decoded through a raw-representable type's init (MarqueeCore's enums).
    func decodeRaw<T: RawRepresentable>(_ type: T.Type, column: String) throws -> T where T.RawValue == String {
        let text = try decode(String.self, column: column)
        guard let value = T(rawValue: text) else {
            throw StoredValueError(description: "column \(column): \(text) is not a valid \(T.self)")
        }
        return value
    }

    /// A nullable text column decoded through a raw-representable type.
    func decodeRaw<T: RawRepresentable>(_ type: T?.Type, column: String) throws -> T? where T.RawValue == String {
        isNull(column: column) ? nil : try decodeRaw(T.self, column: column)
    }

    func decodeChannelState(column: String = "state") throws -> StoredChannelState {
        try decodeRaw(StoredChannelState.self, column: column)
    }
}

/// A value in a stored row that the schema should have prevented.
struct StoredValueError: Error, CustomStringConvertible {
    var description: String
}
