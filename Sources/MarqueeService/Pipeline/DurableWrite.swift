// The one durable-write retry of every sender: an outcome APNs gave (a broadcast recorded, a start's answer) must
// reach PostgreSQL, else a send is repeated or a start counted unknown. A failure a retry can mend (a lost connection,
// a server restarting or refusing connections) is tried again after a backoff (50 ms doubling up to 1 s, jittered)
// until the deadline (a claim's lease: past it the row is anybody's) or the task is cancelled; any other error is
// thrown at once.
import Foundation
import MarqueeCore
import Postgres

/// Runs a write until PostgreSQL takes it, within a deadline.
enum DurableWrite {
    /// Runs `body` until it succeeds, fails for good, or the next try would pass `deadline`. `logger` carries what
    /// names the write: one warning at the first failure, one line once it went through.
    @discardableResult
    static func run<T: Sendable>(until deadline: ContinuousClock.Instant, logger: Logger, _ body: () async throws -> T) async throws -> T {
        var failures = 0
        while true {
            do {
                let result = try await body()
                if failures > 0 { logger.info("outcome written once the database answered again", ["failures": .int(failures)]) }
                return result
            } catch let error as PostgresError where error.isRetryable {
                failures += 1
                let delay = backoff.delay(attempt: failures)
                guard !Task.isCancelled, ContinuousClock.now + .seconds(delay) < deadline else { throw error }
                if failures == 1 { logger.warning("outcome not written; retrying until the database answers", ["error": .string("\(error)")]) }
                try await Task.sleep(for: .seconds(delay))
            }
        }
    }

    static let backoff = RetryBackoff(base: 0.05, maximum: 1)
}
