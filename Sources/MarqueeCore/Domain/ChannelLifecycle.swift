// The life of one event's broadcast channel, as a value: each event method moves the state and
// returns the one action the caller must perform (house style: the state machine decides, one place
// acts, tests need no I/O). The state has stable raw strings so the store can persist it.
//
// Main path:  planned → creating → open → ending → ended → deleting → deleted
// Side paths: creating → create_unknown (timed out) → open (reconcile found) | creating (not found)
//             creating → create_failed (permanent refusal; an operator retries)
//             open | ending → lost (ChannelNotRegistered, or missing from APNs' list)
//             planned | create_failed → deleted (the event ended before any channel existed)

/// The state machine of one event's broadcast channel.
public struct ChannelLifecycle: Sendable, Equatable, Codable {
    /// Where the channel stands. Raw values are what the store persists.
    public enum State: String, Sendable, Codable, CaseIterable {
        /// No channel yet; the event is in the future.
        case planned
        /// A create request is in flight or waiting for a retry.
        case creating
        /// The create timed out: APNs may or may not have made the channel until a reconcile tells.
        case createUnknown = "create_unknown"
        /// APNs refused the create permanently; an operator must act.
        case createFailed = "create_failed"
        /// The channel exists and carries updates.
        case open
        /// The end broadcast is being sent.
        case ending
        /// The end went out; the channel waits for the delete delay.
        case ended
        /// A delete request is in flight or waiting for a retry.
        case deleting
        /// No channel remains at APNs (or none was ever made).
        case deleted
        /// APNs no longer knows the channel (ChannelNotRegistered) while activities may still listen on it.
        case lost

        /// States in which a channel may exist at APNs (an in-flight or unresolved create included):
        /// these count against the 10,000-channel quota.
        public var countsAgainstQuota: Bool {
            switch self {
            case .creating, .createUnknown, .open, .ending, .ended, .deleting: true
            case .planned, .createFailed, .deleted, .lost: false
            }
        }
    }

    // MARK: named state sets (the store's statements and partial indexes are written from these)

    /// States in which a channel may exist at APNs: they count against the quota.
    public static let quotaStates = State.allCases.filter(\.countsAgainstQuota)
    /// The event's current channel, at most one per event (the `channels_one_live_per_event` index): not
    /// yet over. A new channel row is made for an event only once its channel left these states.
    public static let currentStates: [State] = [.planned, .creating, .createUnknown, .createFailed, .open, .ending]
    /// States in which the channel may still carry the event's end (a create refused for good cannot).
    public static let endCarryingStates = currentStates.filter { $0 != .createFailed }
    /// Carrying the event's broadcasts.
    public static let broadcastingStates = State.allCases.filter { $0 == .open || $0 == .ending }
    /// Known at APNs by its id, as far as the database knows: what Apple's channel list must show.
    public static let listedStates: [State] = [.open, .ending, .ended, .deleting]
    /// A create or delete is in flight or waiting for its retry (`next_attempt_at`).
    public static let requestStates: [State] = [.creating, .deleting]
    /// Ended and waiting for the delete delay (the `channels_to_delete` index).
    public static let deleteDueStates: [State] = [.ended]

    /// What happened; named in errors and logs.
    public enum Event: String, Sendable, Codable, CaseIterable {
        case leadTimeReached, firstUpdate
        case createSucceeded, createFailedRetryable, createFailedPermanently, createTimedOut
        case retryDue, retryCreateRequested
        case endRequested, endSent
        case deleteDelayElapsed, deleteRequested, deleteSucceeded, deleteFailed
        case channelNotRegistered
        case reconcileFound, reconcileNotFound
    }

    /// The request a retry repeats.
    public enum Operation: String, Sendable, Codable {
        case create
        case delete
    }

    /// What the caller must do after an event.
    public enum Action: Sendable, Equatable {
        /// Send a create-channel request; `attempt` counts from 1.
        case createChannel(attempt: Int)
        /// Wait `RetryBackoff.delay(attempt: failedAttempts)`, then report `retryDue()`.
        case scheduleRetry(Operation, failedAttempts: Int)
        case sendEndBroadcast
        /// Send a delete-channel request; `attempt` counts from 1.
        case deleteChannel(attempt: Int)
        /// List the app's channels to learn whether the timed-out create made one, then report
        /// `reconcileFound()` or `reconcileNotFound()`.
        case reconcile
        /// Tell the operator: APNs no longer knows the channel, running activities are orphaned.
        case flagLost
        /// Tell the operator: APNs refused to create the channel.
        case flagCreateFailed
        case nothing
    }

    public private(set) var state: State
    /// Requests made so far for the current create or delete.
    public private(set) var attempt: Int

    public init(state: State = .planned, attempt: Int = 0) {
        self.state = state
        self.attempt = attempt
    }

    /// True when broadcasts may be sent on the channel.
    public var isOpen: Bool { state == .open }

