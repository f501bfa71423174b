import Testing

@testable import MarqueeCore

@Suite struct EventLifecycleTests {
    /// The whole machine, written out: for each event, the status it leaves in each status and the action beyond
    /// that status, if any (`-`: refused). Columns: scheduled, live, ending, ended, cancelled.
    static let table: [EventLifecycle.Event: [String]] = [
        .startsAtReached: ["live", "-", "-", "-", "-"],
        .updateAccepted: ["scheduled", "live", "-", "-", "-"],
        .endAccepted: ["ending", "ending", "-", "-", "-"],
        .endReplaced: ["ending", "ending", "ending", "-", "-"],
        .endBroadcast: ["-", "-", "ended", "-", "-"],
        .endedWithoutChannel: ["-", "-", "ended", "-", "-"],
        .rescheduled: ["scheduled", "live", "-", "-", "-"],
        .postponed: ["scheduled restartAudience", "scheduled restartAudience", "-", "-", "-"],
        .cancelRequested: ["cancelled", "cancelled", "cancelled", "-", "-"],
    ]

    @Test func rawStatusesAreStable() {
        #expect(EventStatus.allCases.map(\.rawValue) == ["scheduled", "live", "ending", "ended", "cancelled"])
    }

    @Test func everyStatusAndEventDoesWhatTheTableSays() {
        #expect(Set(Self.table.keys) == Set(EventLifecycle.Event.allCases))
        for (event, row) in Self.table {
            for (status, expected) in zip(EventStatus.allCases, row) {
                var lifecycle = EventLifecycle(state: status)
                do {
                    let action = try lifecycle.handle(event)
                    #expect(
                        ([lifecycle.state.rawValue] + (action.map { ["\($0)"] } ?? [])).joined(separator: " ") == expected, "\(event) in \(status)")
                } catch {
                    #expect(expected == "-", "\(event) in \(status) was refused")
                    #expect(lifecycle.state == status)
                    #expect(error == EventLifecycleError(state: status, event: event))
                    #expect(error.description.contains(event.rawValue) && error.description.contains(status.rawValue))
                }
            }
        }
    }

    @Test func theNamedSetsFollowTheTransitions() {
        #expect(EventLifecycle.toStartStates == [.scheduled])
        #expect(EventLifecycle.updatableStates == [.scheduled, .live])
        #expect(EventLifecycle.endingStates == [.ending])
        #expect(EventLifecycle.finalStates == [.ended, .cancelled])
        #expect(EventLifecycle.startedStates == [.live, .ending])
        #expect(EventLifecycle.states(accepting: .endReplaced) == [.scheduled, .live, .ending])
        #expect(EventLifecycle.states(accepting: .cancelRequested) == [.scheduled, .live, .ending])
    }

    @Test func aMatchFromScheduleToEnd() throws {
        var match = EventLifecycle()
        #expect(try match.handle(.updateAccepted) == nil)
        #expect(try match.handle(.startsAtReached) == nil && match.state == .live)
        #expect(try match.handle(.updateAccepted) == nil)
        #expect(try match.handle(.endAccepted) == nil && match.state == .ending)
        #expect(throws: EventLifecycleError(state: .ending, event: .endAccepted)) { try match.handle(.endAccepted) }
        #expect(try match.handle(.endReplaced) == nil)
        #expect(try match.handle(.endBroadcast) == nil)
        #expect(match.state == .ended)
    }

    @Test func aPostponementAfterStartsRestartsTheAudience() throws {
        var match = EventLifecycle(state: .live)
        #expect(try match.handle(.postponed) == .restartAudience)
        #expect(match.state == .scheduled)
    }
}
