import Testing

@testable import MarqueeCore

@Suite struct EventLifecycleTests {
    /// The whole machine, written out: for each event, what it does in each status (`-`: refused).
    /// Columns: scheduled, live, ending, ended, cancelled.
    static let table: [EventLifecycle.Event: [String]] = [
        .startsAtReached: ["live markLive", "-", "-", "-", "-"],
        .updateAccepted: ["scheduled storeUpdate", "live storeUpdate", "-", "-", "-"],
        .endAccepted: ["ending storeEnd", "ending storeEnd", "-", "-", "-"],
        .endReplaced: ["ending storeEnd", "ending storeEnd", "ending storeEnd", "-", "-"],
        .endBroadcast: ["-", "-", "ended markEnded", "-", "-"],
        .endedWithoutChannel: ["-", "-", "ended markEndedUnsent", "-", "-"],
        .rescheduled: ["scheduled storeSchedule", "live storeSchedule", "-", "-", "-"],
        .postponed: ["scheduled restartAudience", "scheduled restartAudience", "-", "-", "-"],
        .cancelRequested: ["cancelled cancel", "cancelled cancel", "cancelled cancel", "-", "-"],
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
                    #expect("\(lifecycle.state.rawValue) \(action)" == expected, "\(event) in \(status)")
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
        #expect(try match.handle(.updateAccepted) == .storeUpdate)
        #expect(try match.handle(.startsAtReached) == .markLive)
        #expect(try match.handle(.updateAccepted) == .storeUpdate)
        #expect(try match.handle(.endAccepted) == .storeEnd)
        #expect(throws: EventLifecycleError(state: .ending, event: .endAccepted)) { try match.handle(.endAccepted) }
        #expect(try match.handle(.endReplaced) == .storeEnd)
        #expect(try match.handle(.endBroadcast) == .markEnded)
        #expect(match.state == .ended)
    }
}
