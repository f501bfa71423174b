// The life of one event, as a value: every change of an event's status is decided here, and the
// store's statements guard and set the status with this type's named state sets (house style: the state
// machine decides, one place acts, tests need no I/O).
//
// Main path:   scheduled → live → ending → ended
// Side paths:  scheduled | live → ending (an `end` accepted before or after the start)
//              ending → ending (an end that says it replaces the first)
//              ending → ended (no channel could carry the end: its pending updates are unsent)
//              scheduled | live → rescheduled in place (new times, topics, lead or start alert)
//              scheduled | live → scheduled (postponed after starts went out: the audience starts again)
//              scheduled | live | ending → cancelled
// ended and cancelled are final.

/// Where an event stands (`events.status`). Raw values are what the store persists.
public enum EventStatus: String, Sendable, Codable, CaseIterable {
    /// Created; its `startsAt` has not come.
    case scheduled
    /// Its `startsAt` came.
    case live
    /// An `end` was accepted and waits to go out.
    case ending
    /// The end went out (or could not, having no channel): final.
    case ended
    /// Called off: final.
    case cancelled
}

/// The state machine of one event.
public struct EventLifecycle: Sendable, Equatable {
    /// What happened to the event; named in errors and logs.
    public enum Event: String, Sendable, Codable, CaseIterable {
        /// The scheduler saw `startsAt` pass.
        case startsAtReached
        /// A feed sent an `update`.
        case updateAccepted
        /// A feed (or the scheduler, past `endsAt`) sent an `end`.
        case endAccepted
        /// A feed sent an `end` that says it replaces an earlier one.
        case endReplaced
        /// The end broadcast went out.
        case endBroadcast
        /// No channel can carry the end: the event ends without it.
        case endedWithoutChannel
        /// New times (or topics, audience lead, start alert) for an event that has not ended.
        case rescheduled
        /// A start moved later after starts went out: running activities end, the audience starts again.
        case postponed
        /// The event is called off.
        case cancelRequested
    }

    /// What the caller must do besides storing the new status. The status itself is all that most events change:
    /// the statements that perform them set it from `transition(from:on:).to` (see `states(accepting:)`).
    public enum Action: Sendable, Equatable {
        /// End the running activities with the new times' state and start the audience again at the new lead
        /// (EventRepository performs it with the postponement).
        case restartAudience
    }

    public private(set) var state: EventStatus

    public init(state: EventStatus = .scheduled) { self.state = state }

    /// The status `event` leads to from `state` and the action it asks for beyond that status (nil: none), or nil
    /// when it does not apply there.
    public static func transition(from state: EventStatus, on event: Event) -> (to: EventStatus, action: Action?)? {
        switch (event, state) {
        case (.startsAtReached, .scheduled): (.live, nil)
        case (.updateAccepted, .scheduled), (.updateAccepted, .live): (state, nil)
        case (.endAccepted, .scheduled), (.endAccepted, .live): (.ending, nil)
        case (.endReplaced, .scheduled), (.endReplaced, .live), (.endReplaced, .ending): (.ending, nil)
        case (.endBroadcast, .ending): (.ended, nil)
        case (.endedWithoutChannel, .ending): (.ended, nil)
        case (.rescheduled, .scheduled), (.rescheduled, .live): (state, nil)
        case (.postponed, .scheduled), (.postponed, .live): (.scheduled, .restartAudience)
        case (.cancelRequested, .scheduled), (.cancelRequested, .live), (.cancelRequested, .ending): (.cancelled, nil)
        default: nil
        }
    }

    /// Every status in which `event` applies: what a statement that performs it filters on.
    public static func states(accepting event: Event) -> [EventStatus] {
        EventStatus.allCases.filter { transition(from: $0, on: event) != nil }
    }

    /// Moves the event and returns the action to perform beyond its new status (nil: none); throws, changing nothing,
    /// when the event does not apply.
    public mutating func handle(_ event: Event) throws(EventLifecycleError) -> Action? {
        guard let (next, action) = Self.transition(from: state, on: event) else {
            throw EventLifecycleError(state: state, event: event)
        }
        state = next
        return action
    }

    // MARK: named state sets (the store's statements and partial indexes are written from these)

    /// Waiting for `startsAt` (the `events_to_start` index).
    public static let toStartStates = states(accepting: .startsAtReached)
    /// Started and not over (the `events_to_end` index: the scheduler ends what nobody ended).
    public static let startedStates: [EventStatus] = [.live, .ending]
    /// Waiting for the end to go out (the `events_ending` index).
    public static let endingStates = states(accepting: .endBroadcast)
    /// Final: nothing changes them any more (the `events_to_purge` index: their updates are purged after the retention).
    public static let finalStates = EventStatus.allCases.filter { state in Event.allCases.allSatisfy { transition(from: state, on: $0) == nil } }
    /// Taking updates.
    public static let updatableStates = states(accepting: .updateAccepted)
}

/// An event that does not apply in the event's status; nothing changed.
public struct EventLifecycleError: Error, Equatable, CustomStringConvertible {
    public var state: EventStatus
    public var event: EventLifecycle.Event

    public var description: String { "event lifecycle: \(event.rawValue) does not apply in status \(state.rawValue)" }
}
