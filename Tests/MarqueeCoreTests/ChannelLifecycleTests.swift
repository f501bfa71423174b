import Foundation
import Testing

@testable import MarqueeCore

@Suite struct ChannelLifecycleTests {
    @Test func rawStatesAreStable() {
        #expect(
            ChannelLifecycle.State.allCases.map(\.rawValue) == [
                "planned", "creating", "create_unknown", "create_failed", "open", "ending", "ended", "deleting", "deleted", "lost",
            ])
    }

    @Test func quotaCountsStatesThatMayHoldAChannel() {
        #expect(
            ChannelLifecycle.State.allCases.filter(\.countsAgainstQuota).map(\.rawValue)
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

    /// The whole machine, written out: for each event, the state and attempt it leaves and the action it returns
    /// in each state, starting at attempt 2 (`-`: refused). Columns: planned, creating, create_unknown,
    /// create_failed, open, ending, ended, deleting, deleted, lost. `deleteRequested` is without force here.
    static let table: [ChannelLifecycle.Event: [String]] = [
        .leadTimeReached: [
            "creating/1 createChannel(attempt: 1)", "creating/2 nothing", "create_unknown/2 nothing", "create_failed/2 nothing", "open/2 nothing",
            "-", "-", "-", "-", "-",
        ],
        .firstUpdate: [
            "creating/1 createChannel(attempt: 1)", "creating/2 nothing", "create_unknown/2 nothing", "create_failed/2 nothing", "open/2 nothing",
            "-", "-", "-", "-", "-",
        ],
        .createSucceeded: ["-", "open/0 nothing", "-", "-", "-", "-", "-", "-", "-", "-"],
        .createFailedRetryable: ["-", "creating/2 scheduleRetry(create, failedAttempts: 2)", "-", "-", "-", "-", "-", "-", "-", "-"],
        .createFailedPermanently: ["-", "create_failed/0 flagCreateFailed", "-", "-", "-", "-", "-", "-", "-", "-"],
        .createTimedOut: ["-", "create_unknown/2 reconcile", "-", "-", "-", "-", "-", "-", "-", "-"],
        .retryDue: [
            "planned/2 nothing", "creating/3 createChannel(attempt: 3)", "create_unknown/2 nothing", "create_failed/2 nothing", "open/2 nothing",
            "ending/2 nothing", "ended/2 nothing", "deleting/3 deleteChannel(attempt: 3)", "deleted/2 nothing", "lost/2 nothing",
        ],
        .retryCreateRequested: [
            "-", "-", "-", "creating/1 createChannel(attempt: 1)", "-", "-", "-", "-", "-", "creating/1 createChannel(attempt: 1)",
        ],
        .endRequested: [
            "deleted/0 nothing", "-", "-", "deleted/0 nothing", "ending/0 sendEndBroadcast", "ending/2 nothing", "ended/2 nothing",
            "deleting/2 nothing", "deleted/2 nothing", "lost/2 nothing",
        ],
        .endSent: ["-", "-", "-", "-", "-", "ended/0 nothing", "ended/2 nothing", "-", "-", "-"],
        .deleteDelayElapsed: ["-", "-", "-", "-", "-", "-", "deleting/1 deleteChannel(attempt: 1)", "deleting/2 nothing", "deleted/2 nothing", "-"],
        .deleteRequested: [
            "deleted/0 nothing", "-", "-", "deleted/0 nothing", "-", "-", "deleting/1 deleteChannel(attempt: 1)", "deleting/2 nothing",
            "deleted/2 nothing", "deleted/0 nothing",
        ],
        .deleteSucceeded: ["-", "-", "-", "-", "-", "-", "-", "deleted/0 nothing", "deleted/2 nothing", "-"],
        .deleteFailed: ["-", "-", "-", "-", "-", "-", "-", "deleting/2 scheduleRetry(delete, failedAttempts: 2)", "-", "-"],
        .channelNotRegistered: [
            "-", "-", "-", "-", "lost/0 flagLost", "lost/0 flagLost", "deleted/0 nothing", "deleted/0 nothing", "deleted/2 nothing", "lost/2 nothing",
        ],
        .reconcileFound: [
            "-", "-", "open/0 nothing", "-", "open/2 nothing", "ending/2 nothing", "ended/2 nothing", "deleting/2 nothing",
            "deleting/1 deleteChannel(attempt: 1)", "open/0 nothing",
        ],
        .reconcileNotFound: [
            "-", "-", "creating/3 createChannel(attempt: 3)", "-", "lost/0 flagLost", "lost/0 flagLost", "deleted/0 nothing", "deleted/0 nothing",
            "deleted/2 nothing", "lost/2 nothing",
        ],
    ]

    @Test func everyStateAndEventDoesWhatTheTableSays() {
        #expect(Set(Self.table.keys) == Set(ChannelLifecycle.Event.allCases))
        for (event, row) in Self.table {
            #expect(row.count == ChannelLifecycle.State.allCases.count)
            for (state, expected) in zip(ChannelLifecycle.State.allCases, row) {
                var channel = ChannelLifecycle(state: state, attempt: 2)
                do {
                    let action = try channel.handle(event)
                    let rendered = "\(channel.state.rawValue)/\(channel.attempt) \(action)"
                        .replacingOccurrences(of: "MarqueeCore.ChannelLifecycle.Operation.", with: "")
                    #expect(rendered == expected, "\(event) in \(state)")
                } catch {
                    #expect(expected == "-", "\(event) in \(state) was refused")
                    #expect(channel == ChannelLifecycle(state: state, attempt: 2))
                    #expect(error.description.contains(event.rawValue) && error.description.contains(state.rawValue))
                }
            }
        }
    }

    @Test func theNamedSetsAreTheStatesTheirNamesSay() {
        #expect(ChannelLifecycle.quotaStates == [.creating, .createUnknown, .open, .ending, .ended, .deleting])
        #expect(ChannelLifecycle.broadcastingStates == [.open, .ending])
        #expect(ChannelLifecycle.endCarryingStates == [.planned, .creating, .createUnknown, .open, .ending])
        // The current channel is the one an end still applies to: every state where endRequested is not a no-op
        // on a finished channel.
        for state in ChannelLifecycle.currentStates { #expect(![.ended, .deleting, .deleted, .lost].contains(state)) }
        #expect(Set(ChannelLifecycle.currentStates).union([.ended, .deleting, .deleted, .lost]) == Set(ChannelLifecycle.State.allCases))
        // Only states whose channel has an id at APNs are expected in Apple's list.
        #expect(ChannelLifecycle.listedStates.allSatisfy { $0.countsAgainstQuota })
        #expect(StoredChannelState.quotaStates == ChannelLifecycle.quotaStates.map(StoredChannelState.lifecycle) + [.unknown])
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

    /// What a move does to the event's broadcasts: into `lost` stops them, into `open` resumes them, nothing else does.
    @Test func onlyAMoveIntoLostOrOpenChangesTheBroadcasts() {
        for old in ChannelLifecycle.State.allCases {
            for new in ChannelLifecycle.State.allCases {
                let expected: ChannelLifecycle.BroadcastChange? = old == new ? nil : new == .lost ? .stop : new == .open ? .resume : nil
                #expect(ChannelLifecycle.broadcasts(from: old, to: new) == expected, "\(old) → \(new)")
            }
        }
    }
}
