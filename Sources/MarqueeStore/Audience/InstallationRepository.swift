// Installations, their push-to-start tokens, follows and Live Activities (Sql/0023), as an app's backend
// registers them. Two rules keep tokens from being lost the way peers lose them: a registration that
// carries no token (absent or null) never touches the stored one, and an activity that ended stays a
// tombstone, so a late token update of it is refused instead of overwriting the next activity's token.
// Every write of one installation runs in one transaction that locks the installation row first.
import Foundation
import MarqueeCore
import Postgres

/// The installation registry.
public struct InstallationRepository: Sendable {
    let pool: PostgresPool

    /// How many events and topics one installation may follow.
    public static let followLimit = 500

    /// The SET list that leaves an installation without a push-to-start token (cleared, moved away, invalid or stale):
    /// `PushToStartTokenSlot`'s `clear`.
    static let tokenCleared: PostgresStaticSQL = """
        push_to_start_token = NULL, token_registered_at = NULL, token_seen_at = NULL, token_refused_reason = NULL, \
        token_refused_at = NULL, updated_at = now()
        """

    public init(pool: PostgresPool) { self.pool = pool }

    // MARK: Finding an installation

    /// The row id of the installation with the app's id `installationID`, in `appID` when given. Without an
    /// app, an id found under several apps throws `installationInSeveralApps`; none throws `installationNotFound`.
    public func find(installationID: String, appID: Int?) async throws -> (id: Int, appID: Int) {
        let rows = try await pool.query(Self.findStatement(installationID: installationID, appID: appID))
        switch rows.count {
        case 0: throw AudienceError.installationNotFound(installationID)
        case 1: return (try rows[0].decode(column: "id"), try rows[0].decode(column: "app_id"))
        default: throw AudienceError.installationInSeveralApps(installationID, apps: try rows.map { try $0.decode(Int.self, column: "app_id") })
        }
    }

    /// The apps that have an installation with this id (for a key that serves every app).
    public func apps(installationID: String) async throws -> [Int] {
        try await pool.query(Self.findStatement(installationID: installationID, appID: nil)).map { try $0.decode(Int.self, column: "app_id") }
    }

    /// `id, app_id` of the installations with this id, in `appID` or in every app (at most 10). Found app by app
    /// through `(app_id, installation_id)`: an index of the ids alone cost every write of an installation (the
    /// import's million, Sql/0035) for the lookups of keys that serve every app, and apps are few.
    static func findStatement(installationID: String, appID: Int?) -> PostgresQuery {
        """
        SELECT i.id, i.app_id FROM apps a JOIN installations i ON i.app_id = a.id AND i.installation_id = \(installationID)
        WHERE \(appID)::bigint IS NULL OR a.id = \(appID)
        ORDER BY i.app_id LIMIT 10
        """
    }

    // MARK: Registration

    /// Registers or updates an installation; nil fields keep what is stored. A token held by another
    /// installation of the app moves here (the app was reinstalled); a new token keeps the one it replaces
    /// as `previous` for `previousTokenRetention`. Returns the stored record and whether it was created.
    public func register(_ registration: InstallationRegistration, previousTokenRetention: TimeInterval) async throws -> (
        InstallationRecord, created: Bool
    ) {
        let version = registration.osVersion.flatMap(OSVersion.init)
        let hasVersion = version != nil
        do {
            return try await pool.withTransaction { tx in
                let row = try await tx.query(
                    """
                    INSERT INTO installations AS i (app_id, installation_id, os_version, os_major, os_minor, os_patch, app_build, locale,
                                                    frequent_pushes_enabled, live_activities_enabled)
                    VALUES (\(registration.appID), \(registration.installationID), \(hasVersion ? registration.osVersion : nil),
                            \(version?.major), \(version?.minor), \(version?.patch), \(registration.appBuild), \(registration.locale),
                            coalesce(\(registration.frequentPushesEnabled)::boolean, true), coalesce(\(registration.liveActivitiesEnabled)::boolean, true))
                    ON CONFLICT (app_id, installation_id) DO UPDATE SET
                        os_version = CASE WHEN \(hasVersion) THEN EXCLUDED.os_version ELSE i.os_version END,
                        os_major = CASE WHEN \(hasVersion) THEN EXCLUDED.os_major ELSE i.os_major END,
                        os_minor = CASE WHEN \(hasVersion) THEN EXCLUDED.os_minor ELSE i.os_minor END,
                        os_patch = CASE WHEN \(hasVersion) THEN EXCLUDED.os_patch ELSE i.os_patch END,
                        app_build = coalesce(EXCLUDED.app_build, i.app_build),
                        locale = coalesce(EXCLUDED.locale, i.locale),
                        frequent_pushes_enabled = coalesce(\(registration.frequentPushesEnabled)::boolean, i.frequent_pushes_enabled),
                        live_activities_enabled = coalesce(\(registration.liveActivitiesEnabled)::boolean, i.live_activities_enabled),
                        updated_at = now(), registered_at = now()
                    RETURNING id, (xmax = 0) AS created
                    """)[0]
                let id: Int = try row.decode(column: "id")
                let created: Bool = try row.decode(column: "created")
                if let token = registration.pushToStartToken {
                    try await Self.storeToken(token, installation: id, appID: registration.appID, retention: previousTokenRetention, on: tx)
                }
                return (try await Self.record(id: id, on: tx), created)
            }
        } catch let error as PostgresError where error.sqlState == .uniqueViolation && error.constraint == "installations_push_to_start_token_unique"
        {
            throw AudienceError.tokenContended
        }
    }

