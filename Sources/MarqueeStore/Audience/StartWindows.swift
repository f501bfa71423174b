// The start ledger's writes (Sql/0042), split from StartChunkWork.swift: the starts a chunk decided not to send, a
// send window marked by one `start_windows` row just before it goes (under its event's window lock), each answer
// inserted once as it arrives, and the windows a dead holder left, settled `unknown`. A window names an installation
// only while no start of the event's round went out for it and no other run's open window names it.
import Foundation
import MarqueeCore
import Postgres

extension StartRepository {
    // MARK: skipped starts

    /// Records starts the run decided not to send, one statement for all: new rows, and planned ones (retries) settled.
    public func skip(_ chunk: ClaimedStartChunk, _ skipped: [SkippedStart]) async throws {
        guard !skipped.isEmpty else { return }
        let skippedState = StartLifecycle.transition(from: .planned, on: .skipped)!
        let retries = skipped.filter { $0.plannedStartID != nil }
        let new = skipped.filter { $0.plannedStartID == nil }
        // Two statements, each only when it has rows (as in `markStatement`: a join by id to NULL ids may read the table).
        if !retries.isEmpty { try await pool.execute(Self.skipRetriesStatement(retries)) }
        guard !new.isEmpty else { return }
        try await pool.execute(
            """
            INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, state, reason)
            SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), i.installation, i.token, i.os_major, \(skippedState), i.reason
            FROM unnest(\(PostgresColumn(new.map(\.installation)))::bigint[], \(PostgresColumn(new.map(\.token)))::text[],
                        \(PostgresColumn(new.map(\.osMajor)))::integer[], \(PostgresColumn(new.map(\.reason.rawValue)))::text[])
                 AS i (installation, token, os_major, reason)
            ON CONFLICT DO NOTHING
            """)
    }

    /// Settles planned starts (retries) `skipped`, each with its reason.
    static func skipRetriesStatement(_ retries: [SkippedStart]) -> PostgresQuery {
        """
        UPDATE starts s SET state = \(StartLifecycle.transition(from: .planned, on: .skipped)!), reason = i.reason, next_attempt_at = NULL
        FROM unnest(\(PostgresColumn(retries.map(\.plannedStartID)))::bigint[], \(PostgresColumn(retries.map(\.reason.rawValue)))::text[])
             AS i (id, reason)
        -- Found by id with `= ANY`, an index scan whatever the estimate (a join alone was planned as a hashed read of every
        -- start).
        WHERE s.id = ANY (\(PostgresColumn(retries.map(\.plannedStartID)))::bigint[]) AND s.id = i.id AND s.state = \(StartState.planned)
        """
    }

    /// Marks a send window just before it goes (Sql/0042), in one transaction under the event's window lock: its first
    /// sends in one `start_windows` row, and its retries (planned starts) `sending` in their rows, which take the
    /// installation's current token. Only installations still enabled, with that token current, with no start of the
    /// event's round that went out and none in an open window of the round, are marked; the rest are left out. The
    /// event's activities are read again here: an installation whose app registered an activity of the round (or
    /// whose user dismissed one) since the chunk's members were read is recorded skipped instead (`has_activity`,
    /// `dismissed`). A registration committed after this still gets its start (docs/api.md#activities). The lock is
    /// held from the read of what went out until the window is committed, so two runs of one event, on any
    /// instances, never mark one installation twice; it is not held while the window is sent.
    public func markWindow(_ chunk: ClaimedStartChunk, _ starts: [PlannedStart], now: Date? = nil) async throws -> MarkedWindow {
        guard !starts.isEmpty else { return MarkedWindow(id: nil, markedAt: now ?? Date(), starts: []) }
        let rows = try await pool.withTransaction { tx in
            let alone = try await tx.query(
                """
                SELECT NOT EXISTS (SELECT 1 FROM start_runs WHERE event_id = \(chunk.eventID) AND id <> \(chunk.runID)
                                   AND state IN \(StartRunState.openStates.sql)) AS alone
                """)[0].decode(Bool.self, column: "alone")
            try await tx.execute(Self.windowLock(eventID: chunk.eventID, shared: alone))
            return try await tx.query(Self.markStatement(chunk, starts, now: now))
        }
        var id: Int?
        var markedAt = now ?? Date()
        var marked: [SendingStart] = []
        marked.reserveCapacity(rows.count)
        for row in rows {
            if let window: Int = try row.decode(column: "window_id") {
                id = window
                markedAt = try row.decode(column: "marked_at")
            }
            marked.append(
                SendingStart(
                    installation: try row.decode(column: "installation"), token: try row.decode(column: "token"),
                    osMajor: try row.decode(column: "os_major"), route: try row.decodeRaw(StartRoute.self, column: "path"),
                    attempt: try row.decode(column: "attempts"), retriedStartID: try row.decode(column: "retried_id")))
        }
        return MarkedWindow(id: id, markedAt: markedAt, starts: marked)
    }

