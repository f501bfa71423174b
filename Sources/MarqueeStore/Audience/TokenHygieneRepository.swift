// What APNs' refusals of device tokens do to the registry (docs/apns.md#token-refusals), and the hourly
// prune of tokens no app sent for a long time. The start fan-out and mirroring call `refuse` with each
// refusal; `PushToStartTokenSlot` (for a push-to-start token) and `TokenRefusal` decide, this performs and
// records. A 410 carries APNs' time: a token that the app registered again after it stays (the device came
// back); a BadDeviceToken is flagged, not deleted.
import Foundation
import MarqueeCore
import Postgres

/// Token refusals and the stale-token prune.
public struct TokenHygieneRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Applies APNs' refusal of `token` (a push-to-start or an activity's update token of the app), records it
    /// in `token_invalidations`, and returns what was done.
    @discardableResult
    public func refuse(appID: Int, token: String, kind: TokenKind, refusal: TokenRefusal) async throws -> InvalidationOutcome {
        try await recordRefusal(appID: appID, token: token, kind: kind, refusal: refusal).outcome
    }

    /// `refuse`, also naming the installation the token belonged to by the app's installation id (what a log may
    /// show and every command takes), nil when none is known.
    public func recordRefusal(appID: Int, token: String, kind: TokenKind, refusal: TokenRefusal) async throws -> RecordedTokenRefusal {
        try await pool.withTransaction { tx in
            let (installation, outcome) =
                switch kind {
                case .pushToStart: try await Self.refusePushToStart(appID: appID, token: token, refusal: refusal, on: tx)
                case .activity: try await Self.refuseActivityToken(appID: appID, token: token, refusal: refusal, on: tx)
                }
            if outcome == .refused, case .notForTopic = refusal, let installation {
                try await tx.execute("UPDATE installations SET topic_refused_at = now() WHERE id = \(installation)")
            }
            var milliseconds: Int64?
            if case .gone(_, let stamp) = refusal { milliseconds = stamp }
            try await tx.execute(
                """
                INSERT INTO token_invalidations (app_id, installation, token, token_sha256, token_kind, reason, apns_timestamp_ms, outcome)
                VALUES (\(appID), \(installation), \(token), sha256(convert_to(\(token), 'UTF8')), \(kind), \(refusal.reason),
                        \(milliseconds), \(outcome))
                """)
            guard let installation else { return RecordedTokenRefusal(outcome: outcome, installationID: nil) }
            let named = try await tx.query("SELECT installation_id FROM installations WHERE id = \(installation)").first
            return RecordedTokenRefusal(outcome: outcome, installationID: try named?.decode(String.self, column: "installation_id"))
        }
    }

    private static func refusePushToStart(
        appID: Int, token: String, refusal: TokenRefusal,
        on tx: PostgresConnection
    ) async throws -> (Int?, InvalidationOutcome) {
        if let row = try await tx.query(
            """
            SELECT id, token_registered_at, token_seen_at, token_refused_reason, token_refused_at, previous_token, previous_token_until
            FROM installations WHERE app_id = \(appID) AND push_to_start_token = \(token) FOR UPDATE
            """
        ).first {
            let installation: Int = try row.decode(column: "id")
            var slot = PushToStartTokenSlot(
                token: token, registeredAt: try row.decode(column: "token_registered_at"), seenAt: try row.decode(column: "token_seen_at"),
                refusedReason: try row.decode(column: "token_refused_reason"), refusedAt: try row.decode(column: "token_refused_at"),
                previous: try row.decode(column: "previous_token"), previousUntil: try row.decode(column: "previous_token_until"))
            let outcome = slot.outcome(of: refusal)
            switch slot.handle(.refused(refusal), now: Date(), previousRetention: 0) {
            case .clear:
                try await tx.execute(
                    """
                    UPDATE installations SET \(InstallationRepository.tokenCleared) WHERE id = \(installation)
                    """)
            case .flagRefused:
                try await tx.execute(
                    """
                    UPDATE installations SET token_refused_reason = \(refusal.reason), token_refused_at = coalesce(token_refused_at, now())
                    WHERE id = \(installation)
                    """)
            case .keep, .rotate, .seenAgain:
                break
            }
            return (installation, outcome)
        }
        // A token already rotated away: nothing current changes, but the record names its installation.
        let previous = try await tx.query(
            """
            SELECT id FROM installations WHERE app_id = \(appID) AND previous_token = \(token) LIMIT 1
            """
        ).first
        return (try previous?.decode(Int.self, column: "id"), .unmatched)
    }

    private static func refuseActivityToken(
        appID: Int, token: String, refusal: TokenRefusal,
        on tx: PostgresConnection
    ) async throws -> (Int?, InvalidationOutcome) {
        let rows = try await tx.query(
            """
            SELECT id, installation, token_seen_at, state FROM activities
            WHERE app_id = \(appID) AND push_token = \(token) ORDER BY id DESC LIMIT 1 FOR UPDATE
            """)
        guard let row = rows.first else { return (nil, .unmatched) }
        let id: Int = try row.decode(column: "id")
        let state: ActivityLifecycle.State = try row.decode(column: "state")
        let outcome = refusal.outcome(tokenSeenAt: try row.decode(Date?.self, column: "token_seen_at"))
        // A token APNs no longer knows belongs to an activity that is gone: it ends (a tombstone).
        if outcome == .invalidated, case .store(let next) = ActivityLifecycle.transition(from: state, on: .ended) {
            try await tx.execute(
                """
                UPDATE activities SET state = \(next), ended_at = coalesce(ended_at, now()), updated_at = now() WHERE id = \(id)
                """)
        }
        return (try row.decode(Int.self, column: "installation"), outcome)
    }

    /// Deletes recorded refusals older than `date`, in statements of at most `batch` rows; returns how many went.
    public func purgeInvalidations(recordedBefore date: Date, batch: Int = 10_000, statements: Int = 20) async throws -> Int {
        try await BatchedStatements.run(batch: batch, limit: statements) {
            try await pool.execute(
                """
                DELETE FROM token_invalidations WHERE id IN (
                    SELECT id FROM token_invalidations WHERE recorded_at < \(date) ORDER BY recorded_at LIMIT \(batch))
                """)
        }
    }

    /// The hourly prune: push-to-start tokens no registration sent within `maxAge`, and previous tokens past
    /// their retention, in statements of at most `batch` rows. Returns the tokens removed.
    public func prune(notSeenFor maxAge: TimeInterval, batch: Int = 10_000, statements: Int = 20) async throws -> Int {
        let removed = try await BatchedStatements.run(batch: batch, limit: statements) {
            try await pool.execute(
                """
                UPDATE installations SET \(InstallationRepository.tokenCleared)
                WHERE id IN (
                    SELECT id FROM installations
                    WHERE push_to_start_token IS NOT NULL AND token_seen_at < now() - make_interval(secs => \(maxAge)::double precision)
                    LIMIT \(batch))
                """)
        }
        try await pool.execute(
            """
            UPDATE installations SET previous_token = NULL, previous_token_until = NULL
            WHERE previous_token IS NOT NULL AND previous_token_until < now()
            """)
        return removed
    }
}

/// What `TokenHygieneRepository.recordRefusal` did, and whose token it was (the app's installation id).
public struct RecordedTokenRefusal: Sendable, Equatable {
    public var outcome: InvalidationOutcome
    public var installationID: String?

    public init(outcome: InvalidationOutcome, installationID: String?) {
        self.outcome = outcome
        self.installationID = installationID
    }
}