    /// Makes `token` the installation's current token: taken from another installation of the app that held
    /// it, and kept (seen again) when unchanged.
    private static func storeToken(_ token: String, installation: Int, appID: Int, retention: TimeInterval, on tx: PostgresConnection) async throws {
        try await tx.execute(
            """
            UPDATE installations SET \(Self.tokenCleared)
            WHERE app_id = \(appID) AND push_to_start_token = \(token) AND id <> \(installation)
            """)
        try await tx.execute(
            """
            UPDATE installations SET \(fragment: Self.tokenRotation(to: "\(token)", at: "now()", retention: retention))
            WHERE id = \(installation)
            """)
    }

    /// The assignments of an `UPDATE installations` that make `new` the current token as of `time`: a token it
    /// replaces is kept as the previous one for `retention` (to match a late 410); the same token again is only
    /// seen again, keeping its refusal; a new one starts unrefused. A NULL `new` (an import row without a token)
    /// leaves every token column as it is. `PushToStartTokenSlot`'s rotation, written for many rows at once (the
    /// import); PushToStartTokenSQLTests holds it to that value's table. For the API and for imports.
    static func tokenRotation(to new: PostgresQuery, at time: PostgresQuery, retention: TimeInterval) -> PostgresQuery {
        """
        previous_token = CASE WHEN \(fragment: new)::text IS NULL OR push_to_start_token IS NULL OR push_to_start_token = \(fragment: new)
                              THEN previous_token ELSE push_to_start_token END,
        previous_token_until = CASE WHEN \(fragment: new)::text IS NULL OR push_to_start_token IS NULL OR push_to_start_token = \(fragment: new)
                                    THEN previous_token_until ELSE now() + make_interval(secs => \(retention)::double precision) END,
        token_registered_at = CASE WHEN \(fragment: new)::text IS NULL OR push_to_start_token = \(fragment: new) THEN token_registered_at
                                   ELSE \(fragment: time) END,
        token_seen_at = CASE WHEN \(fragment: new)::text IS NULL THEN token_seen_at
                             WHEN push_to_start_token = \(fragment: new) THEN greatest(token_seen_at, \(fragment: time))
                             ELSE \(fragment: time) END,
        token_refused_reason = CASE WHEN \(fragment: new)::text IS NULL OR push_to_start_token = \(fragment: new) THEN token_refused_reason END,
        token_refused_at = CASE WHEN \(fragment: new)::text IS NULL OR push_to_start_token = \(fragment: new) THEN token_refused_at END,
        push_to_start_token = coalesce(\(fragment: new), push_to_start_token)
        """
    }

    /// Clears the installation's push-to-start token (the app turned push-to-start off); returns whether it had one.
    @discardableResult
    public func clearPushToStartToken(installation: Int) async throws -> Bool {
        try await pool.execute(
            """
            UPDATE installations SET \(Self.tokenCleared)
            WHERE id = \(installation) AND push_to_start_token IS NOT NULL
            """) > 0
    }

    /// Erases the installation: its tokens, follows and activities. Its invalidations keep only the token's hash.
    @discardableResult
    public func erase(installation: Int) async throws -> Bool {
        try await pool.withTransaction { tx in
            try await tx.execute("UPDATE token_invalidations SET token = NULL WHERE installation = \(installation)")
            return try await tx.execute("DELETE FROM installations WHERE id = \(installation)") > 0
        }
    }

