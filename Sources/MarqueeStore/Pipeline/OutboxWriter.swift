// The one writer of `updates` and `outbox`: every statement that inserts into either table is here, so the
// guarantees they keep together (one outbox row per event pointing at its newest pending update, an update
// stored with its outbox row in one transaction) are read in one file. Its operations:
// enqueue (the ingest), queue an end (a postponement), requeue the latest (a channel that opens again, the last
// broadcast's state for a window of starts), drop (the event's pending work goes unsent) and stop broadcasting.
// Callers run them inside their own transactions. The ingest's write and a postponement stay one statement each:
// they compose this writer's common table expressions instead of adding a round trip (the ingest is one round trip
// per update, and its throughput is measured by `Scripts/bench service`, docs/benchmarks.md).
import Foundation
import MarqueeCore
import Postgres

/// The operations that write `updates` and `outbox`.
enum OutboxWriter {
    // MARK: enqueue

    /// The ingest's `stored` and `queued` expressions (`WITH ..., <these>, ...`): the update, under the id the
    /// caller's `latest` made newest, or a fresh id when `latest.superseded` (then recorded superseded and not
    /// queued); and the event's one outbox row pointing at it, due when `pacing` allows after the channel's last
    /// broadcast (at once when urgent). Reads the caller's `latest` (`latest_update_id`, `latest_state_at`,
    /// `superseded`) and `input` (`event_id`, `action`, `occurred_at`); `stored` returns `id, disposition,
    /// occurred_at, received_at` and `queued` returns `next_attempt_at`.
    static func enqueue(eventID: Int, _ draft: UpdateDraft, state: JSONValue, pacing: TimeInterval?) -> PostgresQuery {
        """
        stored AS (
            INSERT INTO updates (id, event_id, api_key_id, action, content_state, alert, stale_date, dismissal_date,
                                 relevance_score, priority, occurred_at, not_before, disposition, disposed_at)
            OVERRIDING SYSTEM VALUE
            SELECT CASE WHEN l.superseded THEN nextval('updates_id_seq') ELSE l.latest_update_id END,
                   i.event_id, \(draft.apiKeyID), i.action, \(state.postgresJSON), \(draft.alert?.postgresJSON),
                   \(draft.staleDate), \(draft.dismissalDate), \(draft.relevanceScore), \(draft.priority.rawValue),
                   coalesce(i.occurred_at, l.latest_state_at), \(draft.notBefore),
                   CASE WHEN l.superseded THEN \(UpdateDisposition.superseded.sql) ELSE \(UpdateDisposition.pending.sql) END,
                   CASE WHEN l.superseded THEN now() END
            FROM latest l, input i
            RETURNING id, disposition, occurred_at, received_at
        ), queued AS (
            INSERT INTO outbox (event_id, update_id, not_before, next_attempt_at)
            SELECT \(eventID), id, \(draft.notBefore),
                   CASE WHEN \(draft.urgent) THEN \(IngestRepository.urgentDue)
                        ELSE greatest(now(), (SELECT c.last_broadcast_at + make_interval(secs => \(pacing)::float8) FROM channels c
                                              WHERE c.event_id = \(eventID) AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) LIMIT 1)) END
            FROM stored WHERE disposition = \(UpdateDisposition.pending.sql)
            ON CONFLICT (event_id) DO UPDATE SET
                update_id = EXCLUDED.update_id, not_before = EXCLUDED.not_before, updated_at = now(),
                next_attempt_at = CASE WHEN \(draft.urgent) THEN \(IngestRepository.urgentDue) ELSE outbox.next_attempt_at END
            RETURNING next_attempt_at
        )
        """
    }

    // MARK: queue an end

