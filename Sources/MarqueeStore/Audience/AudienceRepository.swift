// An event's audience, read in keyset pages, and the registry's counts. The audience is every installation
// that follows the event or one of its topics, has Live Activities enabled, and holds a current
// push-to-start token that APNs has not refused. Each page reads at most `limit` follows from each source
// (`follows_event_unique` for the event, `follows_topic_unique` per topic) after the cursor, in installation
// order, so a page costs the same at the start of a million as at its end.
import Foundation
import MarqueeCore
import Postgres

/// Audience pages and registry counts.
public struct AudienceRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The statement of one page, exposed for the plan tests.
    public static func pageStatement(eventID: Int, after: Int, limit: Int) -> PostgresQuery {
        """
        WITH run AS (SELECT e.id AS event_id, e.app_id, e.topics, true AS direct FROM events e WHERE e.id = \(eventID)),
        page AS (\(fragment: followers(eventID: eventID, after: after, through: nil, limit: limit)))
        SELECT p.installation, i.installation_id, i.live_activities_enabled, i.os_major, i.os_minor, i.os_patch,
               i.push_to_start_token, i.token_refused_reason
        FROM page p
        JOIN installations i ON i.id = p.installation
        ORDER BY p.installation
        """
    }

    /// `(installation, direct)` of an audience in (after, through]: the followers of `run`, a CTE with the
    /// columns `app_id`, `topics` (the topics it starts) and `direct` (whether the followers of event
    /// `eventID` itself are part of it). The event id is bound, not joined from `run`, so the plan reads
    /// `follows_event_unique`. Each source is read in installation order up to `limit`, then the first
    /// `limit` of their union, so a page costs the same at the start of a million as at its end. The one
    /// home of the audience's shape, for these pages and the start fan-out's chunks.
    static func followers(eventID: Int, after: Int, through: Int?, limit: Int?) -> PostgresQuery {
        // The upper bound is part of the statement's text only when there is one, so that it is an index
        // condition: `($n IS NULL OR installation <= $n)` cannot be, and a chunk's read then ran on to the end of
        // the event's follows (a scan of the rest of the audience per chunk).
        let upTo: PostgresQuery = through.map { "AND f.installation <= \($0)" } ?? ""
        return """
            SELECT installation, bool_or(direct) AS direct FROM (
                (SELECT f.installation, true AS direct FROM run, follows f
                 WHERE run.direct AND f.event_id = \(eventID) AND f.installation > \(after) \(fragment: upTo)
                 ORDER BY f.installation LIMIT \(limit))
                UNION ALL
                (SELECT t.installation, false FROM run, unnest(run.topics) AS wanted (topic), LATERAL (
                    SELECT f.installation FROM follows f
                    WHERE f.app_id = run.app_id AND f.topic = wanted.topic AND f.installation > \(after) \(fragment: upTo)
                    ORDER BY f.installation LIMIT \(limit)) t)
            ) sources
            GROUP BY installation ORDER BY installation LIMIT \(limit)
            """
    }

    /// The audience members after installation `after` (0: from the start), at most `limit` follows read.
    public func page(eventID: Int, after: Int = 0, limit: Int = 1000) async throws -> AudiencePage {
        let rows = try await pool.query(Self.pageStatement(eventID: eventID, after: after, limit: limit))
        var members: [AudienceMember] = []
        members.reserveCapacity(rows.count)
        var last: Int?
        for row in rows {
            let installation: Int = try row.decode(column: "installation")
            last = installation
            guard try row.decode(Bool.self, column: "live_activities_enabled"),
                let token = try row.decode(String?.self, column: "push_to_start_token"),
                try row.decode(String?.self, column: "token_refused_reason") == nil
            else { continue }
            let version = try row.osVersion()
            members.append(
                AudienceMember(
                    installation: installation, installationID: try row.decode(column: "installation_id"),
                    pushToStartToken: token, osVersion: version))
        }
        return AudiencePage(members: members, nextAfter: rows.count < limit ? nil : last)
    }

    /// The registry's counts, for one app or all. `forGauges` counts only what the metrics show: no follows
    /// (a probe of the follows for each installation, seconds at a million) and no activities.
    public func stats(appID: Int?, forGauges: Bool = false) async throws -> AudienceStats {
        var stats = AudienceStats()
        let follows: PostgresStaticSQL =
            forGauges ? "NULL::boolean" : "EXISTS (SELECT 1 FROM follows f WHERE f.installation = i.id)"
        for row in try await pool.query(
            """
            SELECT i.app_id, i.os_major, i.live_activities_enabled AS enabled,
                   CASE WHEN i.push_to_start_token IS NULL THEN 'none' WHEN i.token_refused_reason IS NOT NULL THEN 'refused'
                        ELSE 'current' END AS token,
                   \(follows) AS follows, count(*)::bigint AS n
            FROM installations i
            WHERE \(appID)::bigint IS NULL OR i.app_id = \(appID)
            GROUP BY 1, 2, 3, 4, 5
            """)
        {
            stats.installations.append(
                AudienceStats.InstallationGroup(
                    appID: try row.decode(column: "app_id"), osMajor: try row.decode(column: "os_major"), enabled: try row.decode(column: "enabled"),
                    token: try row.decode(column: "token"), follows: try row.decode(column: "follows"), count: try row.decode(column: "n")))
        }
        if !forGauges {
            for row in try await pool.query(
                """
                SELECT app_id, state, push_type, count(*)::bigint AS n FROM activities
                WHERE \(appID)::bigint IS NULL OR app_id = \(appID) GROUP BY 1, 2, 3
                """)
            {
                stats.activities.append(
                    AudienceStats.ActivityGroup(
                        appID: try row.decode(column: "app_id"), state: try row.decode(column: "state"),
                        pushType: try row.decode(column: "push_type"),
                        count: try row.decode(column: "n")))
            }
        }
        for row in try await pool.query(
            """
            SELECT app_id, reason, outcome, count(*)::bigint AS n FROM token_invalidations
            WHERE \(appID)::bigint IS NULL OR app_id = \(appID) GROUP BY 1, 2, 3
            """)
        {
            stats.invalidations.append(
                AudienceStats.InvalidationGroup(
                    appID: try row.decode(column: "app_id"), reason: try row.decode(column: "reason"), outcome: try row.decode(column: "outcome"),
                    count: try row.decode(column: "n")))
        }
        return stats
    }
}

/// The registry's counts, grouped.
public struct AudienceStats: Sendable {
    /// Installations by app, OS major version (nil: not told), enablement, token state and whether they follow anything.
    public struct InstallationGroup: Sendable {
        public let appID: Int
        public let osMajor: Int?
        public let enabled: Bool
        /// `none`, `current` or `refused`.
        public let token: String
        /// Nil when not counted (`forGauges`).
        public let follows: Bool?
        public let count: Int
    }

    /// Activities by app, state and push type.
    public struct ActivityGroup: Sendable {
        public let appID: Int
        public let state: ActivityLifecycle.State
        public let pushType: ActivityPushType
        public let count: Int
    }

    /// Recorded token refusals by app, reason and outcome.
    public struct InvalidationGroup: Sendable {
        public let appID: Int
        public let reason: String
        public let outcome: InvalidationOutcome
        public let count: Int
    }

    public var installations: [InstallationGroup] = []
    public var activities: [ActivityGroup] = []
    public var invalidations: [InvalidationGroup] = []
}
