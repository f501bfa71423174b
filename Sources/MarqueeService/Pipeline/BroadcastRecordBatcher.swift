// Records accepted broadcasts in batches without making any of them wait for a timer: the first record
// goes at once; records that arrive while a batch is being written go together in the next one. Each
// statement costs PostgreSQL a fixed amount beyond its rows (starting the executor, compiling the
// tables' CHECK constraints, the commit and its WAL flush), so under load a batch of 20 costs little
// more than one record, and at low load nothing changes. At most `maxConcurrentBatches` statements are
// in flight; a batch takes one record per channel (the dispatcher never sends one channel twice at
// once, so a second one only waits for the next batch).
import Foundation
import MarqueeStore
import Synchronization

/// Writes `OutboxRepository.recordBroadcasts` batches on behalf of concurrent senders.
final class BroadcastRecordBatcher: Sendable {
    private struct Waiting {
        let record: BroadcastRecord
        let continuation: CheckedContinuation<BroadcastOutcome, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var batchesInFlight = 0
    }

    private let outbox: OutboxRepository
    private let now: @Sendable () -> Date?
    private let maxBatch: Int
    private let maxConcurrentBatches: Int
    private let state = Mutex(State())

    /// `now` gives the database clock override of the moment a batch is written (tests; nil: its own).
    init(outbox: OutboxRepository, maxBatch: Int = 64, maxConcurrentBatches: Int = 2, now: @escaping @Sendable () -> Date?) {
        self.outbox = outbox
        self.maxBatch = max(1, maxBatch)
        self.maxConcurrentBatches = max(1, maxConcurrentBatches)
        self.now = now
    }

    /// Records one broadcast, with others that are waiting; throws what recording it alone would.
    func record(_ record: BroadcastRecord) async throws -> BroadcastOutcome {
        try await withCheckedThrowingContinuation { continuation in
            let startsWriter = state.withLock { state in
                state.waiting.append(Waiting(record: record, continuation: continuation))
                guard state.batchesInFlight < maxConcurrentBatches else { return false }
                state.batchesInFlight += 1
                return true
            }
            // Unstructured on purpose: the writer outlives the sender that started it, and finishes
            // every record it takes (a cancelled sender still gets its row recorded).
            if startsWriter { Task { await writeBatches() } }
        }
    }

    /// Writes batches until nothing is waiting.
    private func writeBatches() async {
        while true {
            let batch: [Waiting] = state.withLock { state in
                var channels = Set<Int>()
                var taken: [Waiting] = []
                var left: [Waiting] = []
                for waiting in state.waiting {
                    if taken.count < maxBatch && channels.insert(waiting.record.claim.channelID).inserted {
                        taken.append(waiting)
                    } else {
                        left.append(waiting)
                    }
                }
                state.waiting = left
                if taken.isEmpty { state.batchesInFlight -= 1 }
                return taken
            }
            guard !batch.isEmpty else { return }
            do {
                let outcomes = try await outbox.recordBroadcasts(batch.map(\.record), now: now())
                for (waiting, outcome) in zip(batch, outcomes) { waiting.continuation.resume(with: outcome.mapError { $0 }) }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
            }
        }
    }
}
