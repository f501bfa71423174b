// The start fan-out's chunk work (Sql/0025): claiming a chunk of a run's audience (ChunkLeases), what its starts
// carry, and its members with the planner's facts. The starts' rows (skipped, marked in windows, answered, a dead
// holder's windows settled) are in StartWindows.swift.
import Foundation
import MarqueeCore
import Postgres

extension StartRepository {
    // MARK: chunks

    /// Claims the due chunk first in line whose lease ran out or whose holder stopped beating, for `lease` seconds
    /// (`ChunkLeases`), with its run's event, app, alert and wait for a channel.
    public func claimChunk(instance: String, lease: TimeInterval, now: Date? = nil) async throws -> ClaimedStartChunk? {
        guard let claimed = try await ChunkLeases.starts.claim(instance: instance, lease: lease, now: now, on: pool) else { return nil }
        let run = try await pool.query(
            "SELECT event_id, app_id, alert, channel_wait_until, audience_round FROM start_runs WHERE id = \(claimed.passID)")[0]
        return ClaimedStartChunk(
            id: claimed.id, runID: claimed.passID, eventID: try run.decode(column: "event_id"), appID: try run.decode(column: "app_id"),
            after: claimed.after, through: claimed.through, attempts: claimed.attempts, runAlert: try run.decodeJSON(column: "alert"),
            channelWaitUntil: try run.decode(column: "channel_wait_until"), audienceRound: try run.decode(column: "audience_round"))
    }

    /// Keeps the claim for `lease` more seconds; false when it is no longer this instance's.
    public func renew(_ chunk: ClaimedStartChunk, instance: String, lease: TimeInterval, now: Date? = nil) async throws -> Bool {
        try await ChunkLeases.starts.renew(chunkID: chunk.id, instance: instance, lease: lease, now: now, on: pool)
    }

    /// Ends the chunk (every member settled), keeps its counts, and folds its last acceptance into the run's.
    public func finish(_ chunk: ClaimedStartChunk, instance: String, now: Date? = nil) async throws {
        try await pool.execute(
            """
            WITH finished AS (\(fragment: ChunkLeases.starts.finishStatement(
                chunkID: chunk.id, instance: instance, counts: "counts = \(fragment: Self.chunkCounts)", returning: "c.last_accepted_at",
                now: now)))
            UPDATE start_runs r SET last_accepted_at = greatest(r.last_accepted_at, f.last_accepted_at)
            FROM finished f WHERE r.id = f.pass_id AND f.last_accepted_at IS NOT NULL
            """)
    }

    /// The starts chunk `c` wrote (of its run, in its range, created since it was cut: a later pass's chunk
    /// over the same range writes its own), by state, reason and path, as a JSON array of groups.
    static let chunkCounts: PostgresQuery = """
        (SELECT coalesce(jsonb_agg(jsonb_build_object('state', g.state, 'reason', g.reason, 'path', g.path, 'n', g.n)), '[]'::jsonb)
         FROM (\(fragment: chunkGroups)) g)
        """

    /// Chunk `c`'s starts by state, reason and path (`n`).
    static let chunkGroups: PostgresQuery = """
        SELECT s.state, s.reason, s.path, count(*) AS n FROM starts s
        WHERE s.run_id = c.run_id AND s.installation > c.after_installation AND s.installation <= c.through_installation
          AND s.created_at >= c.created_at
        GROUP BY 1, 2, 3
        UNION ALL
        -- The first sends of its open windows that have no answer yet.
        SELECT \(StartState.sending)::text, NULL, e.path, count(*) FROM start_windows w,
            unnest(w.installations, w.tokens, w.paths) AS e (installation, token, path)
        WHERE w.chunk_id = c.id
          AND NOT EXISTS (SELECT 1 FROM starts s WHERE s.run_id = w.run_id AND s.installation = e.installation AND s.token = e.token)
        GROUP BY 3
        """

    /// The time of run `r`'s last accepted start: its own (done chunks') or an open chunk's.
    static let lastAccepted: PostgresQuery = """
        greatest(r.last_accepted_at, (SELECT max(c.last_accepted_at) FROM start_chunks c WHERE c.run_id = r.id AND NOT c.done))
        """

    /// Gives the chunk back, due again after `delay` seconds.
    public func release(_ chunk: ClaimedStartChunk, instance: String, after delay: TimeInterval, now: Date? = nil) async throws {
        try await ChunkLeases.starts.release(chunkID: chunk.id, instance: instance, after: delay, now: now, on: pool)
    }