    /// The transaction-scoped advisory lock of an event's windows (two keys: this space, and the event's id folded into
    /// 31 bits; two events that share a key only wait on each other's marks). A run that is the event's only open one
    /// marks under the lock shared: its chunks' ranges never overlap, so they mark at once. With another run open, a
    /// mark takes it exclusive, and so does the transaction that creates a run (`createManualRun`,
    /// `createDueAutomaticRuns`), so a mark that found itself alone just before a second run was committed is
    /// committed before that run's first mark reads, or waits for it.
    static func windowLock(eventID: Int, shared: Bool = false) -> PostgresQuery {
        shared
            ? "SELECT pg_advisory_xact_lock_shared(\(Self.windowLockSpace)::integer, (\(eventID)::bigint % 2147483647)::integer)"
            : "SELECT pg_advisory_xact_lock(\(Self.windowLockSpace)::integer, (\(eventID)::bigint % 2147483647)::integer)"
    }

    /// The advisory lock space of start windows ("MQsw").
    static let windowLockSpace = 0x4D51_7377

    static func markStatement(_ chunk: ClaimedStartChunk, _ starts: [PlannedStart], now: Date?) -> PostgresQuery {
        let sending = StartLifecycle.transition(from: .planned, on: .sendBegan)!
        // The retries' statements only where the window has retries: a join of starts by id to a batch whose ids are
        // all NULL may still be planned as a read of the whole table.
        let retries: PostgresQuery =
            starts.contains(where: { $0.plannedStartID != nil })
            ? """
            , held_settled AS (
                -- Found by id with `= ANY`, an index scan whatever the estimate: a join to the window's rows was planned
                -- as a hashed read of every start.
                UPDATE starts s SET state = \(StartLifecycle.transition(from: .planned, on: .skipped)!),
                    reason = (SELECT i.held_reason FROM input i WHERE i.planned_id = s.id), next_attempt_at = NULL
                WHERE s.id = ANY (ARRAY(SELECT planned_id FROM input WHERE held_reason IS NOT NULL AND planned_id IS NOT NULL))
                  AND s.state = \(StartState.planned)
            ), retried AS (
                UPDATE starts s SET state = \(sending), token = e.token, path = e.path, attempts = s.attempts + 1,
                    sent_at = coalesce(\(now), now()), next_attempt_at = NULL
                FROM eligible e WHERE s.id = e.planned_id AND s.state = \(StartState.planned)
                RETURNING s.id, s.installation, s.token, s.os_major, s.path, s.attempts
            )
            """
            : """
            , retried AS (
                SELECT NULL::bigint AS id, NULL::bigint AS installation, NULL::text AS token, NULL::integer AS os_major,
                       NULL::text AS path, NULL::integer AS attempts
                WHERE false
            )
            """
        return """
            WITH input AS (
                SELECT i.*, CASE WHEN \(fragment: Self.dismissedByUser(chunk, installation: "i.installation")) THEN \(StartSkipReason.dismissed.rawValue)
                                 WHEN \(fragment: Self.hasActivityOfRound(chunk, installation: "i.installation"))
                                 THEN \(StartSkipReason.hasActivity.rawValue) END AS held_reason
                FROM unnest(\(PostgresColumn(starts.map(\.installation)))::bigint[], \(PostgresColumn(starts.map(\.token)))::text[],
                            \(PostgresColumn(starts.map(\.osMajor)))::integer[], \(PostgresColumn(starts.map(\.route.rawValue)))::text[],
                            \(PostgresColumn(starts.map(\.plannedStartID)))::bigint[])
                     WITH ORDINALITY AS i (installation, token, os_major, path, planned_id, n)
            ), open AS (
                -- Other runs' open windows of the event's round. The run's own are its other chunks', whose ranges never
                -- overlap this one's (a pass begins once the last one's chunks are done), so a kick-off's one run reads
                -- nothing here: with them, each row of the window compared itself with every element of the others.
                SELECT unnest(w.installations) AS installation FROM start_windows w
                WHERE w.event_id = \(chunk.eventID) AND w.audience_round = \(chunk.audienceRound) AND w.run_id <> \(chunk.runID)
            ), eligible AS (
                SELECT i.* FROM input i JOIN installations n ON n.id = i.installation
                -- A probe per row of starts_once_per_event (the LIMIT keeps it one: a plain NOT EXISTS may be planned
                -- as a hashed read of every start of the event, per window, whenever the statistics are older than
                -- the table's growth, as in the first minute of a big kick-off).
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM starts s WHERE s.event_id = \(chunk.eventID) AND s.installation = i.installation
                      AND s.went_out AND s.audience_round = \(chunk.audienceRound)
                    LIMIT 1
                ) started ON true
                WHERE i.held_reason IS NULL AND started.found IS NULL
                  AND n.live_activities_enabled AND n.push_to_start_token = i.token AND n.token_refused_reason IS NULL
                  AND NOT EXISTS (SELECT 1 FROM open o WHERE o.installation = i.installation)
            ), held_recorded AS (
                INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, state, reason)
                SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), installation, token, os_major, \(StartState.skipped), held_reason
                FROM input WHERE held_reason IS NOT NULL AND planned_id IS NULL
                ON CONFLICT DO NOTHING
            )\(fragment: retries), marked AS (
                INSERT INTO start_windows (chunk_id, run_id, event_id, audience_round, marked_at, installations, tokens, os_majors, paths)
                SELECT \(chunk.id), \(chunk.runID), \(chunk.eventID), \(chunk.audienceRound), coalesce(\(now), now()),
                       array_agg(installation ORDER BY n), array_agg(token ORDER BY n), array_agg(os_major ORDER BY n),
                       array_agg(path ORDER BY n)
                FROM eligible WHERE planned_id IS NULL
                HAVING count(*) > 0
                RETURNING id, marked_at, installations, tokens, os_majors, paths
            )
            SELECT NULL::bigint AS window_id, NULL::timestamptz AS marked_at, r.id AS retried_id, r.installation, r.token,
                   r.os_major, r.path, r.attempts
            FROM retried r
            UNION ALL
            SELECT m.id, m.marked_at, NULL, e.installation, e.token, e.os_major, e.path, 1
            FROM marked m, unnest(m.installations, m.tokens, m.os_majors, m.paths) AS e (installation, token, os_major, path)
            """
    }

