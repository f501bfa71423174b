// An event loop is one libevent `event_base` driven by one thread of its own. libevent, nghttp2 and
// OpenSSL objects that belong to a loop are touched only on that thread. Other threads hand work to the
// loop through a queue and `event_active`, and async Swift code runs on the loop through the loop's
// serial executor: an actor whose `unownedExecutor` is the loop's runs on the loop thread, so it may touch
// the loop's C objects directly.
internal import CLibEvent
import Foundation
import Synchronization

/// One libevent loop running on a dedicated thread; also a serial executor for actors bound to it.
public final class EventLoop: SerialExecutor, @unchecked Sendable {
    /// The loop's `event_base`; use only on the loop thread.
    let base: OpaquePointer
    private let wakeup: OpaquePointer
    private let pending = Mutex<Pending>(Pending())
    private let threadID = Mutex<pthread_t?>(nil)
    private let stopped = DispatchSemaphore(value: 0)
    public let name: String

    private struct Pending {
        var jobs: [UnownedJob] = []
        var closures: [@Sendable () -> Void] = []
        var shuttingDown = false
    }

    private static let threadingConfigured: Bool = {
        evthread_use_pthreads() == 0
    }()

    /// Creates the loop and starts its thread.
    public init(name: String = "marquee-loop") {
        precondition(EventLoop.threadingConfigured, "evthread_use_pthreads failed")
        self.name = name
        guard let base = event_base_new() else { fatalError("event_base_new failed: out of memory") }
        self.base = base
        // The wake-up event is created before `self` is complete, so it points at a box filled in below.
        let box = WakeupBox()
        guard
            let wakeup = event_new(
                base, -1, Int16(EV_PERSIST),
                { _, _, context in
                    Unmanaged<WakeupBox>.fromOpaque(context!).takeUnretainedValue().loop?.drain()
                }, Unmanaged.passUnretained(box).toOpaque())
        else { fatalError("event_new failed: out of memory") }
        self.wakeup = wakeup
        self.wakeupBox = box
        box.loop = self
        // A persistent event with no fd and no timeout is never triggered except by event_active;
        // adding it keeps the loop running when nothing else is registered.
        event_add(wakeup, nil)
        // Named from inside: on Linux a name set before start() does not reach the kernel (top -H, /proc).
        Thread.detachNewThread { [self] in
            Thread.current.name = name
            self.run()
        }
    }

    private let wakeupBox: WakeupBox
    private final class WakeupBox: @unchecked Sendable { weak var loop: EventLoop? }

    deinit {
        event_free(wakeup)
        event_base_free(base)
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        _ = event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY)
        drain()
        stopped.signal()
    }

    /// True when called on this loop's thread.
    public var inEventLoop: Bool {
        guard let id = threadID.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    /// Runs `body` on the loop thread, soon; callable from any thread.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        let accepted = pending.withLock { pending -> Bool in
            guard !pending.shuttingDown else { return false }
            pending.closures.append(body)
            return true
        }
        if accepted { event_active(wakeup, EV_READ, 0) }
    }

    /// Runs `body` on the loop thread and returns its result to the awaiting caller.
    public func submit<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            execute { continuation.resume(with: Swift.Result { try body() }) }
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        pending.withLock { $0.jobs.append(job) }
        event_active(wakeup, EV_READ, 0)
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func checkIsolated() {
        precondition(inEventLoop, "expected to run on event loop \(name)")
    }

    private func drain() {
        while true {
            let batch = pending.withLock { pending -> Pending in
                let batch = pending
                pending.jobs.removeAll(keepingCapacity: true)
                pending.closures.removeAll(keepingCapacity: true)
                return batch
            }
            if batch.jobs.isEmpty && batch.closures.isEmpty { return }
            for closure in batch.closures { closure() }
            for job in batch.jobs { job.runSynchronously(on: asUnownedSerialExecutor()) }
        }
    }

    /// Runs `body` on the loop thread after `delay`, unless the returned timer is cancelled first.
    /// Call on the loop thread.
    @discardableResult
    public func schedule(after delay: Duration, _ body: @escaping () -> Void) -> LoopTimer {
        checkIsolated()
        let timer = LoopTimer(base: base, body: body)
        timer.arm(after: delay)
        return timer
    }

    /// Stops the loop after the work already queued, and waits for its thread to finish.
    /// Must not be called on the loop thread.
    public func shutdown() {
        precondition(!inEventLoop, "EventLoop.shutdown() called on its own thread")
        // The break is queued rather than called here: event_base_loop clears a break requested
        // before it started, and the loop thread may not have started yet.
        let first = pending.withLock { pending -> Bool in
            guard !pending.shuttingDown else { return false }
            pending.shuttingDown = true
            pending.closures.append { [self] in _ = event_base_loopbreak(self.base) }
            return true
        }
        guard first else { return }
        event_active(wakeup, EV_READ, 0)
        stopped.wait()
    }
}

/// A one-shot timer on an event loop; touch it only on that loop's thread.
public final class LoopTimer {
    private let base: OpaquePointer
    private var event: OpaquePointer?
    private var body: (() -> Void)?

    init(base: OpaquePointer, body: @escaping () -> Void) {
        self.base = base
        self.body = body
    }

    fileprivate func arm(after delay: Duration) {
        let (seconds, attoseconds) = delay.components
        var interval = timeval(tv_sec: Int(max(0, seconds)), tv_usec: Int(max(0, attoseconds) / 1_000_000_000_000))
        // The pending event holds one reference to the timer until it fires or is cancelled.
        let context = Unmanaged.passRetained(self).toOpaque()
        guard
            let event = event_new(
                base, -1, 0,
                { _, _, context in
                    Unmanaged<LoopTimer>.fromOpaque(context!).takeRetainedValue().fire()
                }, context)
        else { fatalError("event_new failed: out of memory") }
        self.event = event
        event_add(event, &interval)
    }

    private func fire() {
        let body = self.body
        self.body = nil
        body?()
    }

    /// Cancels the timer if it has not fired yet.
    public func cancel() {
        guard body != nil, let event else { return }
        body = nil
        if event_pending(event, Int16(EV_TIMEOUT), nil) != 0 {
            event_del(event)
            Unmanaged.passUnretained(self).release()
        }
    }

    deinit {
        if let event { event_free(event) }
    }
}

/// A fixed set of event loops, handed out in turn.
public final class EventLoopGroup: Sendable {
    public let loops: [EventLoop]
    private let nextIndex = Atomic<Int>(0)

    /// Starts `count` loops (default: one per core).
    public init(loopCount count: Int = ProcessInfo.processInfo.activeProcessorCount, name: String = "marquee-loop") {
        loops = (0..<max(1, count)).map { EventLoop(name: "\(name)-\($0)") }
    }

    /// The next loop, round robin.
    public func next() -> EventLoop {
        loops[nextIndex.add(1, ordering: .relaxed).oldValue % loops.count]
    }

    /// Stops every loop.
    public func shutdown() {
        for loop in loops { loop.shutdown() }
    }
}
