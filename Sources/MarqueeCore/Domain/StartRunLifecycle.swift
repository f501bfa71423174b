// The life of one start run, as a value: every change of a run's state (`start_runs.state`) is decided here, and
// the store's statements write the states it names (house style: the state machine decides, one place acts, tests
// need no I/O). The run planner (`StartRunPlanner`) asks it how a run ends; a postponement asks it what the open
// runs of the old round become.
//
//   running → rolling → done          (the first pass over the audience, then late followers until the cutoff)
//   running → stopped                 (the event ended, was cancelled or postponed before the first pass was done)
//   rolling → done                    (the event ended after the first pass: nothing was cut short)
//   rolling → stopped                 (the event was cancelled or postponed)
//   skipped                           (never ran: too late, or an automatic run without an alert)

/// The state machine of one start run.
public enum StartRunLifecycle {
    /// What happened to the run.
    public enum Event: String, Sendable, CaseIterable {
        /// Every chunk of the first pass is done: late followers are started from now on.
        case firstPassDone
        /// `endsAt` less `--late-start-cutoff` passed: no more late starts.
        case cutoffPassed
        /// The event ended (or its end was accepted).
        case eventEnded
        /// The event was called off.
        case eventCancelled
        /// The event was postponed after starts went out: a new audience round starts it again.
        case postponed
    }

    /// The state `event` leads to from `state`, or nil when it does not apply there.
    public static func transition(from state: StartRunState, on event: Event) -> StartRunState? {
        switch (state, event) {
        case (.running, .firstPassDone): .rolling
        case (.rolling, .firstPassDone): .rolling
        case (.running, .cutoffPassed), (.rolling, .cutoffPassed): .done
        case (.running, .eventEnded): .stopped
        case (.rolling, .eventEnded): .done
        case (.running, .eventCancelled), (.rolling, .eventCancelled), (.running, .postponed), (.rolling, .postponed): .stopped
        default: nil
        }
    }

    /// The states a run is worked in (the `start_runs_open` index): every state some event moves on from.
    public static let openStates = StartRunState.allCases.filter { state in Event.allCases.contains { transition(from: state, on: $0) != nil } }
    /// The states of a run that is over.
    public static let finalStates = StartRunState.allCases.filter { !openStates.contains($0) }
}