    /// What a start of the chunk's event carries, read just before each send window (so a broadcast accepted
    /// meanwhile is in the next window's starts): the event's status and parts, and one consistent read of the
    /// channel's last aps.timestamp with the last broadcast's content-state. Before the first broadcast the
    /// event's latest state goes, with a timestamp from the channel's sequence recorded as its last, so every
    /// later broadcast (and mirrored push) is newer than any start of the event; with no channel at all, the
    /// second before now.
    public func content(of chunk: ClaimedStartChunk, now: Date? = nil) async throws -> StartContent {
        let event = try await pool.query(
            """
            SELECT e.status, e.attributes, e.ends_at, e.start_alert, e.latest_state, t.name AS type_name, a.bundle_id,
                   a.environment, c.id AS channel_id, c.apns_channel_id, c.last_aps_timestamp, c.last_alert_at,
                   b.content_state AS broadcast_state, b.stale_date, b.relevance_score, tr.aps_timestamp AS route_aps_timestamp,
                   \(FreshnessSQL.columns)
            FROM events e
            LEFT JOIN token_routes tr ON tr.event_id = e.id
            JOIN attribute_types t ON t.id = e.attribute_type_id
            \(FreshnessSQL.typePolicyJoin)
            JOIN apps a ON a.id = e.app_id
            LEFT JOIN LATERAL (
                SELECT id, apns_channel_id, last_aps_timestamp, last_alert_at FROM channels
                WHERE event_id = e.id AND state IN \(ChannelLifecycle.broadcastingStates.sql) AND NOT e.channel_lost LIMIT 1
            ) c ON true
            LEFT JOIN LATERAL (
                SELECT content_state, stale_date, relevance_score FROM updates u
                WHERE u.event_id = e.id AND u.disposition = \(UpdateDisposition.broadcast.sql) ORDER BY u.id DESC LIMIT 1
            ) b ON true
            WHERE e.id = \(chunk.eventID)
            """
        ).first
        guard let event else { throw PipelineError.eventNotFound(chunk.eventID) }
        let channelID: Int? = try event.decode(column: "channel_id")
        var apsTimestamp: Int64? = try event.decode(column: "last_aps_timestamp")
        // The event's sequence goes on from what the token route sent (Sql/0039) to the channel, never back.
        let routeTimestamp: Int64? = try event.decode(column: "route_aps_timestamp")
        if let channelID, apsTimestamp == nil {
            apsTimestamp = try await pool.query(
                """
                UPDATE channels SET last_aps_timestamp = coalesce(last_aps_timestamp,
                    greatest(floor(extract(epoch FROM coalesce(\(now), now())))::bigint, \(routeTimestamp)::bigint))
                WHERE id = \(channelID) RETURNING last_aps_timestamp
                """
            ).first?.decode(Int64.self, column: "last_aps_timestamp")
        } else if channelID == nil {
            apsTimestamp = routeTimestamp
        }
        let broadcastState = try event.decodeJSON(column: "broadcast_state")
        let latestState = try event.decodeJSON(column: "latest_state")
        let eventAlert = try event.decodeJSON(column: "start_alert")
        return StartContent(
            eventStatus: try event.decodeRaw(EventStatus.self, column: "status"),
            app: StartApp(bundleID: try event.decode(column: "bundle_id"), environment: try event.decode(column: "environment")),
            attributesType: try event.decode(column: "type_name"), attributes: try event.decodeJSON(column: "attributes") ?? [:],
            contentState: broadcastState ?? latestState ?? [:],
            apsTimestamp: apsTimestamp ?? Int64((now ?? Date()).timeIntervalSince1970.rounded(.down)) - 1,
            channelID: try event.decode(column: "apns_channel_id"),
            startAlert: chunk.runAlert ?? eventAlert,
            staleDate: try event.decode(column: "stale_date"), relevanceScore: try event.decode(column: "relevance_score"),
            endsAt: try event.decode(column: "ends_at"), freshness: try event.freshnessPolicy(),
            lastAlertAt: try event.decode(column: "last_alert_at"))
    }

    /// The event's channel as a window of starts on it finds it once answered: its last aps.timestamp, and
    /// whether a broadcast of the event is claimed and not yet recorded (`StartPlanner.afterChannelWindow`).
    public func channelAfterWindow(eventID: Int, apnsChannelID: String, now: Date? = nil) async throws
        -> (lastApsTimestamp: Int64?, broadcastInFlight: Bool)
    {
        let row = try await pool.query(
            """
            SELECT greatest((SELECT last_aps_timestamp FROM channels WHERE event_id = \(eventID) AND apns_channel_id = \(apnsChannelID)
                             ORDER BY id DESC LIMIT 1),
                            -- A state the token route sent as the channel opened went to token activities only.
                            (SELECT aps_timestamp FROM token_routes WHERE event_id = \(eventID))) AS last_aps_timestamp,
                   EXISTS (SELECT 1 FROM outbox WHERE event_id = \(eventID) AND claim_token IS NOT NULL
                           AND claimed_until > coalesce(\(now), now())) AS broadcast_in_flight
            """)[0]
        return (try row.decode(column: "last_aps_timestamp"), try row.decode(column: "broadcast_in_flight"))
    }

