// Events: create, read, list with keyset paging, latest state and counts, and the changes after creation (the values
// they read and write are in EventRecords.swift). Every status is written as EventLifecycle says.
import Foundation
import MarqueeCore
import Postgres

/// Events: create, read, list with keyset paging, latest state and counts.
public struct EventRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Stores a new event. Throws `externalIDTaken` when the app has one with this external id, and
    /// `invalidReference` when the app or attribute type is missing or the type is another app's.
    public func create(_ event: NewEvent) async throws -> EventRecord {
        let stateAt: Date? = event.initialState == nil ? nil : event.initialStateAt
        let hasState = event.initialState != nil
        do {
            let rows = try await pool.query(
                """
                INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy,
                                    starts_at, ends_at, topics, latest_state, latest_state_at, audience_lead, start_alert, freshness)
                VALUES (\(event.appID), \(event.externalID), \(event.kind), \(event.attributeTypeID),
                        \(event.attributes.postgresJSON), \(event.storagePolicy.rawValue), \(event.startsAt),
                        \(event.endsAt), \(event.topics), \(event.initialState?.postgresJSON),
                        CASE WHEN \(hasState) THEN coalesce(\(stateAt), now()) END, \(event.audienceLead), \(event.startAlert?.postgresJSON),
                        \(event.freshness?.json.postgresJSON)::jsonb)
                RETURNING \(unsafeRaw: EventRecord.columns)
                """)
            return try EventRecord(row: rows[0])
        } catch let error as PostgresError where error.sqlState == .uniqueViolation && error.constraint == "events_external_id_unique" {
            throw PipelineError.externalIDTaken(appID: event.appID, externalID: event.externalID)
        } catch let error as PostgresError where error.sqlState == .foreignKeyViolation {
            throw PipelineError.invalidReference("app \(event.appID) with attribute type \(event.attributeTypeID)")
        }
    }

    /// The event with this id (limited to `appID` when given), or nil.
    public func get(id: Int, appID: Int? = nil) async throws -> EventRecord? {
        let rows = try await pool.query(
            """
            SELECT \(unsafeRaw: EventRecord.columns) FROM events
            WHERE id = \(id) AND (\(appID)::bigint IS NULL OR app_id = \(appID))
            """)
        return try rows.first.map(EventRecord.init(row:))
    }

    /// The app's event with this external id, or nil.
    public func get(appID: Int, externalID: String) async throws -> EventRecord? {
        let rows = try await pool.query(
            """
            SELECT \(unsafeRaw: EventRecord.columns) FROM events WHERE app_id = \(appID) AND external_id = \(externalID)
            """)
        return try rows.first.map(EventRecord.init(row:))
    }

    /// Events matching `filter`, ordered by (starts_at, id), `limit` (1...1000) per page, after `cursor`.
    public func list(_ filter: EventFilter = EventFilter(), limit: Int = 100, cursor: String? = nil) async throws -> EventPage {
        let limit = min(max(1, limit), 1000)
        let after = try cursor.map(Self.decodeCursor)
        let rows = try await pool.query(
            """
            SELECT \(unsafeRaw: EventRecord.columns) FROM events
            WHERE (\(filter.appID)::bigint IS NULL OR app_id = \(filter.appID))
              AND (\(filter.status)::text IS NULL OR status = \(filter.status))
              AND (\(filter.kind)::text IS NULL OR kind = \(filter.kind))
              AND (\(filter.topic)::text IS NULL OR \(filter.topic) = ANY (topics))
              AND (\(filter.startsAfter)::timestamptz IS NULL OR starts_at >= \(filter.startsAfter))
              AND (\(filter.startsBefore)::timestamptz IS NULL OR starts_at < \(filter.startsBefore))
              AND (\(after?.startsAt)::timestamptz IS NULL OR (starts_at, id) > (\(after?.startsAt), \(after?.id)))
            ORDER BY starts_at, id
            LIMIT \(limit + 1)
            """)
        var events = try rows.map(EventRecord.init(row:))
        var next: String?
        if events.count > limit {
            events.removeLast()
            next = events.last.map { Self.encodeCursor(startsAt: $0.startsAt, id: $0.id) }
        }
        return EventPage(events: events, nextCursor: next)
    }

    /// The latest content-state of an event (limited to `appID` when given); throws `eventNotFound`.
    public func latestState(eventID: Int, appID: Int? = nil) async throws -> LatestState {
        let rows = try await pool.query(
            """
            SELECT latest_state, latest_state_at, latest_update_id FROM events
            WHERE id = \(eventID) AND (\(appID)::bigint IS NULL OR app_id = \(appID))
            """)
        guard let row = rows.first else { throw PipelineError.eventNotFound(eventID) }
        return LatestState(
            eventID: eventID, state: try row.decodeJSON(column: "latest_state"),
            at: try row.decode(Date?.self, column: "latest_state_at"),
            updateID: try row.decode(Int?.self, column: "latest_update_id"))
    }

    /// The content-state of each event's last broadcast update, by event id (events never broadcast are absent).
    public func lastBroadcastStates(eventIDs: [Int]) async throws -> [Int: JSONValue] {
        var states: [Int: JSONValue] = [:]
        for row in try await pool.query(
            """
            SELECT e.id AS event_id,
                   (SELECT content_state FROM updates u WHERE u.event_id = e.id AND u.disposition = \(UpdateDisposition.broadcast.sql)
                    ORDER BY u.id DESC LIMIT 1) AS content_state
            FROM unnest(\(eventIDs.map(String.init))::bigint[]) AS e (id)
            """)
        {
            guard let state = try row.decodeJSON(column: "content_state") else { continue }
            states[try row.decode(Int.self, column: "event_id")] = state
        }
        return states
    }

    /// Updates by disposition (with those purged past their retention, `purgeUpdates`) and deliveries of the
    /// event's channels.
    public func counts(eventID: Int) async throws -> EventCounts {
        let row = try await pool.query(
            """
            SELECT
              (SELECT count(*) FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.pending.sql)) + coalesce(p.pending, 0) AS pending,
              (SELECT count(*) FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.broadcast.sql)) + coalesce(p.broadcast, 0) AS broadcast,
              (SELECT count(*) FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.conflated.sql)) + coalesce(p.conflated, 0) AS conflated,
              (SELECT count(*) FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.superseded.sql)) + coalesce(p.superseded, 0) AS superseded,
              (SELECT count(*) FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.unsent.sql)) + coalesce(p.unsent, 0) AS unsent,
              (SELECT count(*) FROM deliveries d JOIN channels c ON c.id = d.channel_id WHERE c.event_id = \(eventID)) AS deliveries,
              (SELECT count(*) FROM deliveries d JOIN channels c ON c.id = d.channel_id
                WHERE c.event_id = \(eventID) AND (d.status IS NULL OR d.status >= 400)) AS failed
            FROM (VALUES (1)) AS one LEFT JOIN purged_update_counts p ON p.event_id = \(eventID)
            """)[0]
        return EventCounts(
            pending: try row.decode(Int.self, column: "pending"),
            broadcast: try row.decode(Int.self, column: "broadcast"),
            conflated: try row.decode(Int.self, column: "conflated"),
            superseded: try row.decode(Int.self, column: "superseded"),
            unsent: try row.decode(Int.self, column: "unsent"),
            deliveries: try row.decode(Int.self, column: "deliveries"),
            failedDeliveries: try row.decode(Int.self, column: "failed"))
    }

    /// Deletes the updates of events that ended before `cutoff` (an event's last change is its end), `batch`
    /// events a statement and at most `statements` statements, oldest event first; each event's counts by
    /// disposition are kept in purged_update_counts, which `counts` adds. Returns how many updates went.
    @discardableResult
    public func purgeUpdates(endedBefore cutoff: Date, batch: Int = 20, statements: Int = .max) async throws -> Int {
        var purged = 0
        for _ in 0..<statements {
            let row = try await pool.query(Self.purgeUpdatesStatement(endedBefore: cutoff, batch: batch))[0]
            purged += try row.decode(Int.self, column: "updates")
            if try row.decode(Int.self, column: "events") < batch { break }
        }
        return purged
    }

    /// One statement of `purgeUpdates`: `batch` final events past `cutoff`, their updates deleted and counted.
    static func purgeUpdatesStatement(endedBefore cutoff: Date, batch: Int) -> PostgresQuery {
        """
        WITH doomed AS (
            SELECT id FROM events
            WHERE status IN \(EventLifecycle.finalStates.sql) AND updates_purged_at IS NULL AND updated_at < \(cutoff)
            ORDER BY id LIMIT \(batch)
        ), gone AS (
            DELETE FROM updates u USING doomed d WHERE u.event_id = d.id RETURNING u.event_id, u.disposition
        ), counted AS (
            INSERT INTO purged_update_counts (event_id, pending, broadcast, conflated, superseded, unsent)
            SELECT d.id, count(*) FILTER (WHERE g.disposition = \(UpdateDisposition.pending.sql)), count(*) FILTER (WHERE g.disposition = \(UpdateDisposition.broadcast.sql)),
                   count(*) FILTER (WHERE g.disposition = \(UpdateDisposition.conflated.sql)), count(*) FILTER (WHERE g.disposition = \(UpdateDisposition.superseded.sql)),
                   count(*) FILTER (WHERE g.disposition = \(UpdateDisposition.unsent.sql))
            FROM doomed d LEFT JOIN gone g ON g.event_id = d.id GROUP BY d.id
            ON CONFLICT (event_id) DO UPDATE SET
                pending = purged_update_counts.pending + EXCLUDED.pending,
                broadcast = purged_update_counts.broadcast + EXCLUDED.broadcast,
                conflated = purged_update_counts.conflated + EXCLUDED.conflated,
                superseded = purged_update_counts.superseded + EXCLUDED.superseded,
                unsent = purged_update_counts.unsent + EXCLUDED.unsent
        ), marked AS (
            UPDATE events e SET updates_purged_at = now() FROM doomed d WHERE e.id = d.id
        )
        SELECT (SELECT count(*) FROM doomed) AS events, (SELECT count(*) FROM gone) AS updates
        """
    }

    /// Ends an event no channel can carry (none opened, refused, or lost), if its lifecycle takes
    /// `endedWithoutChannel` and it has no token activity (those take the end by the token route,
    /// `TokenRouteRepository`, so nothing is unsent while one could take it): its pending updates become unsent and
    /// its outbox row goes. Returns whether it ended.
    @discardableResult
    public func endWithoutChannel(eventID: Int) async throws -> Bool {
        try await pool.withTransaction { tx in
            let ended = try await tx.execute(
                """
                UPDATE events SET status = \(fragment: EventLifecycle.sqlStatus(after: .endedWithoutChannel, column: "status")), updated_at = now()
                WHERE id = \(eventID) AND status IN \(EventLifecycle.states(accepting: .endedWithoutChannel).sql)
                  AND NOT \(fragment: TokenRouteRepository.hasTokenActivity(eventID: "events.id"))
                """)
            guard ended == 1 else { return false }
            try await OutboxWriter.drop(eventID: eventID, on: tx)
            return true
        }
    }

    /// Scheduled events whose `startsAt` has come (`now`; the database clock when nil) and that have a
    /// channel become live, at most `limit` of them, earliest first, under the scheduler's lease. One
    /// without a current channel (none, or only the ended one of an audience round before a postponement) stays scheduled until the scheduler has planned it one (so the scheduler looks
    /// for events needing a channel among scheduled ones only). An event whose row another transaction holds
    /// (an ingest) is left for the next sweep rather than waited for. Returns their ids.
    public func markStarted(limit: Int, fence: LeaseGrant? = nil, now: Date? = nil) async throws -> [Int] {
        try await pool.withTransaction { tx in
            try await LeaderLeaseRepository.requireHeld(fence, now: now, on: tx)
            return try await tx.query(Self.markStartedStatement(limit: limit, now: now)).map { try $0.decode(Int.self, column: "id") }.sorted()
        }
    }

    /// The statement of `markStarted`.
    static func markStartedStatement(limit: Int, now: Date?) -> PostgresQuery {
        """
        UPDATE events SET status = \(fragment: Self.statusAfterStart), updated_at = now()
        WHERE id IN (SELECT e.id FROM events e WHERE e.status IN \(Self.statesToStart) AND e.starts_at <= coalesce(\(now), now())
                       AND (EXISTS (SELECT 1 FROM channels c WHERE c.event_id = e.id
                                    AND (\(fragment: ChannelRepository.ofCurrentRound) OR e.channel_lost))
                            -- Delivered on its token activities without a channel (the token route).
                            OR \(fragment: TokenRouteRepository.hasTokenActivity(eventID: "e.id")))
                     ORDER BY e.starts_at, e.id LIMIT \(limit) FOR UPDATE OF e SKIP LOCKED)
          AND status IN \(Self.statesToStart)
        RETURNING id
        """
    }

    private static let statesToStart = EventLifecycle.states(accepting: .startsAtReached).sql
    private static let statusAfterStart = EventLifecycle.sqlStatus(after: .startsAtReached, column: "status")

    /// Moves the event as its lifecycle says for `event`, if it is in a status that takes it (a stale writer
    /// changes nothing); returns whether it moved. The status alone: what the event's action asks besides
    /// (storing an update, unsent updates) is the caller's.
    @discardableResult
    public func perform(_ event: EventLifecycle.Event, eventID: Int) async throws -> Bool {
        try await pool.withConnection { try await Self.perform(event, eventID: eventID, on: $0) }
    }

    static func perform(_ event: EventLifecycle.Event, eventID: Int, on connection: PostgresConnection) async throws -> Bool {
        try await connection.execute(
            """
            UPDATE events SET status = \(fragment: EventLifecycle.sqlStatus(after: event, column: "status")), updated_at = now()
            WHERE id = \(eventID) AND status IN \(EventLifecycle.states(accepting: event).sql)
            """) == 1
    }

    // MARK: changes after creation

    /// Changes the event's schedule or audience settings under its row lock: `decide` gets the event and whether
    /// a start run of it sent push-to-starts, and returns the plan (EventChangePlanner) or a refusal, which is
    /// thrown and changes nothing. The change is recorded in event_changes with `apiKeyID`. Throws
    /// `eventNotFound` (also for another app's event when `appID` is given).
    public func change(
        eventID: Int, appID: Int?, apiKeyID: Int?, _ change: EventChange,
        decide: @Sendable (EventRecord, _ startsWentOut: Bool) -> Result<EventChangePlan, EventChangeRefusal>
    ) async throws -> (event: EventRecord, plan: EventChangePlan, stoppedRuns: [StartRunKind]) {
        try await pool.withTransaction { tx in
            guard
                let row = try await tx.query(
                    """
                    SELECT \(unsafeRaw: EventRecord.columns),
                           (EXISTS (SELECT 1 FROM starts s WHERE s.event_id = events.id AND s.went_out
                                    AND s.audience_round = events.audience_round)
                            OR EXISTS (SELECT 1 FROM start_windows w WHERE w.event_id = events.id
                                       AND w.audience_round = events.audience_round)) AS starts_went_out
                    FROM events WHERE id = \(eventID) AND (\(appID)::bigint IS NULL OR app_id = \(appID))
                    FOR UPDATE
                    """
                ).first
            else { throw PipelineError.eventNotFound(eventID) }
            let before = try EventRecord(row: row)
            let plan = try decide(before, try row.decode(Bool.self, column: "starts_went_out")).get()
            var after = try EventRecord(
                row: try await tx.query(
                    """
                    UPDATE events SET starts_at = \(plan.startsAt), ends_at = \(plan.endsAt), status = \(plan.status),
                        topics = coalesce(\(change.topics)::text[], topics),
                        audience_lead = CASE WHEN \(change.audienceLead != nil) THEN \(change.audienceLead ?? nil)::integer ELSE audience_lead END,
                        start_alert = CASE WHEN \(change.startAlert != nil) THEN \((change.startAlert ?? nil)?.postgresJSON)::jsonb ELSE start_alert END,
                        freshness = CASE WHEN \(change.freshness != nil) THEN \((change.freshness ?? nil)?.json.postgresJSON)::jsonb ELSE freshness END,
                        updated_at = now()
                    WHERE id = \(eventID)
                    RETURNING \(unsafeRaw: EventRecord.columns)
                    """)[0])
            var changes = Self.differences(before, after).objectValue ?? [:]
            var stoppedRuns: [StartRunKind] = []
            if plan.action == .restartAudience {
                let state = change.postponedState ?? before.latestState ?? [:]
                stoppedRuns = try await Self.restartAudience(eventID: eventID, apiKeyID: apiKeyID, endingWith: state, on: tx)
                changes["postponedState"] = state
                after = try await tx.query("SELECT \(unsafeRaw: EventRecord.columns) FROM events WHERE id = \(eventID)").map(EventRecord.init(row:))[
                    0]
            }
            try await Self.record(plan.event, eventID: eventID, appID: before.appID, apiKeyID: apiKeyID, changes: .object(changes), on: tx)
            return (after, plan, stoppedRuns)
        }
    }

    /// What a cancel of the event decides on (EventCancelPlan): its status, whether activities may be running (a
    /// push-to-start went out, the app registered an activity, or a broadcast reached its channel), whether its
    /// channel can broadcast an end, whether it has token activities to take the end by the token route, and the
    /// accepted starts that no end can reach (`unreachableStarts`). Nil when there is no such event (in `appID`'s app
    /// when given).
    public func cancelFacts(eventID: Int, appID: Int?) async throws -> EventCancelFacts? {
        guard
            let row = try await pool.query(
                """
                SELECT e.status,
                       EXISTS (SELECT 1 FROM starts s WHERE s.event_id = e.id AND s.went_out)
                       OR EXISTS (SELECT 1 FROM start_windows w WHERE w.event_id = e.id)
                       OR EXISTS (SELECT 1 FROM activities a WHERE a.event_id = e.id)
                       OR EXISTS (SELECT 1 FROM deliveries d JOIN channels c ON c.id = d.channel_id
                                  WHERE c.event_id = e.id AND d.kind = 'broadcast' AND d.status = 200) AS started,
                       \(fragment: Self.channelCarriesEnd) AS carries,
                       \(fragment: TokenRouteRepository.hasTokenActivity(eventID: "e.id")) AS tokens,
                       (\(fragment: Self.unreachableStartsCount)) AS unreachable
                FROM events e WHERE e.id = \(eventID) AND (\(appID)::bigint IS NULL OR e.app_id = \(appID))
                """
            ).first
        else { return nil }
        return EventCancelFacts(
            status: try row.decode(EventStatus.self, column: "status"), startedActivities: try row.decode(Bool.self, column: "started"),
            channelCarriesEnd: try row.decode(Bool.self, column: "carries"), tokenActivitiesTakeEnd: try row.decode(Bool.self, column: "tokens"),
            unreachableStarts: try row.decode(Int.self, column: "unreachable"))
    }

    /// The accepted starts of event `e`'s current round that no end reaches: the app never registered their activity,
    /// and they are not on a channel that can broadcast the end (a plain or `input-push-token` start, or any start
    /// when no channel carries it). Their devices keep showing the activity until iOS ends it.
    public func unreachableStarts(eventID: Int) async throws -> Int {
        try await pool.query("SELECT (\(fragment: Self.unreachableStartsCount)) AS n FROM events e WHERE e.id = \(eventID)").first?
            .decode(Int.self, column: "n") ?? 0
    }

    /// Event `e`'s channel is open (or ending) and can broadcast an end.
    static let channelCarriesEnd: PostgresQuery = """
        NOT e.channel_lost AND EXISTS (SELECT 1 FROM channels c WHERE c.event_id = e.id AND c.state IN \(ChannelLifecycle.broadcastingStates.sql))
        """

    static let unreachableStartsCount: PostgresQuery = """
        SELECT count(*)::integer FROM starts s
        WHERE s.event_id = e.id AND s.audience_round = e.audience_round AND s.state = \(StartState.accepted)
          AND NOT EXISTS (SELECT 1 FROM activities a WHERE a.event_id = e.id AND a.installation = s.installation
                          AND a.audience_round = e.audience_round)
          AND (s.path IS DISTINCT FROM \(StartRoute.channel.rawValue) OR NOT (\(fragment: channelCarriesEnd)))
        """

    /// Cancels an event that sends nothing (EventCancelPlan.closeQuietly): the status as the lifecycle says for
    /// `cancelRequested`, its pending updates unsent, its outbox row gone, the change recorded with `apiKeyID`. Returns
    /// the event, or nil when its status no longer takes a cancel (it ended meanwhile).
    public func cancelQuietly(eventID: Int, apiKeyID: Int?) async throws -> EventRecord? {
        try await pool.withTransaction { tx in
            guard
                let row = try await tx.query(
                    """
                    UPDATE events SET status = \(fragment: EventLifecycle.sqlStatus(after: .cancelRequested, column: "status")), updated_at = now()
                    WHERE id = \(eventID) AND status IN \(EventLifecycle.states(accepting: .cancelRequested).sql)
                    RETURNING \(unsafeRaw: EventRecord.columns)
                    """
                ).first
            else { return nil }
            let event = try EventRecord(row: row)
            try await OutboxWriter.drop(eventID: eventID, on: tx)
            try await Self.record(
                .cancelRequested, eventID: eventID, appID: event.appID, apiKeyID: apiKeyID, changes: ["broadcast": false], on: tx)
            return event
        }
    }

    /// Records a change made elsewhere (a cancel that queued its end through the ingest).
    public func recordChange(_ event: EventLifecycle.Event, eventID: Int, appID: Int, apiKeyID: Int?, changes: JSONValue) async throws {
        try await pool.withConnection { try await Self.record(event, eventID: eventID, appID: appID, apiKeyID: apiKeyID, changes: changes, on: $0) }
    }

    /// Performs the lifecycle's `restartAudience` (a postponement after starts went out), in the change's
    /// transaction: an `end` with `state` is queued for the running activities (the dispatcher broadcasts it on the
    /// channel, which then ends, and mirroring takes it to the activity tokens; the event's status stays), the
    /// event's audience round moves on (a new automatic run starts it at the new lead, once that end went out and a
    /// new channel opens), and the open start runs of the old round stop (their kinds are returned, for the metrics).
    static func restartAudience(
        eventID: Int, apiKeyID: Int?, endingWith state: JSONValue, on tx: PostgresConnection
    ) async throws -> [StartRunKind] {
        try await tx.execute(
            """
            WITH \(fragment: OutboxWriter.queueEnd(eventID: eventID, apiKeyID: apiKeyID, state: state))
            UPDATE events SET audience_round = audience_round + 1, postponed_at = now(), postponed_end_update_id = (SELECT id FROM stored),
                latest_state = \(state.postgresJSON)::jsonb, latest_state_at = now(), latest_update_id = (SELECT id FROM stored)
            WHERE id = \(eventID)
            """)
        let stopped = try await tx.query(
            """
            UPDATE start_runs SET state = \(fragment: StartRunLifecycle.sqlState(after: .postponed, column: "state")), finished_at = now(),
                first_pass_done_at = coalesce(first_pass_done_at, now())
            WHERE event_id = \(eventID) AND state IN \(StartRunState.openStates.sql)
            RETURNING kind
            """
        ).map { try $0.decodeRaw(StartRunKind.self, column: "kind") }
        try await tx.execute(
            """
            UPDATE start_chunks SET done = true, finished_at = now()
            WHERE run_id IN (SELECT id FROM start_runs WHERE event_id = \(eventID)) AND NOT done
            """)
        try await tx.execute(
            """
            UPDATE starts SET state = \(StartState.skipped.rawValue), reason = \(StartSkipReason.eventOver.rawValue), next_attempt_at = NULL
            WHERE event_id = \(eventID) AND state = \(StartState.planned.rawValue)
            """)
        return stopped
    }

    /// Writes one row of event_changes.
    static func record(
        _ event: EventLifecycle.Event, eventID: Int, appID: Int, apiKeyID: Int?, changes: JSONValue, on connection: PostgresConnection
    ) async throws {
        try await connection.execute(
            """
            INSERT INTO event_changes (app_id, event_id, api_key_id, kind, changes)
            VALUES (\(appID), \(eventID), \(apiKeyID), \(event.rawValue), \(changes.postgresJSON)::jsonb)
            """)
    }

    /// `{"field": {"from": .., "to": ..}}` for each field that differs between the two rows.
    static func differences(_ before: EventRecord, _ after: EventRecord) -> JSONValue {
        func date(_ value: Date?) -> JSONValue { value.map { .string($0.ISO8601Format()) } ?? .null }
        let pairs: [(String, JSONValue, JSONValue)] = [
            ("status", .string(before.status.rawValue), .string(after.status.rawValue)),
            ("startsAt", date(before.startsAt), date(after.startsAt)),
            ("endsAt", date(before.endsAt), date(after.endsAt)),
            ("topics", .array(before.topics.map(JSONValue.string)), .array(after.topics.map(JSONValue.string))),
            ("audienceLead", before.audienceLead.map { .int(Int64($0)) } ?? .null, after.audienceLead.map { .int(Int64($0)) } ?? .null),
            ("startAlert", before.startAlert ?? .null, after.startAlert ?? .null),
            ("freshness", before.freshness?.json ?? .null, after.freshness?.json ?? .null),
        ]
        var changes = JSONObject()
        for (field, from, to) in pairs where from != to { changes[field] = ["from": from, "to": to] }
        return .object(changes)
    }

    /// The changes recorded for the event, oldest first: (lifecycle event, API key id, changes, when).
    public func changes(eventID: Int) async throws -> [(kind: String, apiKeyID: Int?, changes: JSONValue, at: Date)] {
        try await pool.query(
            "SELECT kind, api_key_id, changes, created_at FROM event_changes WHERE event_id = \(eventID) ORDER BY id"
        ).map { row in
            (
                try row.decode(String.self, column: "kind"), try row.decode(Int?.self, column: "api_key_id"),
                try row.decodeJSON(column: "changes") ?? [:], try row.decode(Date.self, column: "created_at")
            )
        }
    }

    static func encodeCursor(startsAt: Date, id: Int) -> String {
        let micros = Int64((startsAt.timeIntervalSince1970 * 1_000_000).rounded())
        return Data("\(micros):\(id)".utf8).base64EncodedString()
    }

    static func decodeCursor(_ cursor: String) throws -> (startsAt: Date, id: Int) {
        guard let data = Data(base64Encoded: cursor), let text = String(data: data, encoding: .utf8) else {
            throw PipelineError.invalidCursor
        }
        let parts = text.split(separator: ":")
        guard parts.count == 2, let micros = Int64(parts[0]), let id = Int(parts[1]) else { throw PipelineError.invalidCursor }
        let seconds = micros.quotientAndRemainder(dividingBy: 1_000_000)
        return (Date(timeIntervalSince1970: Double(seconds.quotient) + Double(seconds.remainder) / 1_000_000), id)
    }
}
