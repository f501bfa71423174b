// A thread of its own for one connection's blocking libpq calls. Swift's cooperative pool has one
// thread per core (two here); a libpq call waiting on the network would stall every task, so jobs
// run here in submission order and the caller is resumed through a continuation.
import Foundation

/// A serial job queue drained by one dedicated thread.
final class ConnectionThread: @unchecked Sendable {
    private let condition = NSCondition()  // guards `jobs` and `stopping`
    private var jobs: [@Sendable () -> Void] = []
    private var stopping = false

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Queues a job; jobs run one at a time, in order.
    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` on the thread and returns its result to the awaiting task.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Lets the thread exit once the jobs queued so far have run.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            let done = batch.isEmpty && stopping
            condition.unlock()
            if done { return }
            for job in batch { job() }
        }
    }
}
