// A run's estimated audience (`progress.estimatedAudience`, the ETA's denominator) was counted once, when the
// run was made: a run made before its followers registered showed 0 for good, while its late passes started
// them. The fan-out counts it again at every pass over the audience.
import Foundation
import Postgres

extension StartRepository {
    /// Counts the run's followers again (at the end of a pass and the start of the next), so its estimate follows
    /// the audience. Nothing happens for a run that is no longer there.
    public func refreshEstimatedAudience(runID: Int) async throws {
        guard let row = try await pool.query("SELECT event_id FROM start_runs WHERE id = \(runID)").first else { return }
        let eventID: Int = try row.decode(column: "event_id")
        try await pool.execute(
            """
            WITH run AS (\(fragment: Self.runSource(runID: runID)))
            UPDATE start_runs SET estimated_audience = (
                SELECT count(*) FROM (\(fragment: AudienceRepository.followers(eventID: eventID, after: 0, through: nil, limit: nil))) f
            ) WHERE id = \(runID)
            """)
    }
}