    /// Everything stored about the installation (its 100 newest activities).
    public func record(id: Int) async throws -> InstallationRecord {
        try await pool.withConnection { connection in try await Self.record(id: id, on: connection) }
    }

    static func record(id: Int, on connection: PostgresConnection) async throws -> InstallationRecord {
        guard
            let row = try await connection.query(
                """
                SELECT i.id, i.app_id, i.installation_id, i.os_version, i.os_major, i.os_minor, i.os_patch, i.app_build, i.locale,
                       i.frequent_pushes_enabled, i.live_activities_enabled, i.topic_refused_at, i.created_at, i.updated_at, i.registered_at,
                       i.push_to_start_token, i.token_registered_at, i.token_seen_at, i.previous_token, i.previous_token_until,
                       i.token_refused_reason, i.token_refused_at
                FROM installations i
                WHERE i.id = \(id)
                """
            ).first
        else { throw AudienceError.installationNotFound("\(id)") }
        let token: StoredPushToStartToken? =
            if let text = try row.decode(String?.self, column: "push_to_start_token") {
                StoredPushToStartToken(
                    token: text, registeredAt: try row.decode(column: "token_registered_at"),
                    seenAt: try row.decode(column: "token_seen_at"), previousToken: try row.decode(column: "previous_token"),
                    previousUntil: try row.decode(column: "previous_token_until"),
                    refusedReason: try row.decode(column: "token_refused_reason"), refusedAt: try row.decode(column: "token_refused_at"))
            } else { nil }
        let version = try row.osVersion()
        let follows = try await connection.query(
            """
            SELECT f.event_id, e.external_id, f.topic FROM follows f LEFT JOIN events e ON e.id = f.event_id
            WHERE f.installation = \(id) ORDER BY f.topic NULLS FIRST, f.event_id
            """
        ).map { row -> StoredFollow in
            if let topic = try row.decode(String?.self, column: "topic") { return .topic(topic) }
            return .event(id: try row.decode(column: "event_id"), externalID: try row.decode(column: "external_id"))
        }
        let activities = try await connection.query(
            """
            SELECT \(unsafeRaw: StoredActivity.columns) FROM activities WHERE installation = \(id) ORDER BY id DESC LIMIT 100
            """
        ).map(StoredActivity.init(row:))
        return InstallationRecord(
            id: id, appID: try row.decode(column: "app_id"), installationID: try row.decode(column: "installation_id"),
            osVersion: try row.decode(column: "os_version"), parsedOSVersion: version, appBuild: try row.decode(column: "app_build"),
            locale: try row.decode(column: "locale"), frequentPushesEnabled: try row.decode(column: "frequent_pushes_enabled"),
            liveActivitiesEnabled: try row.decode(column: "live_activities_enabled"), topicRefusedAt: try row.decode(column: "topic_refused_at"),
            createdAt: try row.decode(column: "created_at"), updatedAt: try row.decode(column: "updated_at"),
            registeredAt: try row.decode(column: "registered_at"), pushToStartToken: token, follows: follows, activities: activities)
    }

    // MARK: Follows

    /// How a follows request changes the set.
    public enum FollowChange: Sendable {
        /// The set becomes exactly these.
        case replace
        /// These are added to the set.
        case add
        /// These leave the set.
        case remove
    }

