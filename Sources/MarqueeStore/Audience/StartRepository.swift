// The start fan-out's rows (Sql/0025): runs, their keyset chunks of the audience, and one row per start.
// The fan-out service decides through MarqueeCore's planners; this performs. Runs are advanced under a row
// lock (`FOR NO KEY UPDATE SKIP LOCKED`: one instance at a time cuts a run's chunks), chunks are claimed with
// a lease that ends with the holder's heartbeat, starts are marked `sending` one statement per send window,
// and answers are written one statement per batch. A start has no foreign key to its run or event (Sql/0032:
// they are its chunk's; a key would lock the row every start shares), so `purge` deletes a run's starts
// first. A start is inserted `sending` only while no start of the event is sending, accepted or unknown for
// the installation (`starts_once_per_event` holds it even against two runs at once).
import Foundation
import MarqueeCore
import Postgres

extension StartState: PostgresCodable {}
extension StartRunState: PostgresCodable {}
extension StartRunKind: PostgresCodable {}
extension StartRoute: PostgresCodable {}

/// Start runs, chunks and starts.
public struct StartRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    // MARK: runs

    /// Creates the automatic run of every event whose audience is due (`startsAt − lead`, the event's own
    /// lead or `lead`) and has none: skipped as `late` when due more than `maxLateness` ago, or as `no_alert`
    /// without a start alert. Returns the runs created.
    public func createDueAutomaticRuns(
        lead: TimeInterval, maxLateness: TimeInterval, channelWait: TimeInterval, now: Date? = nil
    ) async throws -> [CreatedStartRun] {
        let rows = try await pool.query(Self.dueAutomaticRunsStatement(lead: lead, maxLateness: maxLateness, channelWait: channelWait, now: now))
        var created: [CreatedStartRun] = []
        for row in rows {
            let run = CreatedStartRun(
                id: try row.decode(column: "id"), eventID: try row.decode(column: "event_id"),
                state: try row.decodeRaw(StartRunState.self, column: "state"),
                skipReason: try row.decodeRaw(StartRunSkipReason?.self, column: "skip_reason"))
            if run.state == .running { try await estimateAudience(runID: run.id, eventID: run.eventID) }
            created.append(run)
        }
        return created
    }

    /// The check behind `createDueAutomaticRuns`, which the fan-out runs every tick over every event not over.
    /// Each event's runs and end are probed by its id: the `OFFSET 0` keeps each `NOT EXISTS` a subquery run per
    /// event (PostgreSQL turns a plain one into a join, and a join planned while the tables looked empty read
    /// every automatic run once per event: under Scripts/bench service, 500,000 rows compared for 1,000 events,
    /// 23 ms a tick, growing with the square of the events).
    static func dueAutomaticRunsStatement(lead: TimeInterval, maxLateness: TimeInterval, channelWait: TimeInterval, now: Date?)
        -> PostgresQuery
    {
        """
        WITH candidates AS (
            SELECT e.id, e.app_id, e.starts_at - make_interval(secs => coalesce(e.audience_lead, \(lead)::integer)) AS due_at,
                   e.start_alert IS NOT NULL AS has_alert, e.audience_round
            FROM events e
            WHERE e.status IN \(Self.startableEventStates.sql)
              AND e.starts_at <= coalesce(\(now), now()) + make_interval(secs => 604800)
              AND NOT EXISTS (SELECT 1 FROM start_runs r WHERE r.event_id = e.id AND r.kind = \(StartRunKind.automatic.sql)
                              AND r.audience_round = e.audience_round OFFSET 0)
              -- A postponed event's new round waits until the end of the activities already running went out
              -- (its channel then ended), so no new activity joins the channel that end is on.
              AND NOT EXISTS (SELECT 1 FROM outbox o JOIN updates u ON u.id = o.update_id
                              WHERE o.event_id = e.id AND u.action = \(UpdateAction.end.sql) OFFSET 0)
        ), due AS (
            SELECT c.*, CASE WHEN NOT c.has_alert THEN \(StartRunSkipReason.noAlert.rawValue)
                             WHEN c.due_at < coalesce(\(now), now()) - make_interval(secs => \(maxLateness)::float8)
                             THEN \(StartRunSkipReason.late.rawValue) END AS skip_reason
            FROM candidates c WHERE c.due_at <= coalesce(\(now), now())
        )
        INSERT INTO start_runs (app_id, event_id, kind, state, skip_reason, due_at, started_at, channel_wait_until, finished_at,
                                audience_round)
        SELECT app_id, id, \(StartRunKind.automatic.sql),
               CASE WHEN skip_reason IS NULL THEN \(StartRunState.running.sql) ELSE \(StartRunState.skipped.sql) END,
               skip_reason, due_at, coalesce(\(now), now()), coalesce(\(now), now()) + make_interval(secs => \(channelWait)::float8),
               CASE WHEN skip_reason IS NOT NULL THEN coalesce(\(now), now()) END, audience_round
        FROM due
        ON CONFLICT DO NOTHING
        RETURNING id, event_id, state, skip_reason
        """
    }

    /// Events in these states get start runs; `ending`, `ended` and `cancelled` ones never do.
    public static let startableEventStates: [EventStatus] = [.scheduled, .live]

    /// Creates a manual run of the event (scope checked by the caller), with an optional topic filter and
    /// alert. Throws `eventNotFound` or `eventClosed` (the event is ending, ended or cancelled).
    public func createManualRun(
        appID: Int?, eventID: Int, topics: [String]?, alert: JSONValue?, createdBy: String?, channelWait: TimeInterval
    ) async throws -> Int {
        let id: Int = try await pool.withTransaction { tx in
            guard
                let event = try await tx.query(
                    """
                    SELECT app_id, status FROM events WHERE id = \(eventID) AND (\(appID)::bigint IS NULL OR app_id = \(appID)) FOR SHARE
                    """
                ).first
            else { throw PipelineError.eventNotFound(eventID) }
            let status = try event.decodeRaw(EventStatus.self, column: "status")
            guard Self.startableEventStates.contains(status) else { throw PipelineError.eventClosed(eventID, status) }
            let row = try await tx.query(
                """
                INSERT INTO start_runs (app_id, event_id, kind, state, topics, alert, due_at, channel_wait_until, created_by, audience_round)
                VALUES (\(try event.decode(Int.self, column: "app_id")), \(eventID), \(StartRunKind.manual), \(StartRunState.running),
                        \(topics), \(alert?.postgresJSON)::jsonb, now(), now() + make_interval(secs => \(channelWait)::float8), \(createdBy),
                        (SELECT audience_round FROM events WHERE id = \(eventID)))
                RETURNING id
                """
            ).first!
            return try row.decode(column: "id")
        }
        try await estimateAudience(runID: id, eventID: eventID)
        return id
    }

    /// Counts the run's followers once, for its ETA.
    private func estimateAudience(runID: Int, eventID: Int) async throws {
        try await pool.execute(
            """
            WITH run AS (\(fragment: Self.runSource(runID: runID)))
            UPDATE start_runs SET estimated_audience = (
                SELECT count(*) FROM (\(fragment: AudienceRepository.followers(eventID: eventID, after: 0, through: nil, limit: nil))) f
            ) WHERE id = \(runID)
            """)
    }

    /// `run (id, event_id, app_id, topics, direct)`: the run's event, the topics it starts and whether the
    /// event's own followers are part of it (not with a topic filter).
    static func runSource(runID: Int) -> PostgresQuery {
        """
        SELECT r.id, r.event_id, e.app_id, coalesce(r.topics, e.topics) AS topics, r.topics IS NULL AS direct
        FROM start_runs r JOIN events e ON e.id = r.event_id WHERE r.id = \(runID)
        """
    }

    /// The open runs' ids.
    public func openRunIDs() async throws -> [Int] {
        try await pool.query("SELECT id FROM start_runs WHERE state IN \(StartRunState.openStates.sql) ORDER BY id").map {
            try $0.decode(Int.self, column: "id")
        }
    }

    /// Advances one run under its row lock: reads its facts, asks `decide` for the next step, and performs
    /// it. Cuts up to `cutAhead` chunks of `chunkSize` followers while fewer than that wait unclaimed.
    /// Returns the step taken, or nil when another instance holds the run.
    public func advance(
        runID: Int, lateStartCutoff: TimeInterval, chunkSize: Int, cutAhead: Int, now: Date? = nil,
        decide: @Sendable (StartRunFacts) -> StartRunStep
    ) async throws -> StartRunAdvance? {
        try await pool.withTransaction { tx in
            guard
                let row = try await tx.query(
                    """
                    SELECT r.event_id, r.state, r.kind, r.pass, r.planned_through,
                           extract(epoch FROM \(fragment: Self.lastAccepted) - r.started_at)::float8 AS lag, r.planning_done, r.next_pass_at, e.status, coalesce(\(now), now()) AS now,
                           e.ends_at - make_interval(secs => \(lateStartCutoff)::float8) AS cutoff,
                           (SELECT count(*) FROM start_chunks c WHERE c.run_id = r.id AND c.pass = r.pass AND NOT c.done) AS open_chunks,
                           (SELECT count(*) FROM start_chunks c WHERE c.run_id = r.id AND c.pass = r.pass AND NOT c.done
                              AND c.claimed_by IS NULL) AS waiting_chunks
                    FROM start_runs r JOIN events e ON e.id = r.event_id
                    WHERE r.id = \(runID) AND r.state IN \(StartRunState.openStates.sql)
                    FOR NO KEY UPDATE OF r SKIP LOCKED
                    """
                ).first
            else { return nil }
            let facts = StartRunFacts(
                state: try row.decodeRaw(StartRunState.self, column: "state"),
                eventStatus: try row.decodeRaw(EventStatus.self, column: "status"),
                planningDone: try row.decode(column: "planning_done"), openChunks: try row.decode(column: "open_chunks"),
                nextPassAt: try row.decode(column: "next_pass_at"), lateStartCutoff: try row.decode(column: "cutoff"),
                now: try row.decode(column: "now"))
            let step = decide(facts)
            switch step {
            case .wait:
                break
            case .cutChunk:
                let eventID: Int = try row.decode(column: "event_id")
                var through: Int = try row.decode(column: "planned_through")
                let pass: Int = try row.decode(column: "pass")
                var waiting: Int = try row.decode(column: "waiting_chunks")
                var done = false
                while waiting < cutAhead && !done {
                    let page = try await tx.query(
                        """
                        WITH run AS (\(fragment: Self.runSource(runID: runID)))
                        SELECT max(installation) AS through, count(*) AS n
                        FROM (\(fragment: AudienceRepository.followers(eventID: eventID, after: through, through: nil, limit: chunkSize))) page
                        """
                    ).first!
                    let count: Int = try page.decode(column: "n")
                    done = count < chunkSize
                    if let last = try page.decode(Int?.self, column: "through") {
                        try await tx.execute(
                            """
                            INSERT INTO start_chunks (run_id, pass, after_installation, through_installation, next_attempt_at)
                            VALUES (\(runID), \(pass), \(through), \(last), coalesce(\(now), now()))
                            """)
                        through = last
                        waiting += 1
                    }
                }
                try await tx.execute(
                    "UPDATE start_runs SET planned_through = \(through), planning_done = \(done) WHERE id = \(runID)")
            case .roll(let next):
                try await tx.execute(
                    """
                    UPDATE start_runs SET state = \(StartRunState.rolling), next_pass_at = \(next),
                        first_pass_done_at = coalesce(first_pass_done_at, coalesce(\(now), now()))
                    WHERE id = \(runID)
                    """)
            case .beginPass:
                try await tx.execute(
                    """
                    UPDATE start_runs SET pass = pass + 1, planned_through = 0, planning_done = false, next_pass_at = NULL WHERE id = \(runID)
                    """)
            case .finish(let state):
                try await tx.execute(
                    """
                    WITH closed AS (
                        UPDATE start_chunks SET done = true, finished_at = now() WHERE run_id = \(runID) AND NOT done
                        RETURNING last_accepted_at)
                    UPDATE start_runs SET state = \(state), finished_at = coalesce(\(now), now()),
                        first_pass_done_at = coalesce(first_pass_done_at, coalesce(\(now), now())),
                        last_accepted_at = greatest(last_accepted_at, (SELECT max(last_accepted_at) FROM closed))
                    WHERE id = \(runID)
                    """)
                // Starts still planned (a retry not yet due) are not sent any more.
                try await tx.execute(
                    """
                    UPDATE starts SET state = \(StartState.skipped), reason = \(StartSkipReason.eventOver.rawValue), next_attempt_at = NULL
                    WHERE run_id = \(runID) AND state = \(StartState.planned)
                    """)
                // Every chunk's counts as the run ends (the step above may have settled starts of done ones).
                try await tx.execute("UPDATE start_chunks c SET counts = \(fragment: Self.chunkCounts) WHERE run_id = \(runID)")
            }
            let firstPassEnds: Bool =
                switch step {
                case .roll, .finish: facts.state == .running
                default: false
                }
            return StartRunAdvance(
                step: step, kind: try row.decodeRaw(StartRunKind.self, column: "kind"),
                firstPassLag: firstPassEnds ? try row.decode(Double?.self, column: "lag") : nil)
        }
    }

    // MARK: chunks

    /// Claims the due chunk first in line whose lease ran out or whose holder stopped beating, for `lease` seconds.
    public func claimChunk(instance: String, lease: TimeInterval, now: Date? = nil) async throws -> ClaimedStartChunk? {
        guard
            let row = try await pool.query(
                """
                WITH due AS (
                    SELECT c.id FROM start_chunks c
                    WHERE NOT c.done AND c.next_attempt_at <= coalesce(\(now), now())
                      AND (c.claimed_until IS NULL OR c.claimed_until <= coalesce(\(now), now())
                           OR c.claimed_by = ANY (\(fragment: InstanceHeartbeatRepository.lapsedInstances(now: now))))
                    ORDER BY c.next_attempt_at, c.id LIMIT 1
                    FOR UPDATE OF c SKIP LOCKED
                )
                UPDATE start_chunks c SET claimed_by = \(instance), claimed_until = coalesce(\(now), now()) + make_interval(secs => \(lease)::float8),
                    attempts = c.attempts + 1
                FROM due, start_runs r
                WHERE c.id = due.id AND r.id = c.run_id
                RETURNING c.id, c.run_id, c.after_installation, c.through_installation, c.attempts, r.event_id, r.app_id, r.alert,
                          r.channel_wait_until, r.kind
                """
            ).first
        else { return nil }
        return ClaimedStartChunk(
            id: try row.decode(column: "id"), runID: try row.decode(column: "run_id"), eventID: try row.decode(column: "event_id"),
            appID: try row.decode(column: "app_id"), after: try row.decode(column: "after_installation"),
            through: try row.decode(column: "through_installation"), attempts: try row.decode(column: "attempts"),
            runAlert: try row.decodeJSON(column: "alert"), channelWaitUntil: try row.decode(column: "channel_wait_until"))
    }

    /// Keeps the claim for `lease` more seconds; false when it is no longer this instance's.
    public func renew(_ chunk: ClaimedStartChunk, instance: String, lease: TimeInterval) async throws -> Bool {
        try await pool.execute(
            """
            UPDATE start_chunks SET claimed_until = now() + make_interval(secs => \(lease)::float8)
            WHERE id = \(chunk.id) AND claimed_by = \(instance) AND NOT done
            """) == 1
    }

    /// Ends the chunk (every member settled), keeps its counts, and folds its last acceptance into the run's.
    public func finish(_ chunk: ClaimedStartChunk, instance: String) async throws {
        try await pool.execute(
            """
            WITH finished AS (
                UPDATE start_chunks c SET done = true, finished_at = now(), claimed_by = NULL, claimed_until = NULL,
                    counts = \(fragment: Self.chunkCounts)
                WHERE id = \(chunk.id) AND claimed_by = \(instance)
                RETURNING run_id, last_accepted_at)
            UPDATE start_runs r SET last_accepted_at = greatest(r.last_accepted_at, f.last_accepted_at)
            FROM finished f WHERE r.id = f.run_id AND f.last_accepted_at IS NOT NULL
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
        """

    /// The time of run `r`'s last accepted start: its own (done chunks') or an open chunk's.
    static let lastAccepted: PostgresQuery = """
        greatest(r.last_accepted_at, (SELECT max(c.last_accepted_at) FROM start_chunks c WHERE c.run_id = r.id AND NOT c.done))
        """

    /// Gives the chunk back, due again after `delay` seconds.
    public func release(_ chunk: ClaimedStartChunk, instance: String, after delay: TimeInterval) async throws {
        try await pool.execute(
            """
            UPDATE start_chunks SET claimed_by = NULL, claimed_until = NULL, next_attempt_at = now() + make_interval(secs => \(delay)::float8)
            WHERE id = \(chunk.id) AND claimed_by = \(instance)
            """)
    }

    /// Starts of the chunk's run and range left `sending` by a holder that is gone: nobody can tell whether
    /// APNs took them (`StartLifecycle`'s `holderLost`), so they are `unknown`, counted and never resent.
    public func settleAbandoned(_ chunk: ClaimedStartChunk) async throws -> Int {
        try await pool.execute(
            """
            UPDATE starts SET state = \(StartLifecycle.transition(from: .sending, on: .holderLost)!), reason = 'holder_lost', answered_at = now()
            WHERE run_id = \(chunk.runID) AND installation > \(chunk.after) AND installation <= \(chunk.through)
              AND state = \(StartState.sending)
            """)
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
    /// recorded without an API key. Nothing is queued while the event has outbox work (which goes out with that
    /// state or a newer one), when it is over, or when its last broadcast was its end. Returns whether it was queued.
    public func broadcastLastStateAgain(eventID: Int) async throws -> Bool {
        try await pool.withTransaction { tx in
            guard
                let repeated = try await tx.query(
                    """
                    INSERT INTO updates (event_id, action, content_state, stale_date, relevance_score, priority, occurred_at)
                    SELECT u.event_id, \(UpdateAction.update.sql), u.content_state, u.stale_date, u.relevance_score,
                           \(RequestedPriority.low.sql), u.occurred_at
                    FROM updates u JOIN events e ON e.id = u.event_id AND e.status IN \(Self.startableEventStates.sql)
                    WHERE u.id = (SELECT id FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.broadcast.sql)
                                  ORDER BY id DESC LIMIT 1)
                      AND u.action = \(UpdateAction.update.sql)
                      AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = \(eventID))
                    RETURNING id
                    """
                ).first
            else { return false }
            let updateID: Int = try repeated.decode(column: "id")
            let queued = try await tx.query(
                """
                WITH queued AS (
                    INSERT INTO outbox (event_id, update_id) VALUES (\(eventID), \(updateID)) ON CONFLICT (event_id) DO NOTHING
                    RETURNING event_id
                )
                SELECT pg_notify(\(IngestRepository.notifyChannel), event_id::text) FROM queued
                """)
            guard queued.isEmpty else { return true }
            // An ingest queued work meanwhile: it carries that state or a newer one.
            try await tx.execute(
                """
                UPDATE updates SET disposition = \(UpdateDisposition.conflated.sql), disposed_at = now() WHERE id = \(updateID)
                """)
            return false
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
    /// directly and has no start of.
    static func membersStatement(_ chunk: ClaimedStartChunk, maxConcurrentWindow: TimeInterval, now: Date?) -> PostgresQuery {
        let live = StartRepository.startableEventStates.sql
        return """
            WITH run AS (\(fragment: runSource(runID: chunk.runID))),
            this AS (SELECT starts_at, coalesce(ends_at, starts_at + make_interval(secs => \(maxConcurrentWindow)::float8)) AS ends_at
                     FROM events WHERE id = \(chunk.eventID)),
            members AS (\(fragment: AudienceRepository.followers(eventID: chunk.eventID, after: chunk.after, through: chunk.through, limit: nil)))
            SELECT m.installation, m.direct, i.live_activities_enabled, i.os_major, i.os_minor, i.os_patch, i.push_to_start_token,
                   i.token_refused_reason,
                   started.found IS NOT NULL AS started,
                   coalesce(held.of_round, false) AS has_activity, coalesce(held.dismissed, false) AS dismissed,
                   mine.state AS run_state, mine.next_attempt_at AS retry_at,
                   planned.id AS planned_id, planned.token AS planned_token,
                   (SELECT count(*) FROM starts s WHERE s.installation = m.installation AND s.went_out
                      AND s.sent_at > coalesce(\(now), now()) - interval '1 hour')::integer AS starts_last_hour,
                   (SELECT count(DISTINCT x.event_id) FROM (
                        SELECT s.event_id FROM starts s WHERE s.installation = m.installation AND s.went_out
                          AND s.event_id <> \(chunk.eventID)
                        UNION ALL
                        SELECT a.event_id FROM activities a WHERE a.installation = m.installation
                          AND a.state IN \(ActivityLifecycle.mirroredStates.sql) AND a.event_id <> \(chunk.eventID)
                    ) x JOIN events o ON o.id = x.event_id WHERE o.status IN \(live))::integer AS concurrent,
                   -- The member's own follows first (`OFFSET 0` keeps them a probe of follows_by_installation):
                   -- planned from `events`, it read every live event and probed the follows of each, per member.
                   (SELECT count(*) FROM (SELECT f.event_id FROM follows f
                                          WHERE f.installation = m.installation AND f.event_id <> \(chunk.eventID)) f
                    JOIN events o ON o.id = f.event_id
                    WHERE o.status IN \(live) AND o.starts_at < this.ends_at
                      AND coalesce(o.ends_at, o.starts_at + make_interval(secs => \(maxConcurrentWindow)::float8)) > this.starts_at
                      AND NOT EXISTS (SELECT 1 FROM starts s WHERE s.event_id = o.id AND s.installation = m.installation
                                      AND s.went_out)
                      AND NOT EXISTS (SELECT 1 FROM activities a WHERE a.event_id = o.id AND a.installation = m.installation
                                      AND a.state IN \(ActivityLifecycle.mirroredStates.sql)))::integer AS waiting
            FROM members m CROSS JOIN this
            JOIN installations i ON i.id = m.installation
            -- A probe per member (an EXISTS here may be planned as one hashed read of every started start of the
            -- event, per chunk: the whole audience again for each chunk of a big run).
            LEFT JOIN LATERAL (
                SELECT true AS found FROM starts s WHERE s.event_id = \(chunk.eventID) AND s.installation = m.installation
                  AND s.went_out AND s.audience_round = (SELECT audience_round FROM start_runs WHERE id = \(chunk.runID))
                LIMIT 1
            ) started ON true
            -- The event's activities the app registered for the member (activities_by_installation_event).
            LEFT JOIN LATERAL (\(fragment: Self.heldBack(eventID: chunk.eventID, runID: chunk.runID, installation: "m.installation"))) held ON true
            LEFT JOIN LATERAL (
                SELECT s.state, s.next_attempt_at FROM starts s
                WHERE s.run_id = \(chunk.runID) AND s.installation = m.installation AND s.token = i.push_to_start_token
                -- One row at most (starts_once_per_token), but the LIMIT keeps this a probe per member: without
                -- it the subquery is pulled up into a join, which may be planned as a read of every start of the
                -- run, per chunk.
                LIMIT 1
            ) mine ON true
            LEFT JOIN LATERAL (
                SELECT s.id, s.token FROM starts s
                WHERE s.run_id = \(chunk.runID) AND s.installation = m.installation AND s.state = \(StartState.planned)
                ORDER BY s.id DESC LIMIT 1
            ) planned ON true
            -- Only members with something to decide (so a late pass over a started audience reads little more
            -- than its follows): in the audience and not settled in this run for their token, or with a
            -- planned retry.
            WHERE planned.id IS NOT NULL
               OR (i.live_activities_enabled AND i.push_to_start_token IS NOT NULL AND i.token_refused_reason IS NULL
                   AND (mine.state IS NULL OR mine.state = \(StartState.planned)))
            ORDER BY m.installation
            """
    }

    /// `(of_round, dismissed)` for one installation (`installation`, an SQL expression) and the run's event: whether
    /// the app registered an activity of the event in the run's audience round, whatever its state or push type, and
    /// whether the user dismissed one while its round ran (`ActivityLifecycle.dismissalIsTheUsers`, recorded as
    /// `user_dismissed`). Either holds back a start (`StartPlanner.decide`), also at the mark.
    static func heldBack(eventID: Int, runID: Int, installation: PostgresQuery) -> PostgresQuery {
        """
        SELECT bool_or(a.audience_round = (SELECT audience_round FROM start_runs WHERE id = \(runID))) AS of_round,
               bool_or(a.user_dismissed) AS dismissed
        FROM activities a WHERE a.installation = \(fragment: installation) AND a.event_id = \(eventID)
        """
    }

    // MARK: starts

    /// Records starts the run decided not to send, one statement for all.
    public func skip(_ chunk: ClaimedStartChunk, _ skipped: [SkippedStart]) async throws {
        guard !skipped.isEmpty else { return }
        let input = JSONValue.array(
            skipped.map {
                [
                    "installation": .int(Int64($0.installation)), "token": .string($0.token), "os_major": $0.osMajor.map { .int(Int64($0)) } ?? .null,
                    "reason": .string($0.reason.rawValue), "planned_id": $0.plannedStartID.map { .int(Int64($0)) } ?? .null,
                ]
            })
        try await pool.execute(
            """
            WITH input AS (
                SELECT * FROM jsonb_to_recordset(\(input.postgresJSON)::jsonb) AS i (installation bigint, token text, os_major integer,
                                                                                    reason text, planned_id bigint)
            ), settled AS (
                UPDATE starts s SET state = \(StartLifecycle.transition(from: .planned, on: .skipped)!), reason = i.reason, next_attempt_at = NULL
                FROM input i WHERE s.id = i.planned_id AND s.state = \(StartState.planned)
                RETURNING s.id
            )
            INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, state, reason)
            SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), installation, token, os_major, \(StartState.skipped), reason
            FROM input WHERE planned_id IS NULL
            ON CONFLICT DO NOTHING
            """)
    }

    /// Marks a send window's starts `sending`, one statement: new starts are inserted, planned ones (a retry)
    /// take the installation's current token. Only installations still enabled, with that token current
    /// and no start of the event sending, accepted or unknown, are marked; the rest are left out. The event's
    /// activities are read again here: an installation whose app registered an activity of the round (or whose user
    /// dismissed one) since the chunk's members were read is recorded skipped instead (`has_activity`, `dismissed`).
    /// A registration committed after this statement still gets its start (docs/api.md#activities). Returns the
    /// starts marked, to send now.
    public func markSending(_ chunk: ClaimedStartChunk, _ starts: [PlannedStart]) async throws -> [SendingStart] {
        guard !starts.isEmpty else { return [] }
        let input = JSONValue.array(
            starts.map {
                [
                    "installation": .int(Int64($0.installation)), "token": .string($0.token), "os_major": $0.osMajor.map { .int(Int64($0)) } ?? .null,
                    "path": .string($0.route.rawValue), "planned_id": $0.plannedStartID.map { .int(Int64($0)) } ?? .null,
                ]
            })
        let sending = StartLifecycle.transition(from: .planned, on: .sendBegan)!
        let rows = try await pool.query(
            """
            WITH input AS (
                SELECT i.*, CASE WHEN h.dismissed THEN \(StartSkipReason.dismissed.rawValue)
                                 WHEN h.of_round THEN \(StartSkipReason.hasActivity.rawValue) END AS held_reason
                FROM jsonb_to_recordset(\(input.postgresJSON)::jsonb) AS i (installation bigint, token text, os_major integer,
                                                                          path text, planned_id bigint)
                LEFT JOIN LATERAL (\(fragment: Self.heldBack(eventID: chunk.eventID, runID: chunk.runID, installation: "i.installation"))) h ON true
            ), eligible AS (
                SELECT i.* FROM input i JOIN installations n ON n.id = i.installation
                WHERE i.held_reason IS NULL
                  AND n.live_activities_enabled AND n.push_to_start_token = i.token AND n.token_refused_reason IS NULL
                  -- A new start that the round's started one would duplicate is left out by starts_once_per_event
                  -- (ON CONFLICT below); only a retry, which updates its row, asks first. Asking for every row made
                  -- this statement a scan of starts per row whenever the table's statistics were older than its
                  -- growth (the first minute of a big kick-off).
                  AND (i.planned_id IS NULL
                       OR NOT EXISTS (SELECT 1 FROM starts s WHERE s.event_id = \(chunk.eventID) AND s.installation = i.installation
                                      AND s.went_out
                                      AND s.audience_round = (SELECT audience_round FROM start_runs WHERE id = \(chunk.runID))))
            ), held_settled AS (
                UPDATE starts s SET state = \(StartLifecycle.transition(from: .planned, on: .skipped)!), reason = i.held_reason,
                    next_attempt_at = NULL
                FROM input i WHERE i.held_reason IS NOT NULL AND s.id = i.planned_id AND s.state = \(StartState.planned)
            ), held_recorded AS (
                INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, state, reason)
                SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), installation, token, os_major, \(StartState.skipped), held_reason
                FROM input WHERE held_reason IS NOT NULL AND planned_id IS NULL
                ON CONFLICT DO NOTHING
            ), retried AS (
                UPDATE starts s SET state = \(sending), token = e.token, path = e.path, attempts = s.attempts + 1, sent_at = now(),
                    next_attempt_at = NULL
                FROM eligible e WHERE s.id = e.planned_id AND s.state = \(StartState.planned)
                RETURNING s.id, s.installation, s.token, s.path, s.attempts
            ), inserted AS (
                INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, path, state, attempts, sent_at, audience_round)
                SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), installation, token, os_major, path, \(sending), 1, now(),
                       (SELECT audience_round FROM start_runs WHERE id = \(chunk.runID))
                FROM eligible WHERE planned_id IS NULL
                ON CONFLICT DO NOTHING
                RETURNING id, installation, token, path, attempts
            )
            SELECT * FROM retried UNION ALL SELECT * FROM inserted
            """)
        return try rows.map { row in
            SendingStart(
                id: try row.decode(column: "id"), installation: try row.decode(column: "installation"), token: try row.decode(column: "token"),
                route: try row.decodeRaw(StartRoute.self, column: "path"), attempt: try row.decode(column: "attempts"))
        }
    }

    /// Writes APNs' answers to the chunk's starts, one statement for up to a batch; only starts still `sending`
    /// change. Moves the chunk's last acceptance forward (not the run's: its row would be every batch's lock).
    public func record(_ chunk: ClaimedStartChunk, _ answers: [StartAnswerRecord]) async throws {
        guard !answers.isEmpty else { return }
        let input = JSONValue.array(
            answers.map {
                [
                    "id": .int(Int64($0.startID)), "state": .string($0.state.rawValue), "reason": $0.reason.map(JSONValue.string) ?? .null,
                    "status": $0.status.map { .int(Int64($0)) } ?? .null, "retry_after": $0.retryAfter.map(JSONValue.double) ?? .null,
                    "unique_id": $0.apnsUniqueID.map(JSONValue.string) ?? .null,
                ]
            })
        try await pool.execute(
            """
            WITH input AS (
                SELECT * FROM jsonb_to_recordset(\(input.postgresJSON)::jsonb) AS i (id bigint, state text, reason text, status integer,
                                                                                    retry_after float8, unique_id uuid)
            ), written AS (
                UPDATE starts s SET state = i.state, reason = i.reason, status = i.status, apns_unique_id = i.unique_id,
                    answered_at = now(),
                    next_attempt_at = CASE WHEN i.retry_after IS NOT NULL THEN now() + make_interval(secs => i.retry_after) END
                FROM input i WHERE s.id = i.id AND s.state = \(StartState.sending)
                RETURNING s.state
            )
            UPDATE start_chunks SET last_accepted_at = now()
            WHERE id = \(chunk.id) AND EXISTS (SELECT 1 FROM written WHERE state = \(StartState.accepted))
            """)
    }

    // MARK: retention

    /// Deletes the runs (and their chunks and starts) of events that ended or were cancelled and whose runs
    /// finished before `cutoff`, `batch` starts per statement and at most `statements` statements; returns the
    /// starts deleted.
    public func purge(finishedBefore cutoff: Date, batch: Int = 50_000, statements: Int = 20) async throws -> Int {
        let over = EventLifecycle.finalStates.sql
        let purged = try await BatchedStatements.run(batch: batch, limit: statements) {
            try await pool.execute(
                """
                DELETE FROM starts WHERE id IN (
                    SELECT s.id FROM start_runs r JOIN events e ON e.id = r.event_id JOIN starts s ON s.run_id = r.id
                    WHERE r.finished_at < \(cutoff) AND e.status IN \(over) LIMIT \(batch))
                """)
        }
        try await pool.execute(
            """
            DELETE FROM start_runs r USING events e
            WHERE e.id = r.event_id AND r.finished_at < \(cutoff) AND e.status IN \(over)
              AND NOT EXISTS (SELECT 1 FROM starts s WHERE s.run_id = r.id)
            """)
        return purged
    }

    // MARK: reports

    /// The event's runs, newest first, with their counts (at most `limit`).
    public func runs(eventID: Int, limit: Int = 20) async throws -> [StartRunReport] {
        var reports: [StartRunReport] = []
        for row in try await pool.query(
            """
            SELECT id, event_id, kind, state, skip_reason, topics, due_at, started_at, first_pass_done_at, finished_at,
                   \(fragment: Self.lastAccepted) AS last_accepted_at, estimated_audience, now() AS now
            FROM start_runs r WHERE event_id = \(eventID) ORDER BY id DESC LIMIT \(limit)
            """)
        {
            reports.append(
                StartRunReport(
                    id: try row.decode(column: "id"), eventID: try row.decode(column: "event_id"),
                    kind: try row.decodeRaw(StartRunKind.self, column: "kind"), state: try row.decodeRaw(StartRunState.self, column: "state"),
                    skipReason: try row.decodeRaw(StartRunSkipReason?.self, column: "skip_reason"), topics: try row.decode(column: "topics"),
                    dueAt: try row.decode(column: "due_at"), startedAt: try row.decode(column: "started_at"),
                    firstPassDoneAt: try row.decode(column: "first_pass_done_at"), finishedAt: try row.decode(column: "finished_at"),
                    lastAcceptedAt: try row.decode(column: "last_accepted_at"), estimatedAudience: try row.decode(column: "estimated_audience"),
                    now: try row.decode(column: "now")))
        }
        guard !reports.isEmpty else { return [] }
        let ids = reports.map { String($0.id) }
        var index: [Int: Int] = [:]
        for (position, report) in reports.enumerated() { index[report.id] = position }
        // Done chunks' kept counts and the open chunks' starts (Sql/0033), not a count over every start of the run.
        for row in try await pool.query(
            """
            WITH chunks AS (SELECT * FROM start_chunks WHERE run_id = ANY (\(ids)::bigint[]))
            SELECT run_id, state, reason, path, sum(n)::bigint AS n FROM (
                SELECT c.run_id, g.state, g.reason, g.path, g.n
                FROM chunks c, jsonb_to_recordset(c.counts) AS g (state text, reason text, path text, n bigint)
                WHERE c.counts IS NOT NULL
                UNION ALL
                SELECT c.run_id, x.state, x.reason, x.path, x.n FROM chunks c,
                    LATERAL (\(fragment: Self.chunkGroups)) x
                WHERE c.counts IS NULL
            ) t GROUP BY 1, 2, 3, 4
            """)
        {
            guard let position = index[try row.decode(Int.self, column: "run_id")] else { continue }
            reports[position].counts.add(
                state: try row.decodeRaw(StartState.self, column: "state"), reason: try row.decode(column: "reason"),
                route: try row.decodeRaw(StartRoute?.self, column: "path"), count: try row.decode(column: "n"))
        }
        // Adoption: accepted starts whose activity the app registered for the event within 10 minutes. Read from
        // the event's activities to their starts, so a run whose audience has registered few costs little (from
        // the starts, each read of the report went through every accepted start of the run).
        for row in try await pool.query(
            """
            SELECT s.run_id, coalesce(s.os_major::text, 'unknown') AS os_major, count(DISTINCT s.id)::bigint AS n
            FROM start_runs r
            JOIN activities a ON a.event_id = r.event_id
            JOIN starts s ON s.event_id = r.event_id AND s.audience_round = r.audience_round AND s.installation = a.installation
                         AND s.went_out AND s.run_id = r.id
            WHERE r.id = ANY (\(ids)::bigint[]) AND s.state = \(StartState.accepted)
              AND a.created_at >= s.sent_at - interval '1 minute' AND a.created_at <= s.answered_at + interval '10 minutes'
            GROUP BY 1, 2
            """)
        {
            guard let position = index[try row.decode(Int.self, column: "run_id")] else { continue }
            reports[position].adoption[try row.decode(String.self, column: "os_major")] = try row.decode(Int.self, column: "n")
        }
        return reports
    }

    /// Installations of the app started (accepted) in the last `window` seconds whose activity was registered
    /// within 10 minutes, and all accepted, by OS major version (for the metrics).
    public func adoption(window: TimeInterval) async throws -> [(osMajor: String, accepted: Int, adopted: Int)] {
        try await pool.query(
            """
            SELECT coalesce(s.os_major::text, 'unknown') AS os_major, count(*)::bigint AS accepted,
                   count(*) FILTER (WHERE EXISTS (
                       SELECT 1 FROM activities a WHERE a.installation = s.installation AND a.event_id = s.event_id
                         AND a.created_at >= s.sent_at - interval '1 minute' AND a.created_at <= s.answered_at + interval '10 minutes'))::bigint
                       AS adopted
            FROM starts s
            WHERE s.state = \(StartState.accepted) AND s.answered_at > now() - make_interval(secs => \(window)::float8)
            GROUP BY 1
            """
        ).map { row in
            (
                try row.decode(String.self, column: "os_major"), try row.decode(Int.self, column: "accepted"),
                try row.decode(Int.self, column: "adopted")
            )
        }
    }
}

/// A run just created.
public struct CreatedStartRun: Sendable, Equatable {
    public let id: Int
    public let eventID: Int
    public let state: StartRunState
    public let skipReason: StartRunSkipReason?
}

/// What `advance` did to a run.
public struct StartRunAdvance: Sendable, Equatable {
    public let step: StartRunStep
    public let kind: StartRunKind
    /// Seconds from the run's start to its last accepted start, when this step ended its first pass.
    public let firstPassLag: Double?
}

/// A chunk this instance holds.
public struct ClaimedStartChunk: Sendable, Equatable {
    public let id: Int
    public let runID: Int
    public let eventID: Int
    public let appID: Int
    /// The installations (after, through].
    public let after: Int
    public let through: Int
    public let attempts: Int
    public let runAlert: JSONValue?
    public let channelWaitUntil: Date
}

/// The app of a start, as APNs addresses it.
public struct StartApp: Sendable, Equatable {
    public let bundleID: String
    public let environment: String
}

/// One member of a chunk: the planner's facts and what the store needs to act on them.
public struct StartChunkMember: Sendable, Equatable {
    public let candidate: StartCandidate
    /// This run's planned start of the installation (a retry), whatever its token.
    public let plannedStartID: Int?
    public let plannedToken: String?
    public let osMajor: Int?
}

/// What a start of an event carries, and the event's status.
public struct StartContent: Sendable {
    public let eventStatus: EventStatus
    public let app: StartApp
    public let attributesType: String
    public let attributes: JSONValue
    /// The last broadcast's content-state (or the event's latest before the first broadcast) and the
    /// aps.timestamp a start carries.
    public let contentState: JSONValue
    public let apsTimestamp: Int64
    /// The event's open channel, as APNs names it.
    public let channelID: String?
    /// The run's alert, else the event's.
    public let startAlert: JSONValue?
    public let staleDate: Date?
    public let relevanceScore: Double?
    public let endsAt: Date?
    /// The event's freshness policy and when its channel last broadcast an alert.
    public var freshness: FreshnessPolicy = .defaults
    public var lastAlertAt: Date?
}

/// A start the run decided not to send.
public struct SkippedStart: Sendable, Equatable {
    public let installation: Int
    public let token: String
    public let osMajor: Int?
    public let reason: StartSkipReason
    /// The planned start it settles (else a new row).
    public let plannedStartID: Int?

    public init(installation: Int, token: String, osMajor: Int?, reason: StartSkipReason, plannedStartID: Int?) {
        self.installation = installation
        self.token = token
        self.osMajor = osMajor
        self.reason = reason
        self.plannedStartID = plannedStartID
    }
}

/// A start to mark `sending`.
public struct PlannedStart: Sendable, Equatable {
    public let installation: Int
    public let token: String
    public let osMajor: Int?
    public let route: StartRoute
    public let plannedStartID: Int?

    public init(installation: Int, token: String, osMajor: Int?, route: StartRoute, plannedStartID: Int?) {
        self.installation = installation
        self.token = token
        self.osMajor = osMajor
        self.route = route
        self.plannedStartID = plannedStartID
    }
}

/// A start marked `sending`: send it now.
public struct SendingStart: Sendable, Equatable {
    public let id: Int
    public let installation: Int
    public let token: String
    public let route: StartRoute
    /// 1 for the first send.
    public let attempt: Int
}

/// What to write for one answered start.
public struct StartAnswerRecord: Sendable, Equatable {
    public let startID: Int
    public let state: StartState
    public let reason: String?
    public let status: Int?
    public let retryAfter: TimeInterval?
    public let apnsUniqueID: String?

    public init(startID: Int, state: StartState, reason: String?, status: Int?, retryAfter: TimeInterval?, apnsUniqueID: String?) {
        self.startID = startID
        self.state = state
        self.reason = reason
        self.status = status
        self.retryAfter = retryAfter
        self.apnsUniqueID = apnsUniqueID
    }
}

/// A run and its counts, as `GET /v1/events/{id}/starts` shows it.
public struct StartRunReport: Sendable {
    public let id: Int
    public let eventID: Int
    public let kind: StartRunKind
    public let state: StartRunState
    public let skipReason: StartRunSkipReason?
    public let topics: [String]?
    public let dueAt: Date
    public let startedAt: Date
    public let firstPassDoneAt: Date?
    public let finishedAt: Date?
    public let lastAcceptedAt: Date?
    public let estimatedAudience: Int
    /// The database's time of the read.
    public let now: Date
    public var counts = StartCounts()
    /// Adopted starts by OS major version (`unknown`: not told).
    public var adoption: [String: Int] = [:]
}

/// A run's starts by state and reason.
public struct StartCounts: Sendable, Equatable {
    public var audience = 0
    public var notStartable = 0
    public var planned = 0
    public var sending = 0
    public var accepted = 0
    public var unknown = 0
    /// Sent or sending with `input-push-token` because the event had no channel.
    public var noChannel = 0
    public var rejected: [String: Int] = [:]
    public var skipped: [String: Int] = [:]

    public init() {}

    /// Members settled: answered, skipped or not startable.
    public var decided: Int { accepted + unknown + rejected.values.reduce(0, +) + skipped.values.reduce(0, +) + notStartable }

    mutating func add(state: StartState, reason: String?, route: StartRoute?, count: Int) {
        audience += count
        if route == .token && StartLifecycle.startedStates.contains(state) { noChannel += count }
        switch state {
        case .planned: planned += count
        case .sending: sending += count
        case .accepted: accepted += count
        case .unknown: unknown += count
        case .rejected: rejected[reason ?? "unknown", default: 0] += count
        case .skipped:
            if reason == StartSkipReason.notStartable.rawValue {
                notStartable += count
            } else {
                skipped[reason ?? "unknown", default: 0] += count
            }
        }
    }
}