    /// Queues the event's last broadcast state to go out again on its channel (`StartWindowFollowUp.broadcastAgain`):
    /// a new update with that broadcast's content-state, stale date and relevance, no alert, priority `low`,
    /// recorded without an API key (`OutboxWriter.requeueLastBroadcast`). Nothing is queued while the event has
    /// outbox work (which goes out with that state or a newer one), when it is over, or when its last broadcast was
    /// its end. Returns whether it was queued.
    public func broadcastLastStateAgain(eventID: Int) async throws -> Bool {
        try await pool.withTransaction { tx in
            try await OutboxWriter.requeueLastBroadcast(eventID: eventID, whileEventIn: Self.startableEventStates.sql, on: tx)
        }
    }

    /// Every member of the audience in the chunk's range with the planner's facts.
    public func members(of chunk: ClaimedStartChunk, maxConcurrentWindow: TimeInterval = 8 * 3600, now: Date? = nil) async throws
        -> [StartChunkMember]
    {
        let members = try await pool.query(Self.membersStatement(chunk, maxConcurrentWindow: maxConcurrentWindow, now: now))
        var candidates: [StartChunkMember] = []
        candidates.reserveCapacity(members.count)
        for row in members {
            let token: String? = try row.decode(column: "push_to_start_token")
            let refused = try row.decode(String?.self, column: "token_refused_reason") != nil
            candidates.append(
                StartChunkMember(
                    candidate: StartCandidate(
                        installation: try row.decode(column: "installation"), os: try row.osVersion(), token: refused ? nil : token,
                        enabled: try row.decode(column: "live_activities_enabled"), followsEventDirectly: try row.decode(column: "direct"),
                        startedForEvent: try row.decode(column: "started"),
                        hasActivityOfRound: try row.decode(column: "has_activity"), dismissedByUser: try row.decode(column: "dismissed"),
                        runStateForToken: try row.decodeRaw(StartState?.self, column: "run_state"),
                        retryAt: try row.decode(column: "retry_at"), hasPlannedStart: try row.decode(Int?.self, column: "planned_id") != nil,
                        startsLastHour: try row.decode(column: "starts_last_hour"),
                        concurrentEvents: try row.decode(column: "concurrent"), directFollowsWaiting: try row.decode(column: "waiting")),
                    plannedStartID: try row.decode(column: "planned_id"), plannedToken: try row.decode(column: "planned_token"),
                    osMajor: try row.decode(column: "os_major")))
        }
        return candidates
    }

