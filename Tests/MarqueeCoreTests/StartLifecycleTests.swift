import MarqueeCore
import Testing

/// The start of one installation for one event, and the path its OS version and the event's channel decide.
struct StartLifecycleTests {
    typealias E = StartLifecycle.Event

    static let events: [E] = [.sendBegan, .accepted, .rejected, .notDone, .outcomeUnknown, .holderLost, .skipped]

    @Test func everyTransitionOfTheTable() {
        let allowed: [StartState: [E: StartState]] = [
            .planned: [.sendBegan: .sending, .skipped: .skipped],
            .sending: [.accepted: .accepted, .rejected: .rejected, .notDone: .planned, .outcomeUnknown: .unknown, .holderLost: .unknown],
        ]
        for state in StartState.allCases {
            for event in Self.events {
                #expect(StartLifecycle.transition(from: state, on: event) == allowed[state]?[event], "\(state) on \(event)")
            }
        }
        #expect(StartLifecycle.openStates == [.planned, .sending])
        #expect(StartLifecycle.finalStates == [.accepted, .rejected, .unknown, .skipped])
    }

    @Test func nothingButAProofThatAPNsDidNothingLetsAStartGoAgain() {
        // From sending, only notDone leads back to planned (the one state a send begins from).
        let again = Self.events.filter { StartLifecycle.transition(from: .sending, on: $0) == .planned }
        #expect(again == [.notDone])
        // An unknown or accepted start is started for the event: a later run leaves the installation out.
        #expect(StartLifecycle.startedStates.contains(.unknown) && StartLifecycle.startedStates.contains(.accepted))
        #expect(!StartLifecycle.startedStates.contains(.rejected) && !StartLifecycle.startedStates.contains(.skipped))
    }

    @Test func theOSVersionAndTheChannelDecideThePath() {
        func path(_ os: String?, _ channel: String? = "ch1=", waited: Bool = false) -> StartPath {
            StartPath.decide(os: os.flatMap(OSVersion.init), channelID: channel, channelWaitEnded: waited)
        }
        #expect(path("16.4") == .notStartable)
        #expect(path("17.1.2") == .notStartable)
        #expect(path("17.2") == .plain)
        #expect(path("17.10") == .plain)
        #expect(path("18.0") == .channel("ch1="))
        #expect(path("26.1") == .channel("ch1="))
        #expect(path("18.2", nil) == .waitForChannel)
        #expect(path("18.2", nil, waited: true) == .tokenRequested)
        #expect(path("17.4", nil, waited: true) == .plain)
        #expect(path(nil, "ch1=") == .plain, "a device that never told its version gets the start every version 17.2+ reads")
    }
}
