import Testing

@testable import Postgres

/// The pool's state machine, driven without I/O (connections are plain numbers).
struct PoolStateTests {
    typealias State = PoolState<Int>

    static func summary(_ actions: [State.Action]) -> [String] {
        actions.map {
            switch $0 {
            case .lend(let connection, let waiter): "lend \(connection) to \(waiter)"
            case .connect: "connect"
            case .fail(let waiters, _): "fail \(waiters)"
            case .close(let connections): "close \(connections)"
            case .cancelled(let waiter): "cancelled \(waiter)"
            }
        }
    }

    @Test func opensLazilyUpToCapacityThenQueues() {
        var state = State(capacity: 2)
        #expect(Self.summary(state.checkout(waiter: 1)) == ["connect"])
        #expect(Self.summary(state.checkout(waiter: 2)) == ["connect"])
        #expect(Self.summary(state.checkout(waiter: 3)) == [])
        #expect(state.open == 2)
        #expect(Self.summary(state.connected(10)) == ["lend 10 to 1"])
        #expect(Self.summary(state.connected(11)) == ["lend 11 to 2"])
        #expect(Self.summary(state.checkin(10, alive: true)) == ["lend 10 to 3"])
        #expect(Self.summary(state.checkin(11, alive: true)) == [])
        #expect(Self.summary(state.checkout(waiter: 4)) == ["lend 11 to 4"])
        #expect(state.open == 2)
    }

    @Test func aDeadConnectionIsReplacedForTheNextWaiter() {
        var state = State(capacity: 1)
        _ = state.checkout(waiter: 1)
        _ = state.connected(10)
        _ = state.checkout(waiter: 2)
        #expect(Self.summary(state.checkin(10, alive: false)) == ["close [10]", "connect"])
        #expect(Self.summary(state.connected(11)) == ["lend 11 to 2"])
        #expect(state.open == 1)
    }

    @Test func connectFailuresFailOneWaiterEachAndNeverStrandTheRest() {
        var state = State(capacity: 2)
        for waiter in 1...4 { _ = state.checkout(waiter: waiter) }
        #expect(state.connecting == 2)
        let error = PostgresError(kind: .connectionFailed, message: "down")
        #expect(Self.summary(state.connectFailed(error)) == ["fail [1]", "connect"])
        #expect(Self.summary(state.connectFailed(error)) == ["fail [2]", "connect"])
        #expect(Self.summary(state.connectFailed(error)) == ["fail [3]"])  // one attempt still runs for waiter 4
        #expect(Self.summary(state.connectFailed(error)) == ["fail [4]"])
        #expect(state.open == 0)
        #expect(state.waiters.isEmpty)
    }

    @Test func aWaiterPastItsDeadlineFailsAndOnlyIt() {
        var state = State(capacity: 1)
        let start = ContinuousClock.now
        _ = state.checkout(waiter: 1, at: start)
        _ = state.connected(10)
        _ = state.checkout(waiter: 2, at: start)
        _ = state.checkout(waiter: 3, at: start + .seconds(1))
        #expect(state.oldestWait(now: start + .seconds(2)) == .seconds(2))
        let expired = state.expire(waiter: 2, after: .seconds(5))
        #expect(Self.summary(expired) == ["fail [2]"])
        if case .fail(_, let error) = expired.first {
            #expect(error.kind == .checkoutTimeout)
            #expect(error.isRetryable)
        }
        #expect(state.oldestWait(now: start + .seconds(2)) == .seconds(1))
        #expect(Self.summary(state.expire(waiter: 2, after: .seconds(5))) == [])  // once
        #expect(Self.summary(state.checkin(10, alive: true)) == ["lend 10 to 3"])
        #expect(Self.summary(state.expire(waiter: 3, after: .seconds(5))) == [])  // served before its deadline
        #expect(state.oldestWait() == .zero)
    }

    @Test func failedConnectsMarkTheServerUnreachableUntilOneOpens() {
        var state = State(capacity: 1)
        _ = state.checkout(waiter: 1)
        _ = state.connectFailed(PostgresError(kind: .connectionFailed, message: "down"))
        #expect(state.unreachable)
        _ = state.checkout(waiter: 2)
        _ = state.connected(10)
        #expect(!state.unreachable)
    }

    @Test func cancelAndClose() {
        var state = State(capacity: 1)
        _ = state.checkout(waiter: 1)
        _ = state.connected(10)
        _ = state.checkout(waiter: 2)
        _ = state.checkout(waiter: 3)
        #expect(Self.summary(state.cancel(waiter: 2)) == ["cancelled 2"])
        #expect(Self.summary(state.cancel(waiter: 2)) == [])
        #expect(Self.summary(state.close()) == ["fail [3]", "close []"])
        #expect(Self.summary(state.checkin(10, alive: true)) == ["close [10]"])
        #expect(Self.summary(state.checkout(waiter: 4)) == ["fail [4]"])
        #expect(state.open == 0)
    }
}
