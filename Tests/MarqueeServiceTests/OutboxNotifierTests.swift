import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Postgres
import Synchronization
import Testing

/// Wake-ups after a commit: the local dispatcher at once, other instances by a NOTIFY that commits merge into.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct OutboxNotifierTests {
    @Test func wakesDispatchersInBatchesAndTheLocalOneAtOnceForUrgentWork() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let other = try await OtherInstance(f)
        defer { other.stop() }
        let notifier = OutboxNotifier(pool: f.pool, sender: "n1", interval: .milliseconds(200), logger: Logger { _ in })
        let wakes = Mutex(0)
        notifier.onCommitted { _ in wakes.withLock { $0 += 1 } }
        for _ in 0..<100 { notifier.committed() }
        #expect(wakes.withLock { $0 } <= 1)
        for _ in 0..<3 { notifier.committed(urgent: true) }
        #expect(wakes.withLock { $0 } >= 3 && wakes.withLock { $0 } <= 4)

        let note = try #require(await other.nextNotification())
        #expect(note.channel == IngestRepository.notifyChannel)
        #expect(note.payload == "n1")
        // The hundred commits went out as the first NOTIFY and at most one more, once the interval passed. What is
        // counted is what did not happen over five intervals: the wait is the behaviour under test.
        try await Task.sleep(for: .seconds(1))
        #expect(await other.stopAndCountTheRest() <= 1)
        #expect(wakes.withLock { $0 } <= 5)
    }

    @Test func workDueLaterGoesToTheLocalDispatcherWithItsDueTimeAndNoNotify() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let other = try await OtherInstance(f)
        defer { other.stop() }
        let notifier = OutboxNotifier(pool: f.pool, sender: "n1", interval: .milliseconds(20), logger: Logger { _ in })
        let wakes = Mutex<[TimeInterval?]>([])
        notifier.onCommitted { dueIn in wakes.withLock { $0.append(dueIn) } }
        notifier.committed(dueIn: 0.7)
        notifier.committed(urgent: true, dueIn: 0.7)  // urgent work is due at once whatever it says
        #expect(wakes.withLock { $0.prefix(2) } == [0.7, nil])
        // Only the urgent commit sent a NOTIFY.
        _ = try #require(await other.nextNotification())
        notifier.committed(dueIn: 0.9)
        // No NOTIFY over fifteen intervals: the wait is the behaviour under test.
        try await Task.sleep(for: .milliseconds(300))
        #expect(await other.stopAndCountTheRest() == 0)
        // The urgent commit's batch may have woken it once more; the later work came with its due time.
        #expect(wakes.withLock { $0.compactMap { $0 } } == [0.7, 0.9])
        #expect(wakes.withLock { $0.last } == 0.9)
    }
}

/// Another instance's view of the outbox channel: a listener on its own connection.
private final class OtherInstance {
    private let listener: PostgresListener
    private var iterator: AsyncStream<PostgresListener.Event>.Iterator

    init(_ f: PipelineServiceFixture) async throws {
        listener = PostgresListener(configuration: f.configuration, channels: [IngestRepository.notifyChannel])
        iterator = listener.events.makeAsyncIterator()
        guard await iterator.next() == .listening else { throw FixtureFailure.notListening }
    }

    /// The next NOTIFY (nil when the listener reported anything else first).
    func nextNotification() async -> PostgresNotification? {
        guard case .notification(let note) = await iterator.next() else { return nil }
        return note
    }

    /// Stops listening and counts the notifications that had arrived.
    func stopAndCountTheRest() async -> Int {
        listener.stop()
        var count = 0
        while let event = await iterator.next() {
            if case .notification = event { count += 1 }
        }
        return count
    }

    func stop() { listener.stop() }
}