    /// Writes APNs' answers to a window's starts as they arrive, one statement for a batch: a first send's start is
    /// inserted in its answer's state (never before: its window named it), a retry's row changes only while still
    /// `sending`. The batch that ends the window (`last`) deletes its row. A start a new holder already settled
    /// `unknown` (the window's holder was taken for gone) keeps that. The last batch moves the chunk's last acceptance
    /// forward when the window had an accepted answer (`windowAccepted`, or one in that batch); not the run's, whose row
    /// would be every window's lock. Returns the answers written.
    @discardableResult
    public func record(
        _ chunk: ClaimedStartChunk, window: MarkedWindow, _ answers: [StartAnswerRecord], last: Bool, windowAccepted: Bool = false,
        now: Date? = nil
    ) async throws -> Int {
        guard !answers.isEmpty || (last && window.id != nil) else { return 0 }
        let rows = try await pool.query(
            Self.recordStatement(chunk, window: window, answers, last: last, windowAccepted: windowAccepted, now: now))
        return try rows[0].decode(column: "written")
    }

    static func recordStatement(
        _ chunk: ClaimedStartChunk, window: MarkedWindow, _ answers: [StartAnswerRecord], last: Bool, windowAccepted: Bool, now: Date?
    ) -> PostgresQuery {
        // Each part only where the batch has its kind of start (as in `markStatement`).
        let retried: PostgresQuery =
            answers.contains(where: { $0.start.retriedStartID != nil })
            ? """
            , retried AS (
                UPDATE starts s SET state = a.state, reason = a.reason, status = a.status, apns_unique_id = a.unique_id,
                    answered_at = coalesce(\(now), now()),
                    next_attempt_at = CASE WHEN a.retry_after IS NOT NULL THEN coalesce(\(now), now()) + make_interval(secs => a.retry_after) END
                FROM answers a
                -- Found by id with `= ANY`, an index scan whatever the estimate (a join alone was planned as a hashed read
                -- of every start).
                WHERE s.id = ANY (ARRAY(SELECT retried_id FROM answers WHERE retried_id IS NOT NULL)) AND s.id = a.retried_id
                  AND s.state = \(StartState.sending)
                RETURNING s.state
            )
            """
            : ", retried AS (SELECT NULL::text AS state WHERE false)"
        let inserted: PostgresQuery =
            answers.contains(where: { $0.start.retriedStartID == nil })
            ? """
            , inserted AS (
                INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, path, state, reason, status, attempts,
                                    sent_at, answered_at, next_attempt_at, apns_unique_id, audience_round)
                SELECT \(chunk.runID), \(chunk.appID), \(chunk.eventID), a.installation, a.token, a.os_major, a.path, a.state, a.reason,
                       a.status, 1, \(window.markedAt), coalesce(\(now), now()),
                       CASE WHEN a.retry_after IS NOT NULL THEN coalesce(\(now), now()) + make_interval(secs => a.retry_after) END,
                       a.unique_id, \(chunk.audienceRound)
                FROM answers a WHERE a.retried_id IS NULL
                ON CONFLICT DO NOTHING
                RETURNING state
            )
            """
            : ", inserted AS (SELECT NULL::text AS state WHERE false)"
        return """
            WITH answers AS (
                SELECT * FROM unnest(
                    \(PostgresColumn(answers.map(\.start.installation)))::bigint[], \(PostgresColumn(answers.map(\.start.token)))::text[],
                    \(PostgresColumn(answers.map(\.start.osMajor)))::integer[], \(PostgresColumn(answers.map(\.start.route.rawValue)))::text[],
                    \(PostgresColumn(answers.map(\.start.retriedStartID)))::bigint[], \(PostgresColumn(answers.map(\.state.rawValue)))::text[],
                    \(PostgresColumn(answers.map(\.reason)))::text[], \(PostgresColumn(answers.map(\.status)))::integer[],
                    \(PostgresColumn(answers.map(\.retryAfter)))::float8[], \(PostgresColumn(answers.map(\.apnsUniqueID)))::uuid[])
                    AS a (installation, token, os_major, path, retried_id, state, reason, status, retry_after, unique_id)
            )\(fragment: retried)\(fragment: inserted), closed AS (
                DELETE FROM start_windows WHERE id = \(window.id) AND \(last)
            ), acceptance AS (
                -- Once a window, by its last batch (the chunk's row is not rewritten for every batch).
                UPDATE start_chunks SET last_accepted_at = coalesce(\(now), now())
                WHERE id = \(chunk.id) AND \(last)
                  AND (\(windowAccepted) OR EXISTS (SELECT 1 FROM retried WHERE state = \(StartState.accepted))
                       OR EXISTS (SELECT 1 FROM inserted WHERE state = \(StartState.accepted)))
            )
            SELECT (SELECT count(*) FROM retried) + (SELECT count(*) FROM inserted) AS written
            """
    }