    // MARK: opening

    /// The event is within its lead time: open a channel for it.
    public mutating func leadTimeReached() throws(ChannelLifecycleError) -> Action { try openRequested(by: .leadTimeReached) }

    /// An update arrived for an event without a channel: open one now.
    public mutating func firstUpdate() throws(ChannelLifecycleError) -> Action { try openRequested(by: .firstUpdate) }

    private mutating func openRequested(by event: Event) throws(ChannelLifecycleError) -> Action {
        switch state {
        case .planned: return startCreate()
        case .creating, .createUnknown, .createFailed, .open: return .nothing
        case .ending, .ended, .deleting, .deleted, .lost: throw invalid(event)
        }
    }

    /// APNs answered 201 with a channel id.
    public mutating func createSucceeded() throws(ChannelLifecycleError) -> Action {
        guard state == .creating else { throw invalid(.createSucceeded) }
        move(to: .open)
        return .nothing
    }

    /// The create failed in a way worth retrying (429, 5xx, I/O).
    public mutating func createFailedRetryable() throws(ChannelLifecycleError) -> Action {
        guard state == .creating else { throw invalid(.createFailedRetryable) }
        return .scheduleRetry(.create, failedAttempts: attempt)
    }

    /// APNs refused the create for good (for example CannotCreateChannelConfig, FeatureNotEnabled).
    public mutating func createFailedPermanently() throws(ChannelLifecycleError) -> Action {
        guard state == .creating else { throw invalid(.createFailedPermanently) }
        move(to: .createFailed)
        return .flagCreateFailed
    }

    /// The create got no answer in time: the channel may exist.
    public mutating func createTimedOut() throws(ChannelLifecycleError) -> Action {
        guard state == .creating else { throw invalid(.createTimedOut) }
        state = .createUnknown  // keeps `attempt`: a create after reconcile is the next attempt
        return .reconcile
    }

    /// The backoff of a scheduled retry elapsed. A stale timer (the state moved on) does nothing.
    public mutating func retryDue() -> Action {
        switch state {
        case .creating:
            attempt += 1
            return .createChannel(attempt: attempt)
        case .deleting:
            attempt += 1
            return .deleteChannel(attempt: attempt)
        default:
            return .nothing
        }
    }

    /// An operator asks to create a channel again after a permanent failure, or to replace a lost
    /// one for activities started from now on.
    public mutating func retryCreateRequested() throws(ChannelLifecycleError) -> Action {
        guard state == .createFailed || state == .lost else { throw invalid(.retryCreateRequested) }
        return startCreate()
    }

    // MARK: ending and deleting