    /// Changes what the installation follows and returns the new set. An event the app does not have throws
    /// `unknownEvent` naming its index in `events`; a set above `followLimit` throws `tooManyFollows`.
    public func changeFollows(
        _ change: FollowChange, installation: Int, appID: Int, events: [EventReference],
        topics: [String]
    ) async throws -> [StoredFollow] {
        try await pool.withTransaction { tx in
            try await Self.lock(installation: installation, on: tx)
            let eventIDs = try await Self.resolve(events, appID: appID, on: tx)
            let ids = eventIDs.map(String.init)
            switch change {
            case .replace, .add:
                if case .replace = change { try await tx.execute("DELETE FROM follows WHERE installation = \(installation)") }
                try await tx.execute(
                    """
                    INSERT INTO follows (installation, app_id, event_id)
                    SELECT \(installation), \(appID), unnest(\(ids)::text[])::bigint
                    ON CONFLICT (event_id, installation) WHERE event_id IS NOT NULL DO NOTHING
                    """)
                try await tx.execute(
                    """
                    INSERT INTO follows (installation, app_id, topic)
                    SELECT \(installation), \(appID), unnest(\(topics)::text[])
                    ON CONFLICT (app_id, topic, installation) WHERE topic IS NOT NULL DO NOTHING
                    """)
                let count = try await tx.query("SELECT count(*)::bigint AS n FROM follows WHERE installation = \(installation)")[0]
                    .decode(Int.self, column: "n")
                if count > Self.followLimit { throw AudienceError.tooManyFollows(count: count, limit: Self.followLimit) }
            case .remove:
                try await tx.execute(
                    """
                    DELETE FROM follows WHERE installation = \(installation)
                      AND (event_id = ANY(\(ids)::text[]::bigint[]) OR topic = ANY(\(topics)::text[]))
                    """)
            }
            try await tx.execute("UPDATE installations SET updated_at = now() WHERE id = \(installation)")
            return try await Self.record(id: installation, on: tx).follows
        }
    }

    private static func lock(installation: Int, on tx: PostgresConnection) async throws {
        guard try await tx.query("SELECT 1 FROM installations WHERE id = \(installation) FOR UPDATE").first != nil else {
            throw AudienceError.installationNotFound("\(installation)")
        }
    }

    /// The app's event ids for `references`, in order; the first unknown one throws `unknownEvent` with its index.
    static func resolve(_ references: [EventReference], appID: Int, on tx: PostgresConnection) async throws -> [Int] {
        guard !references.isEmpty else { return [] }
        var ids: [String] = []
        var externals: [String] = []
        for reference in references {
            switch reference {
            case .id(let id): ids.append(String(id))
            case .externalID(let external): externals.append(external)
            }
        }
        var byID: Set<Int> = []
        var byExternal: [String: Int] = [:]
        for row in try await tx.query(
            """
            SELECT id, external_id FROM events
            WHERE app_id = \(appID) AND (id = ANY(\(ids)::text[]::bigint[]) OR external_id = ANY(\(externals)::text[]))
            """)
        {
            let id: Int = try row.decode(column: "id")
            byID.insert(id)
            byExternal[try row.decode(column: "external_id")] = id
        }
        return try references.enumerated().map { index, reference in
            switch reference {
            case .id(let id) where byID.contains(id): return id
            case .externalID(let external): if let id = byExternal[external] { return id }
            default: break
            }
            throw AudienceError.unknownEvent(reference, index: index)
        }
    }

    // MARK: Activities

    /// Registers a running activity (a new one, or a new token of one): `pushToken` only for `token` activities;
    /// `startDate` (in the future, checked by the caller) for one the app scheduled, stored `pending` until it runs.
    /// A new activity belongs to the event's current audience round. An activity that ended throws `activityEnded`
    /// and changes nothing; one registered for another event throws `activityEventChanged`. Returns the stored
    /// activity and whether it was created.
    public func registerActivity(
        installation: Int, appID: Int, activityID: String, event: EventReference, attributeType: String,
        pushType: ActivityPushType, pushToken: String?, startDate: Date? = nil
    ) async throws -> (StoredActivity, created: Bool) {
        try await pool.withTransaction { tx in
            try await Self.lock(installation: installation, on: tx)
            let eventID: Int
            do {
                eventID = try await Self.resolve([event], appID: appID, on: tx)[0]
            } catch AudienceError.unknownEvent(let reference, _) {
                throw AudienceError.unknownEvent(reference, index: nil)
            }
            let stored = try await tx.query(
                """
                SELECT state, event_id FROM activities WHERE installation = \(installation) AND activity_id = \(activityID) FOR UPDATE
                """
            ).first
            let state: ActivityLifecycle.State? = try stored?.decode(column: "state")
            // A registration stores an active (or pending) activity, or is refused for one that ended (held by FOR
            // UPDATE, so an end committed meanwhile is seen).
            guard case .store(let next) = ActivityLifecycle.transition(from: state, on: startDate == nil ? .registered : .scheduled) else {
                throw AudienceError.activityEnded(activityID, state ?? .ended)
            }
            if let storedEvent: Int = try stored?.decode(column: "event_id"), storedEvent != eventID {
                throw AudienceError.activityEventChanged(activityID, storedEventID: storedEvent)
            }
            let row = try await tx.query(
                """
                INSERT INTO activities AS a (app_id, installation, activity_id, event_id, attribute_type, push_type, push_token, state, token_seen_at,
                                             start_date, audience_round)
                VALUES (\(appID), \(installation), \(activityID), \(eventID), \(attributeType), \(pushType), \(pushToken), \(next),
                        CASE WHEN \(pushToken)::text IS NULL THEN NULL ELSE now() END, \(startDate),
                        (SELECT audience_round FROM events WHERE id = \(eventID)))
                ON CONFLICT (installation, activity_id) DO UPDATE SET
                    attribute_type = EXCLUDED.attribute_type, push_type = EXCLUDED.push_type, push_token = EXCLUDED.push_token,
                    token_seen_at = EXCLUDED.token_seen_at, state = EXCLUDED.state, start_date = coalesce(EXCLUDED.start_date, a.start_date),
                    updated_at = now()
                RETURNING \(unsafeRaw: StoredActivity.columns), (xmax = 0) AS created
                """)[0]
            return (try StoredActivity(row: row), try row.decode(Bool.self, column: "created"))
        }
    }

