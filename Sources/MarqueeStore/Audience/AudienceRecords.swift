// The values the audience repositories take and return (Sql/0023): installations, their push-to-start
// tokens, follows and Live Activities, as stored.
import Foundation
import MarqueeCore
import Postgres

extension ActivityPushType: PostgresCodable {}
extension ActivityLifecycle.State: PostgresCodable {}
extension TokenKind: PostgresCodable {}
extension InvalidationOutcome: PostgresCodable {}

extension PostgresRow {
    /// An installation's OS version from its `os_major`, `os_minor` and `os_patch` columns; nil when not told.
    func osVersion() throws -> OSVersion? {
        guard let major = try decode(Int?.self, column: "os_major") else { return nil }
        return OSVersion(major: major, minor: try decode(column: "os_minor"), patch: try decode(column: "os_patch"))
    }
}

/// A refusal by an audience repository; each case says what the caller should answer.
public enum AudienceError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No such installation in the app: answer 404.
    case installationNotFound(String)
    /// The installation id exists under several apps and none was named: answer 409 asking for `app`.
    case installationInSeveralApps(String, apps: [Int])
    /// A follow or an activity names an event the app does not have: answer 422 naming the item.
    case unknownEvent(EventReference, index: Int?)
    /// The installation would follow more than `limit` events and topics: answer 422.
    case tooManyFollows(count: Int, limit: Int)
    /// A registration for an activity that ended or was dismissed: answer 409 `activity_ended`.
    case activityEnded(String, ActivityLifecycle.State)
    /// An activity registered again for another event: answer 409 (an activity's attributes never change).
    case activityEventChanged(String, storedEventID: Int)
    /// No such activity of the installation: answer 404.
    case activityNotFound(String)
    /// Another registration took the token at the same moment: answer 409; the caller retries.
    case tokenContended

    public var description: String {
        switch self {
        case .installationNotFound(let id): "installation \(id) not found"
        case .installationInSeveralApps(let id, let apps):
            "installation \(id) exists in apps \(apps.map(String.init).joined(separator: ", ")); pass ?app="
        case .unknownEvent(let reference, _): "the app has no event \(reference)"
        case .tooManyFollows(let count, let limit): "\(count) follows; an installation follows at most \(limit) events and topics"
        case .activityEnded(let id, let state): "activity \(id) is \(state.rawValue); a new activity has a new id"
        case .activityEventChanged(let id, let event): "activity \(id) shows event \(event); an activity's event never changes"
        case .activityNotFound(let id): "activity \(id) not found"
        case .tokenContended: "another registration took this token at the same moment; retry"
        }
    }
}

/// The lengths of what an app's backend registers (the schema's CHECKs in Sql/0023), in characters: one
/// home for the API's validation and the import's.
public enum RegistrationLimits {
    /// An installation id, an activity id, a topic, an event's external id.
    public static let identifier = 1...200
    public static let appBuild = 1...100
    public static let locale = 1...50
}

/// An event as an app names it: Marquee's id or the app's external id.
public enum EventReference: Sendable, Hashable, CustomStringConvertible {
    case id(Int)
    case externalID(String)

    public var description: String {
        switch self {
        case .id(let id): "\(id)"
        case .externalID(let external): "with external id '\(external)'"
        }
    }
}

/// What a registration (`PUT /v1/installations/{id}`) says; nil fields leave the stored value as it is.
public struct InstallationRegistration: Sendable {
    public var appID: Int
    public var installationID: String
    /// Lower-case hexadecimal (`DeviceTokenText`).
    public var pushToStartToken: String?
    public var osVersion: String?
    public var appBuild: String?
    public var locale: String?
    public var frequentPushesEnabled: Bool?
    public var liveActivitiesEnabled: Bool?

    public init(
        appID: Int, installationID: String, pushToStartToken: String? = nil, osVersion: String? = nil, appBuild: String? = nil,
        locale: String? = nil, frequentPushesEnabled: Bool? = nil, liveActivitiesEnabled: Bool? = nil
    ) {
        self.appID = appID
        self.installationID = installationID
        self.pushToStartToken = pushToStartToken
        self.osVersion = osVersion
        self.appBuild = appBuild
        self.locale = locale
        self.frequentPushesEnabled = frequentPushesEnabled
        self.liveActivitiesEnabled = liveActivitiesEnabled
    }
}

/// An installation's push-to-start token as stored.
public struct StoredPushToStartToken: Sendable, Equatable {
    public let token: String
    public let registeredAt: Date
    public let seenAt: Date
    public let previousToken: String?
    public let previousUntil: Date?
    public let refusedReason: String?
    public let refusedAt: Date?
}

/// One follow: an event (with its external id) or a topic.
public enum StoredFollow: Sendable, Hashable {
    case event(id: Int, externalID: String)
    case topic(String)
}

/// A Live Activity as stored.
public struct StoredActivity: Sendable, Equatable {
    public let activityID: String
    public let eventID: Int
    public let attributeType: String
    public let pushType: ActivityPushType
    public let pushToken: String?
    public let state: ActivityLifecycle.State
    public let createdAt: Date
    public let updatedAt: Date
    public let endedAt: Date?
    /// When iOS starts it, for one the app scheduled.
    public let startDate: Date?
    /// The event's audience round it belongs to (the round current when it was first registered).
    public let audienceRound: Int
    /// The user dismissed it while its round ran: no start of the event brings it back.
    public let userDismissed: Bool

    static let columns =
        "activity_id, event_id, attribute_type, push_type, push_token, state, created_at, updated_at, ended_at, start_date, audience_round, user_dismissed"
    /// `columns`, each of table `a`.
    static let qualifiedColumns = columns.split(separator: ",").map { "a." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ")

    init(row: PostgresRow) throws {
        activityID = try row.decode(column: "activity_id")
        eventID = try row.decode(column: "event_id")
        attributeType = try row.decode(column: "attribute_type")
        pushType = try row.decode(column: "push_type")
        pushToken = try row.decode(column: "push_token")
        state = try row.decode(column: "state")
        createdAt = try row.decode(column: "created_at")
        updatedAt = try row.decode(column: "updated_at")
        endedAt = try row.decode(column: "ended_at")
        startDate = try row.decode(column: "start_date")
        audienceRound = try row.decode(column: "audience_round")
        userDismissed = try row.decode(column: "user_dismissed")
    }
}

/// An installation with everything stored about it.
public struct InstallationRecord: Sendable {
    /// Marquee's row id (the audience's keyset order).
    public let id: Int
    public let appID: Int
    public let installationID: String
    public let osVersion: String?
    public let parsedOSVersion: OSVersion?
    public let appBuild: String?
    public let locale: String?
    public let frequentPushesEnabled: Bool
    public let liveActivitiesEnabled: Bool
    public let topicRefusedAt: Date?
    public let createdAt: Date
    public let updatedAt: Date
    public let registeredAt: Date
    public let pushToStartToken: StoredPushToStartToken?
    public let follows: [StoredFollow]
    public let activities: [StoredActivity]
}

/// One installation of an event's audience: who may be started, and on which path.
public struct AudienceMember: Sendable, Equatable {
    public let installation: Int
    public let installationID: String
    public let pushToStartToken: String
    public let osVersion: OSVersion?
}

/// One keyset page of an audience: members in installation order, and where the next page starts (nil: last).
public struct AudiencePage: Sendable {
    public let members: [AudienceMember]
    public let nextAfter: Int?
}