    /// The members of the chunk's range with something to decide, with what the planner reads. Concurrency counts other events not
    /// over that the installation has a start or an active activity of; `waiting` counts other events not
    /// over, overlapping this one (within `maxConcurrentWindow` of an end when one has none), that it follows
    /// directly and has no start of. Each member's starts that went out, its activities and its rows of this run are
    /// each read once (three probes, aggregated in place), whatever the number of facts taken from them.
    static func membersStatement(_ chunk: ClaimedStartChunk, maxConcurrentWindow: TimeInterval, now: Date?) -> PostgresQuery {
        let live = StartRepository.startableEventStates.sql
        return """
            WITH run AS (\(fragment: runSource(runID: chunk.runID))),
            this AS (SELECT starts_at, coalesce(ends_at, starts_at + make_interval(secs => \(maxConcurrentWindow)::float8)) AS ends_at
                     FROM events WHERE id = \(chunk.eventID)),
            members AS (\(fragment: AudienceRepository.followers(eventID: chunk.eventID, after: chunk.after, through: chunk.through, limit: nil)))
            SELECT m.installation, m.direct, i.live_activities_enabled, i.os_major, i.os_minor, i.os_patch, i.push_to_start_token,
                   i.token_refused_reason, went.started, acts.has_activity, acts.dismissed,
                   mine.run_state, mine.retry_at, mine.planned_id, mine.planned_token, went.last_hour AS starts_last_hour,
                   (SELECT count(DISTINCT x.event_id) FROM unnest(went.other_events || acts.other_events) AS x (event_id)
                    JOIN events o ON o.id = x.event_id WHERE o.status IN \(live))::integer AS concurrent,
                   -- The member's own follows first (`OFFSET 0` keeps them a probe of follows_by_installation):
                   -- planned from `events`, it read every live event and probed the follows of each, per member.
                   (SELECT count(*) FROM (SELECT f.event_id FROM follows f
                                          WHERE f.installation = m.installation AND f.event_id <> \(chunk.eventID)) f
                    JOIN events o ON o.id = f.event_id
                    WHERE o.status IN \(live) AND o.starts_at < this.ends_at
                      AND coalesce(o.ends_at, o.starts_at + make_interval(secs => \(maxConcurrentWindow)::float8)) > this.starts_at
                      AND NOT (o.id = ANY (went.other_events)) AND NOT (o.id = ANY (acts.other_events)))::integer AS waiting
            FROM members m CROSS JOIN this
            JOIN installations i ON i.id = m.installation
            -- The member's starts that went out (starts_by_installation): whether one is this event's round's, those of
            -- the last hour, and the other events they are of. An aggregate without GROUP BY: one row, also for none.
            CROSS JOIN LATERAL (
                SELECT coalesce(bool_or(s.event_id = \(chunk.eventID) AND s.audience_round = \(chunk.audienceRound)), false) AS started,
                       count(*) FILTER (WHERE s.sent_at > coalesce(\(now), now()) - interval '1 hour')::integer AS last_hour,
                       coalesce(array_agg(DISTINCT s.event_id) FILTER (WHERE s.event_id <> \(chunk.eventID)), '{}') AS other_events
                FROM starts s WHERE s.installation = m.installation AND s.went_out
            ) went
            -- Its activities (activities_by_installation_event): one of this event's round (any state, any push type),
            -- one its user dismissed while a round of the event ran, and the other events it shows one of.
            CROSS JOIN LATERAL (
                SELECT coalesce(bool_or(a.event_id = \(chunk.eventID) AND a.audience_round = \(chunk.audienceRound)), false) AS has_activity,
                       coalesce(bool_or(a.event_id = \(chunk.eventID) AND a.user_dismissed), false) AS dismissed,
                       coalesce(array_agg(DISTINCT a.event_id) FILTER (WHERE a.event_id <> \(chunk.eventID)
                                                                       AND a.state IN \(ActivityLifecycle.mirroredStates.sql)), '{}')
                           AS other_events
                FROM activities a WHERE a.installation = m.installation
            ) acts
            -- Its rows of this run (starts_once_per_token): the one of its current token, and a planned one (a retry).
            CROSS JOIN LATERAL (
                SELECT (array_agg(s.state) FILTER (WHERE s.token = i.push_to_start_token))[1] AS run_state,
                       (array_agg(s.next_attempt_at) FILTER (WHERE s.token = i.push_to_start_token))[1] AS retry_at,
                       (array_agg(s.id ORDER BY s.id DESC) FILTER (WHERE s.state = \(StartState.planned)))[1] AS planned_id,
                       (array_agg(s.token ORDER BY s.id DESC) FILTER (WHERE s.state = \(StartState.planned)))[1] AS planned_token
                FROM starts s WHERE s.run_id = \(chunk.runID) AND s.installation = m.installation
            ) mine
            -- Only members with something to decide (so a late pass over a started audience reads little more
            -- than its follows): in the audience and not settled in this run for their token, or with a
            -- planned retry.
            WHERE mine.planned_id IS NOT NULL
               OR (i.live_activities_enabled AND i.push_to_start_token IS NOT NULL AND i.token_refused_reason IS NULL
                   AND (mine.run_state IS NULL OR mine.run_state = \(StartState.planned)))
            ORDER BY m.installation
            """
    }

    /// Whether the app registered an activity of the chunk's event in its run's audience round for `installation` (an
    /// SQL expression), whatever its state or push type: a probe of activities_by_installation_event per member.
    static func hasActivityOfRound(_ chunk: ClaimedStartChunk, installation: PostgresQuery) -> PostgresQuery {
        """
        EXISTS (SELECT 1 FROM activities a WHERE a.installation = \(fragment: installation) AND a.event_id = \(chunk.eventID)
                AND a.audience_round = \(chunk.audienceRound))
        """
    }

    /// Whether the user dismissed an activity of the chunk's event while its round ran (`ActivityLifecycle.dismissalIsTheUsers`,
    /// recorded as `user_dismissed`), for `installation`. Either this or `hasActivityOfRound` holds back a start
    /// (`StartPlanner.decide`), also at the mark.
    static func dismissedByUser(_ chunk: ClaimedStartChunk, installation: PostgresQuery) -> PostgresQuery {
        """
        EXISTS (SELECT 1 FROM activities a WHERE a.installation = \(fragment: installation) AND a.event_id = \(chunk.eventID)
                AND a.user_dismissed)
        """
    }
}
