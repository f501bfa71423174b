import Foundation
import Network
import Synchronization
import Testing

/// An actor whose code runs on an event loop's thread.
private actor LoopBoundCounter {
    let loop: EventLoop
    var count = 0
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    init(loop: EventLoop) { self.loop = loop }

    func increment() -> Bool {
        count += 1
        return loop.inEventLoop
    }
}

@Suite struct EventLoopTests {
    @Test func executeRunsOnTheLoopThreadInOrder() async throws {
        let loop = EventLoop(name: "test-execute")
        defer { loop.shutdown() }
        let seen = Mutex<[Int]>([])
        for index in 0..<100 {
            loop.execute {
                precondition(loop.inEventLoop)
                seen.withLock { $0.append(index) }
            }
        }
        let onLoop = try await loop.submit { loop.inEventLoop }
        #expect(onLoop)
        #expect(!loop.inEventLoop)
        #expect(seen.withLock { $0 } == Array(0..<100))
    }

    @Test func submitPropagatesErrors() async {
        struct Boom: Error {}
        let loop = EventLoop(name: "test-submit")
        defer { loop.shutdown() }
        await #expect(throws: Boom.self) {
            try await loop.submit { throw Boom() }
        }
    }

    @Test func actorsBoundToTheLoopRunOnItsThread() async {
        let loop = EventLoop(name: "test-actor")
        defer { loop.shutdown() }
        let counter = LoopBoundCounter(loop: loop)
        var allOnLoop = true
        for _ in 0..<50 { allOnLoop = await counter.increment() && allOnLoop }
        #expect(allOnLoop)
        #expect(await counter.count == 50)
    }

    @Test func timersFireInDeadlineOrderAndCancelledOnesDoNot() async throws {
        let loop = EventLoop(name: "test-timer")
        defer { loop.shutdown() }
        let fired = Mutex<[String]>([])
        let done = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[String], Error>) in
            loop.execute {
                loop.schedule(after: .milliseconds(30)) { fired.withLock { $0.append("late") } }
                let cancelled = loop.schedule(after: .milliseconds(10)) { fired.withLock { $0.append("cancelled") } }
                loop.schedule(after: .milliseconds(5)) { fired.withLock { $0.append("early") } }
                cancelled.cancel()
                loop.schedule(after: .milliseconds(60)) { continuation.resume(returning: fired.withLock { $0 }) }
            }
        }
        #expect(done == ["early", "late"])
    }

    @Test func groupHandsOutLoopsInTurn() {
        let group = EventLoopGroup(loopCount: 3, name: "test-group")
        defer { group.shutdown() }
        let picked = (0..<6).map { _ in ObjectIdentifier(group.next()) }
        #expect(picked[0] != picked[1] && picked[1] != picked[2] && picked[0] == picked[3])
    }
}

@Suite struct EventLoopShutdownTests {
    /// A shutdown that races the loop thread's start must still stop it (and not hang).
    @Test func shutdownRightAfterStartStopsTheLoop() {
        for index in 0..<50 {
            EventLoop(name: "test-shutdown-\(index)").shutdown()
        }
    }

    @Test func shutdownRunsWorkQueuedBeforeIt() {
        let loop = EventLoop(name: "test-shutdown-drain")
        let ran = Mutex(0)
        for _ in 0..<10 { loop.execute { ran.withLock { $0 += 1 } } }
        loop.shutdown()
        #expect(ran.withLock { $0 } == 10)
    }
}
