// Warming a fresh connection up before requests need it: PostgreSQL parses a statement the first time a
// backend runs it, and plans it anew for each of its first five runs (custom plans, made for their
// parameters) before it settles on a generic plan if that is no worse. A pool warmed with one run per
// connection still planned the ingest's write in its first requests: under Scripts/bench service the
// first tenth of a second answered in 19 to 34 ms (p50 of the service time), 6 to 8 ms with six runs.
import Foundation
import Postgres

/// Runs the ingest's or the dispatcher's statements on a connection, writing nothing, until PostgreSQL
/// has settled their plans. serve warms each pool with what it runs: the API's with the ingest, the
/// broadcast pipeline's with the dispatcher's claims and records.
public enum PipelineWarmUp {
    /// Five custom plans, then the first run that may use the generic one.
    public static let runs = 6

    /// The ingest's statements; `pacing` as the ingest repository's.
    public static func ingest(on connection: PostgresConnection, pacing: TimeInterval?) async throws {
        for _ in 0..<runs { try await IngestRepository.warmUp(on: connection, pacing: pacing) }
    }

    /// The dispatcher's claims and records.
    public static func dispatcher(on connection: PostgresConnection) async throws {
        for _ in 0..<runs { try await OutboxRepository.warmUp(on: connection) }
    }
}
