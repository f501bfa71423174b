// A thread of its own for one connection's blocking libpq calls. Swift's cooperative pool has one
// thread per core (two here); a libpq call waiting on the network would stall every task, so jobs
// run here in submission order and the caller is resumed through a continuation.
// An idle thread sleeps at once. It used to yield the CPU up to 200 times first, hoping to catch the
// next job without a futex wake-up; a task on the connection's executor never needs that (its next
// statement is queued by the job that resumes it), and on a busy 2-core machine twenty connection
// threads yielding made 80,000 context switches a second (4 times more than without) and slowed
// everything else (Scripts/bench service: 202 p50 25 ms with it, 12 ms without; Scripts/bench pg's
// insert rate unchanged).
import Foundation

/// A serial job queue drained by one dedicated thread; also a task executor, so a task can run on
/// the thread that serves its connection (no thread hop per statement).
final class ConnectionThread: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()  // guards `jobs`, `stopping` and `sleeping`
    private var jobs: [@Sendable () -> Void] = []
    private var stopping = false
    private var sleeping = false
    private var exited = false

    init(name: String) {
        // Named from inside: on Linux a name set before start() does not reach the kernel (top -H, /proc).
        Thread.detachNewThread { [self] in
            Thread.current.name = name
            run()
        }
    }

    /// Queues a job; jobs run one at a time, in order.
    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if exited {
            // Too late for this thread (e.g. a task kept the executor of a closed connection):
            // run it on a thread of its own rather than never.
            condition.unlock()
            Thread.detachNewThread(job)
            return
        }
        jobs.append(job)
        if sleeping { condition.signal() }
        condition.unlock()
    }

    /// Runs `body` on the thread and returns its result to the awaiting task.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        // Unsafe (unchecked) continuation: the job resumes it exactly once, and it saves an allocation.
        try await withUnsafeThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        submit { [unowned self] in job.runSynchronously(on: asUnownedTaskExecutor()) }
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
            while jobs.isEmpty && !stopping {
                sleeping = true
                condition.wait()
                sleeping = false
            }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            let done = batch.isEmpty && stopping
            if done { exited = true }
            condition.unlock()
            if done { return }
            for job in batch { job() }
        }
    }
}