    /// The event is over. Without a channel there is nothing to end. While a create is unresolved
    /// this is refused: report it again once the create succeeded or failed.
    public mutating func endRequested() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .planned, .createFailed:
            move(to: .deleted)
            return .nothing
        case .open:
            move(to: .ending)
            return .sendEndBroadcast
        case .ending, .ended, .deleting, .deleted, .lost:
            return .nothing
        case .creating, .createUnknown:
            throw invalid(.endRequested)
        }
    }

    /// The end broadcast was accepted by APNs.
    public mutating func endSent() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .ending:
            move(to: .ended)
            return .nothing
        case .ended:
            return .nothing
        default:
            throw invalid(.endSent)
        }
    }

    /// Enough time passed after the end for devices to have received it: delete the channel.
    public mutating func deleteDelayElapsed() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .ended:
            return startDelete()
        case .deleting, .deleted:
            return .nothing
        default:
            throw invalid(.deleteDelayElapsed)
        }
    }

    /// An operator asks to delete the channel now. An open (or ending) channel is deleted only with
    /// `force`, since running activities stop getting updates; without a channel at APNs there is
    /// nothing to delete. While a create is unresolved this is refused: ask again once it settled.
    public mutating func deleteRequested(force: Bool) throws(ChannelLifecycleError) -> Action {
        switch state {
        case .ended:
            return startDelete()
        case .open, .ending:
            guard force else { throw invalid(.deleteRequested) }
            return startDelete()
        case .planned, .createFailed, .lost:
            move(to: .deleted)
            return .nothing
        case .deleting, .deleted:
            return .nothing
        case .creating, .createUnknown:
            throw invalid(.deleteRequested)
        }
    }

    /// APNs answered 204 to the delete.
    public mutating func deleteSucceeded() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .deleting:
            move(to: .deleted)
            return .nothing
        case .deleted:
            return .nothing
        default:
            throw invalid(.deleteSucceeded)
        }
    }

    /// The delete failed (other than ChannelNotRegistered, which is `channelNotRegistered()`).
    public mutating func deleteFailed() throws(ChannelLifecycleError) -> Action {
        guard state == .deleting else { throw invalid(.deleteFailed) }
        return .scheduleRetry(.delete, failedAttempts: attempt)
    }

    // MARK: what APNs says about the channel

    /// APNs answered ChannelNotRegistered to a broadcast or delete.
    public mutating func channelNotRegistered() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .open, .ending:
            move(to: .lost)
            return .flagLost
        case .ended, .deleting:
            move(to: .deleted)
            return .nothing
        case .lost, .deleted:
            return .nothing
        case .planned, .creating, .createUnknown, .createFailed:
            throw invalid(.channelNotRegistered)
        }
    }

    /// The channel list from APNs contains this channel.
    public mutating func reconcileFound() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .createUnknown, .lost:
            move(to: .open)
            return .nothing
        case .open, .ending, .ended, .deleting:
            return .nothing
        case .deleted:
            return startDelete()
        case .planned, .creating, .createFailed:
            throw invalid(.reconcileFound)
        }
    }

    /// The channel list from APNs does not contain this channel.
    public mutating func reconcileNotFound() throws(ChannelLifecycleError) -> Action {
        switch state {
        case .createUnknown:
            state = .creating
            attempt += 1
            return .createChannel(attempt: attempt)
        case .open, .ending:
            move(to: .lost)
            return .flagLost
        case .ended, .deleting:
            move(to: .deleted)
            return .nothing
        case .deleted, .lost:
            return .nothing
        case .planned, .creating, .createFailed:
            throw invalid(.reconcileNotFound)
        }
    }

    // MARK: by name

    /// Delivers an event by name (for events read back from storage or a queue); the same as
    /// calling its method.
    public mutating func handle(_ event: Event) throws(ChannelLifecycleError) -> Action {
        switch event {
        case .leadTimeReached: try leadTimeReached()
        case .firstUpdate: try firstUpdate()
        case .createSucceeded: try createSucceeded()
        case .createFailedRetryable: try createFailedRetryable()
        case .createFailedPermanently: try createFailedPermanently()
        case .createTimedOut: try createTimedOut()
        case .retryDue: retryDue()
        case .retryCreateRequested: try retryCreateRequested()
        case .endRequested: try endRequested()
        case .endSent: try endSent()
        case .deleteDelayElapsed: try deleteDelayElapsed()
        case .deleteRequested: try deleteRequested(force: false)
        case .deleteSucceeded: try deleteSucceeded()
        case .deleteFailed: try deleteFailed()
        case .channelNotRegistered: try channelNotRegistered()
        case .reconcileFound: try reconcileFound()
        case .reconcileNotFound: try reconcileNotFound()
        }
    }

    // MARK: what a move does to the event's broadcasts

    /// What a channel's move does to its event's broadcasts, besides the channel's own row.
    public enum BroadcastChange: Sendable, Equatable {
        /// The channel is lost while activities may listen on it: the event is flagged and its queued work dropped.
        case stop
        /// The channel opened (again): the flag goes and the newest pending update is queued.
        case resume
    }

    /// What a move from `old` to `new` does to the event's broadcasts (nil: nothing): entering `lost` stops them,
    /// entering `open` (a first open, a reconcile that found the channel, a recreate of a lost one) resumes them.
    public static func broadcasts(from old: State, to new: State) -> BroadcastChange? {
        guard old != new else { return nil }
        switch new {
        case .lost: return .stop
        case .open: return .resume
        default: return nil
        }
    }

    // MARK: for statements that move many channels at once

    /// The lifecycle after `events` in turn from `state` (attempts counted from 0), or nil when one of them
    /// does not apply there. The store writes a set-based transition (every channel of an event, or the
    /// channels a batch of records names) from this, so SQL spells no target state of its own.
    public static func after(_ events: [Event], from state: State) -> ChannelLifecycle? {
        var lifecycle = ChannelLifecycle(state: state)
        for event in events {
            guard (try? lifecycle.handle(event)) != nil else { return nil }
        }
        return lifecycle
    }

    // MARK: helpers

    private mutating func startCreate() -> Action {
        move(to: .creating)
        attempt = 1
        return .createChannel(attempt: 1)
    }

    private mutating func startDelete() -> Action {
        move(to: .deleting)
        attempt = 1
        return .deleteChannel(attempt: 1)
    }

    private mutating func move(to newState: State) {
        state = newState
        attempt = 0
    }

    private func invalid(_ event: Event) -> ChannelLifecycleError {
        ChannelLifecycleError(state: state, event: event)
    }
}

/// An event that does not apply in the channel's current state; nothing changed.
public struct ChannelLifecycleError: Error, Equatable, CustomStringConvertible {
    public var state: ChannelLifecycle.State
    public var event: ChannelLifecycle.Event

    public var description: String {
        let hint =
            switch (state, event) {
            case (.creating, .endRequested), (.createUnknown, .endRequested):
                "; report the end again once the create has resolved"
            default: ""
            }
        return "channel lifecycle: \(event.rawValue) does not apply in state \(state.rawValue)\(hint)"
    }
}
