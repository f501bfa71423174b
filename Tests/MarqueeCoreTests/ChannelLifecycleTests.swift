import Foundation
import Testing

@testable import MarqueeCore

@Suite struct ChannelLifecycleTests {
    @Test func rawStatesAreStable() {
        #expect(ChannelLifecycle.State.allCases.map(\.rawValue) == [
            "planned", "creating", "create_unknown", "create_failed", "open", "ending", "ended", "deleting", "deleted", "lost",
        ])
    }

    @Test func quotaCountsStatesThatMayHoldAChannel() {
        #expect(ChannelLifecycle.State.allCases.filter(\.countsAgainstQuota).map(\.rawValue)
                == ["creating", "create_unknown", "open", "ending", "ended", "deleting"])
    }

    @Test func happyPath() throws {
        var channel = ChannelLifecycle()
        #expect(channel.state == .planned)
        #expect(try channel.leadTimeReached() == .createChannel(attempt: 1))
        #expect(channel.state == .creating)
        #expect(try channel.firstUpdate() == .nothing)
        #expect(try channel.createSucceeded() == .nothing)
        #expect(channel.state == .open && channel.isOpen)
        #expect(try channel.endRequested() == .sendEndBroadcast)
        #expect(channel.state == .ending)
        #expect(try channel.endSent() == .nothing)
        #expect(channel.state == .ended)
        #expect(try channel.deleteDelayElapsed() == .deleteChannel(attempt: 1))
        #expect(channel.state == .deleting)
        #expect(try channel.deleteSucceeded() == .nothing)
        #expect(channel.state == .deleted)
    }

    @Test func firstUpdateOpensAChannelEarly() throws {
        var channel = ChannelLifecycle()
        #expect(try channel.firstUpdate() == .createChannel(attempt: 1))
        #expect(try channel.leadTimeReached() == .nothing)
    }

    @Test func retryableCreateFailuresBackOffAndCountAttempts() throws {
        var channel = ChannelLifecycle()
        _ = try channel.leadTimeReached()
        #expect(try channel.createFailedRetryable() == .scheduleRetry(.create, failedAttempts: 1))
        #expect(channel.retryDue() == .createChannel(attempt: 2))
        #expect(try channel.createFailedRetryable() == .scheduleRetry(.create, failedAttempts: 2))
        #expect(channel.retryDue() == .createChannel(attempt: 3))
        #expect(try channel.createSucceeded() == .nothing)
        #expect(channel.attempt == 0)
        // A timer that fires after the state moved on does nothing.
        #expect(channel.retryDue() == .nothing)
        #expect(channel.state == .open)
    }

    @Test func permanentCreateFailureWaitsForTheOperator() throws {
        var channel = ChannelLifecycle()
        _ = try channel.leadTimeReached()
        #expect(try channel.createFailedPermanently() == .flagCreateFailed)
        #expect(channel.state == .createFailed)
        #expect(try channel.leadTimeReached() == .nothing)
        #expect(try channel.retryCreateRequested() == .createChannel(attempt: 1))
        #expect(channel.state == .creating)
    }

    @Test func timedOutCreateIsReconciled() throws {
        var found = ChannelLifecycle()
        _ = try found.leadTimeReached()
        #expect(try found.createTimedOut() == .reconcile)
        #expect(found.state == .createUnknown)
        #expect(throws: ChannelLifecycleError(state: .createUnknown, event: .endRequested)) { try found.endRequested() }
        #expect(try found.reconcileFound() == .nothing)
        #expect(found.state == .open)

        var missing = ChannelLifecycle()
        _ = try missing.leadTimeReached()
        _ = try missing.createTimedOut()
        #expect(try missing.reconcileNotFound() == .createChannel(attempt: 2))
        #expect(missing.state == .creating)
    }

    @Test func channelNotRegisteredFlagsLost() throws {
        var channel = ChannelLifecycle(state: .open)
        #expect(try channel.channelNotRegistered() == .flagLost)
        #expect(channel.state == .lost)
        #expect(try channel.channelNotRegistered() == .nothing)
        #expect(try channel.endRequested() == .nothing)
        #expect(channel.state == .lost)
        // An operator may open a new channel for activities started from now on.
        #expect(try channel.retryCreateRequested() == .createChannel(attempt: 1))

        var missing = ChannelLifecycle(state: .ending)
        #expect(try missing.reconcileNotFound() == .flagLost)
    }

    @Test func afterTheEndAMissingChannelCountsAsDeleted() throws {
        var ended = ChannelLifecycle(state: .ended)
        #expect(try ended.channelNotRegistered() == .nothing)
        #expect(ended.state == .deleted)
        var deleting = ChannelLifecycle(state: .deleting, attempt: 2)
        #expect(try deleting.reconcileNotFound() == .nothing)
        #expect(deleting.state == .deleted)
    }

    @Test func deleteFailuresRetry() throws {
        var channel = ChannelLifecycle(state: .ended)
        _ = try channel.deleteDelayElapsed()
        #expect(try channel.deleteFailed() == .scheduleRetry(.delete, failedAttempts: 1))
        #expect(channel.retryDue() == .deleteChannel(attempt: 2))
        #expect(try channel.deleteSucceeded() == .nothing)
        #expect(try channel.deleteSucceeded() == .nothing)
    }

    @Test func endBeforeAnyChannelNeedsNoAPNs() throws {
        var channel = ChannelLifecycle()
        #expect(try channel.endRequested() == .nothing)
        #expect(channel.state == .deleted)
        var creating = ChannelLifecycle(state: .creating, attempt: 1)
        #expect(throws: ChannelLifecycleError(state: .creating, event: .endRequested)) { try creating.endRequested() }
        #expect(creating == ChannelLifecycle(state: .creating, attempt: 1))
    }

    @Test func aDeletedChannelThatReappearsIsDeletedAgain() throws {
        var channel = ChannelLifecycle(state: .deleted)
        #expect(try channel.reconcileFound() == .deleteChannel(attempt: 1))
        #expect(channel.state == .deleting)
    }

    @Test(arguments: [
        (ChannelLifecycle.State.planned, ChannelLifecycle.Event.createSucceeded),
        (.open, .createSucceeded),
        (.deleted, .leadTimeReached),
        (.ended, .firstUpdate),
        (.planned, .endSent),
        (.open, .deleteDelayElapsed),
        (.open, .deleteFailed),
        (.planned, .channelNotRegistered),
        (.creating, .reconcileFound),
        (.open, .retryCreateRequested),
    ])
    func invalidTransitionsThrowAndChangeNothing(state: ChannelLifecycle.State, event: ChannelLifecycle.Event) {
        var channel = ChannelLifecycle(state: state, attempt: 3)
        #expect(throws: ChannelLifecycleError(state: state, event: event)) { try channel.handle(event) }
        #expect(channel == ChannelLifecycle(state: state, attempt: 3))
    }

    /// Every event in every state either throws and leaves the value alone, or moves to a state; nothing traps.
    @Test func everyStateAndEventIsHandled() {
        var refused = 0
        for state in ChannelLifecycle.State.allCases {
            for event in ChannelLifecycle.Event.allCases {
                var channel = ChannelLifecycle(state: state, attempt: 1)
                do {
                    _ = try channel.handle(event)
                    #expect(channel.attempt >= 0)
                } catch {
                    refused += 1
                    #expect(channel == ChannelLifecycle(state: state, attempt: 1))
                    #expect(error.description.contains(event.rawValue) && error.description.contains(state.rawValue))
                }
            }
        }
        #expect(refused > 20 && refused < 120)
    }

    @Test func anOperatorDeleteNeedsForceWhileTheChannelCarriesUpdates() throws {
        var ended = ChannelLifecycle(state: .ended)
        #expect(try ended.deleteRequested(force: false) == .deleteChannel(attempt: 1))
        #expect(ended == ChannelLifecycle(state: .deleting, attempt: 1))
        var open = ChannelLifecycle(state: .open)
        #expect(throws: ChannelLifecycleError(state: .open, event: .deleteRequested)) { try open.deleteRequested(force: false) }
        #expect(open.state == .open)
        #expect(try open.deleteRequested(force: true) == .deleteChannel(attempt: 1))
        var lost = ChannelLifecycle(state: .lost)
        #expect(try lost.deleteRequested(force: false) == .nothing)
        #expect(lost.state == .deleted)
        var creating = ChannelLifecycle(state: .creating, attempt: 2)
        #expect(throws: ChannelLifecycleError(state: .creating, event: .deleteRequested)) { try creating.deleteRequested(force: true) }
    }

    @Test func persistsWithRawState() throws {
        let channel = ChannelLifecycle(state: .createUnknown, attempt: 2)
        let json = try JSONValue(parsing: JSONEncoder().encode(channel))
        #expect(json["state"] == "create_unknown" && json["attempt"] == 2)
        #expect(try JSONDecoder().decode(ChannelLifecycle.self, from: json.jsonData) == channel)
    }
}