    /// A postponement's `stored` and `queued` expressions: an `end` with `state` recorded with `apiKeyID`, and the
    /// event's outbox row pointing at it, due at once (it replaces whatever was queued). `stored` returns `id`.
    static func queueEnd(eventID: Int, apiKeyID: Int?, state: JSONValue) -> PostgresQuery {
        """
        stored AS (
            INSERT INTO updates (event_id, api_key_id, action, content_state, priority, occurred_at, disposition)
            VALUES (\(eventID), \(apiKeyID), \(UpdateAction.end.sql), \(state.postgresJSON)::jsonb, \(RequestedPriority.auto.rawValue), now(),
                    \(UpdateDisposition.pending.sql))
            RETURNING id
        ), queued AS (
            INSERT INTO outbox (event_id, update_id, next_attempt_at)
            SELECT \(eventID), id, \(IngestRepository.urgentDue) FROM stored
            ON CONFLICT (event_id) DO UPDATE SET
                update_id = EXCLUDED.update_id, not_before = NULL, next_attempt_at = EXCLUDED.next_attempt_at, updated_at = now()
        )
        """
    }

    // MARK: requeue the latest

    /// The event's channel opened (again): clears `channel_lost` and queues the newest pending update when no
    /// outbox row points at one (updates that arrived before the channel existed, or while it was lost), then
    /// wakes the dispatchers.
    static func resumeBroadcasting(eventID: Int, on tx: PostgresConnection) async throws {
        try await tx.query(
            """
            WITH cleared AS (UPDATE events SET channel_lost = false, updated_at = now() WHERE id = \(eventID) AND channel_lost)
            INSERT INTO outbox (event_id, update_id, not_before)
            SELECT \(eventID), id, not_before FROM updates WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.pending.sql)
            ORDER BY id DESC LIMIT 1
            ON CONFLICT (event_id) DO NOTHING
            """)
        try await tx.query("SELECT pg_notify(\(IngestRepository.notifyChannel), \(String(eventID)))")
    }

    /// Queues the event's last broadcast state to go out again (`StartChunkWork.broadcastLastStateAgain`): a new
    /// update with that broadcast's content-state, stale date and relevance, no alert, priority `low`, no API key.
    /// Nothing is queued while the event has outbox work (which goes out with that state or a newer one), when its
    /// status is not one of `states`, or when its last broadcast was its end. Returns whether it was queued.
    static func requeueLastBroadcast(eventID: Int, whileEventIn states: PostgresStaticSQL, on tx: PostgresConnection) async throws -> Bool {
        guard
            let repeated = try await tx.query(
                """
                INSERT INTO updates (event_id, action, content_state, stale_date, relevance_score, priority, occurred_at)
                SELECT u.event_id, \(UpdateAction.update.sql), u.content_state, u.stale_date, u.relevance_score,
                       \(RequestedPriority.low.sql), u.occurred_at
                FROM updates u JOIN events e ON e.id = u.event_id AND e.status IN \(states)
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

    // MARK: drop

    /// The event's pending work goes unsent: its pending updates are recorded `unsent` and its outbox row goes (an
    /// event that ends without a channel, a cancel that sends nothing).
    static func drop(eventID: Int, on tx: PostgresConnection) async throws {
        try await tx.execute(
            """
            UPDATE updates SET disposition = \(UpdateDisposition.unsent.sql), disposed_at = now()
            WHERE event_id = \(eventID) AND disposition = \(UpdateDisposition.pending.sql)
            """)
        try await tx.execute("DELETE FROM outbox WHERE event_id = \(eventID)")
    }

    /// The event's channel is gone while activities may listen on it (ChannelNotRegistered, missing at APNs, an
    /// operator's delete of a live channel): the event is flagged `channel_lost` and its outbox row goes; its
    /// pending updates stay pending, for `resumeBroadcasting` once a channel opens again.
    static func stopBroadcasting(eventID: Int, on tx: PostgresConnection) async throws {
        try await tx.query(
            """
            WITH flagged AS (UPDATE events SET channel_lost = true, updated_at = now() WHERE id = \(eventID))
            DELETE FROM outbox WHERE event_id = \(eventID)
            """)
    }
}
