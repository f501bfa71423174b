import Testing

@testable import Network

/// A request with a name, for the state machine.
private struct Named: HTTP2ClientDeadlined, Equatable {
    var name: String
    var deadline: ContinuousClock.Instant
}

@Suite struct HTTP2ClientStreamStateTests {
    private let now = ContinuousClock.now

    private func request(_ name: String, in seconds: Int = 10) -> Named {
        Named(name: name, deadline: now + .seconds(seconds))
    }

    /// Starts everything startable, numbering streams 1, 3, 5, ... after `firstID`.
    private func startAll(_ state: inout HTTP2ClientStreamState<Named>, from firstID: inout Int32) -> [String] {
        var started: [String] = []
        while let next = state.nextToStart() {
            state.started(next, id: firstID)
            firstID += 2
            started.append(next.name)
        }
        return started
    }

    @Test func nothingStartsBeforeTheConnectionIsReadyAndThenOneAtATime() {
        var state = HTTP2ClientStreamState<Named>()
        var id: Int32 = 1
        for name in ["a", "b", "c"] {
            let refused = state.enqueue(request(name))
            #expect(refused == nil)
        }
        #expect(startAll(&state, from: &id).isEmpty)
        state.connected()
        // Before the peer's SETTINGS the limit is 1.
        #expect(startAll(&state, from: &id) == ["a"])
        #expect(state.queuedCount == 2)
        let closed = state.streamClosed(id: 1)
        #expect(closed?.name == "a")
        #expect(startAll(&state, from: &id) == ["b"])
    }

    @Test func theLimitFollowsSettingsUpAndDown() {
        var state = HTTP2ClientStreamState<Named>()
        var id: Int32 = 1
        state.connected()
        for index in 0..<10 { _ = state.enqueue(request("r\(index)")) }
        let raised = state.settingsReceived(maxConcurrentStreams: 4)
        #expect(raised)
        #expect(startAll(&state, from: &id).count == 4)
        // Falling back to 1: nothing new starts until no stream is in flight.
        let lowered = state.settingsReceived(maxConcurrentStreams: 1)
        let repeated = state.settingsReceived(maxConcurrentStreams: 1)
        #expect(lowered)
        #expect(!repeated)
        _ = state.streamClosed(id: 1)
        _ = state.streamClosed(id: 3)
        #expect(startAll(&state, from: &id).isEmpty)
        _ = state.streamClosed(id: 5)
        _ = state.streamClosed(id: 7)
        #expect(startAll(&state, from: &id) == ["r4"])
        #expect(state.activeCount == 1)
    }

    @Test func goAwayFailsStreamsAboveTheLastIDAndTheQueueButKeepsTheRest() {
        var state = HTTP2ClientStreamState<Named>()
        var id: Int32 = 1
        state.connected()
        _ = state.settingsReceived(maxConcurrentStreams: 3)
        for name in ["a", "b", "c", "d", "e"] { _ = state.enqueue(request(name)) }
        #expect(startAll(&state, from: &id) == ["a", "b", "c"])  // streams 1, 3, 5
        let failed = state.goAwayReceived(lastStreamID: 3, errorCode: 0, debugData: "bye")
        #expect(Set(failed.requests.map(\.name)) == ["c", "d", "e"])
        #expect(failed.error == .goAway(errorCode: 0, debugData: "bye"))
        #expect(failed.error.isRetryable)
        #expect(state.activeCount == 2)
        // Nothing new starts or is accepted.
        #expect(startAll(&state, from: &id).isEmpty)
        let refused = state.enqueue(request("f"))
        #expect(refused?.error == .requestNotSent("the connection received GOAWAY"))
        _ = state.streamClosed(id: 1)
        #expect(!state.isDrained)
        _ = state.streamClosed(id: 3)
        #expect(state.isDrained)
    }

    @Test func closingSeparatesRequestsInFlightFromRequestsThatNeverStarted() {
        var state = HTTP2ClientStreamState<Named>()
        var id: Int32 = 1
        state.connected()
        for name in ["a", "b"] { _ = state.enqueue(request(name)) }
        _ = startAll(&state, from: &id)
        let failed = state.closed(error: .connectionClosed, queuedError: .requestNotSent("closed"))
        #expect(failed.map { $0.requests.map(\.name) } == [["a"], ["b"]])
        #expect(failed.map(\.error) == [.connectionClosed, .requestNotSent("closed")])
        let refused = state.enqueue(request("c"))
        #expect(refused != nil)
    }

    @Test func expiryRemovesQueuedAndActiveRequestsPastTheirDeadline() {
        var state = HTTP2ClientStreamState<Named>()
        var id: Int32 = 1
        state.connected()
        _ = state.enqueue(request("early-active", in: 1))
        _ = state.enqueue(request("late-queued", in: 30))
        _ = state.enqueue(request("early-queued", in: 2))
        _ = startAll(&state, from: &id)
        let expired = state.expire(now: now + .seconds(5))
        #expect(expired.streams.map(\.request.name) == ["early-active"])
        #expect(expired.streams.map(\.id) == [1])
        #expect(expired.queued.map(\.name) == ["early-queued"])
        #expect(expired.nextDeadline == now + .seconds(30))
        #expect(startAll(&state, from: &id) == ["late-queued"])
    }
}