    /// Records that the activity ended or was dismissed (`event` is `.ended` or `.dismissed`); it stays as a
    /// tombstone. A repeated report changes nothing. A dismissal recorded while the activity's audience round ran
    /// is the user's (`ActivityLifecycle.dismissalIsTheUsers`): it holds back every later start of the event. An
    /// activity not seen before is recorded as a tombstone of `eventReference`'s event when one is given (an app
    /// that never registered a push-started activity), else throws `activityNotFound`.
    public func endActivity(
        installation: Int, appID: Int, activityID: String, event: ActivityLifecycle.Event, eventReference: EventReference? = nil,
        attributeType: String? = nil
    ) async throws -> StoredActivity {
        let usersDismissal = StartRepository.startableEventStates.sql
        return try await pool.withTransaction { tx in
            try await Self.lock(installation: installation, on: tx)
            let stored = try await tx.query(
                """
                SELECT \(unsafeRaw: StoredActivity.columns) FROM activities
                WHERE installation = \(installation) AND activity_id = \(activityID) FOR UPDATE
                """
            ).first
            let activity = try stored.map(StoredActivity.init(row:))
            guard case .store(let next) = ActivityLifecycle.transition(from: activity?.state, on: event) else { return activity! }
            // The user's dismissal, as ActivityLifecycle.dismissalIsTheUsers says, for activity `a` (its state before
            // this report) of event `e`.
            let usersChoice: PostgresQuery = """
                (\(next == .dismissed) AND a.state IN \(ActivityLifecycle.mirroredStates.sql) AND a.audience_round = e.audience_round
                 AND e.status IN \(usersDismissal))
                """
            guard activity == nil else {
                return try StoredActivity(
                    row: try await tx.query(
                        """
                        UPDATE activities a SET state = \(next), ended_at = coalesce(a.ended_at, now()), updated_at = now(),
                            user_dismissed = a.user_dismissed OR \(fragment: usersChoice)
                        FROM events e
                        WHERE a.installation = \(installation) AND a.activity_id = \(activityID) AND e.id = a.event_id
                        RETURNING \(unsafeRaw: StoredActivity.qualifiedColumns)
                        """)[0])
            }
            guard let eventReference else { throw AudienceError.activityNotFound(activityID) }
            let eventID: Int
            do {
                eventID = try await Self.resolve([eventReference], appID: appID, on: tx)[0]
            } catch AudienceError.unknownEvent(let reference, _) {
                throw AudienceError.unknownEvent(reference, index: nil)
            }
            // A tombstone of the event's current round, with no token (the push type that needs none).
            return try StoredActivity(
                row: try await tx.query(
                    """
                    INSERT INTO activities AS a (app_id, installation, activity_id, event_id, attribute_type, push_type, state, ended_at,
                                                 audience_round, user_dismissed)
                    SELECT \(appID), \(installation), \(activityID), e.id, coalesce(\(attributeType), t.name), \(ActivityPushType.channel),
                           \(next), now(), e.audience_round, (\(next == .dismissed) AND e.status IN \(usersDismissal))
                    FROM events e JOIN attribute_types t ON t.id = e.attribute_type_id
                    WHERE e.id = \(eventID)
                    RETURNING \(unsafeRaw: StoredActivity.qualifiedColumns)
                    """)[0])
        }
    }
}