    // MARK: a holder that is gone

    /// Starts left by a holder of the chunk that is gone: the first sends its open windows name that have no row,
    /// and its retries left `sending`. Nobody can tell whether APNs took them (`StartLifecycle`'s `holderLost`), so
    /// they are `unknown`, counted and never resent; the windows are deleted. Returns the starts settled.
    public func settleAbandoned(_ chunk: ClaimedStartChunk, now: Date? = nil) async throws -> Int {
        let unknown = StartLifecycle.transition(from: .sending, on: .holderLost)!
        let rows = try await pool.query(
            """
            WITH retries AS (
                UPDATE starts SET state = \(unknown), reason = 'holder_lost', answered_at = coalesce(\(now), now())
                WHERE run_id = \(chunk.runID) AND installation > \(chunk.after) AND installation <= \(chunk.through)
                  AND state = \(StartState.sending)
                RETURNING 1
            ), open AS (
                DELETE FROM start_windows WHERE chunk_id = \(chunk.id) RETURNING *
            ), lost AS (
                -- A start the window's holder answered has a row (went out or not): the conflict leaves it.
                INSERT INTO starts (run_id, app_id, event_id, installation, token, os_major, path, state, reason, attempts,
                                    sent_at, answered_at, audience_round)
                SELECT o.run_id, \(chunk.appID), o.event_id, e.installation, e.token, e.os_major, e.path, \(unknown), 'holder_lost', 1,
                       o.marked_at, coalesce(\(now), now()), o.audience_round
                FROM open o, unnest(o.installations, o.tokens, o.os_majors, o.paths) AS e (installation, token, os_major, path)
                ON CONFLICT DO NOTHING
                RETURNING 1
            ), acceptance AS (
                -- The answers its holder wrote before it went: the last accepted one moves the chunk's last acceptance,
                -- which only a window's last batch moves.
                UPDATE start_chunks c SET last_accepted_at = greatest(c.last_accepted_at, a.at)
                FROM (SELECT max(s.answered_at) AS at
                      FROM open o CROSS JOIN LATERAL unnest(o.installations, o.tokens) AS e (installation, token)
                      JOIN starts s ON s.run_id = o.run_id AND s.installation = e.installation AND s.token = e.token
                      WHERE s.state = \(StartState.accepted)) a
                WHERE c.id = \(chunk.id) AND a.at IS NOT NULL
            )
            SELECT (SELECT count(*) FROM retries) + (SELECT count(*) FROM lost) AS settled
            """)
        return try rows[0].decode(column: "settled")
    }
}
