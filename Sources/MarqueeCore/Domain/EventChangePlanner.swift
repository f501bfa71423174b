// What a change of an event's schedule or audience settings (`PATCH /v1/events/{id}`) means, as a value: the
// facts read under the event's row lock go in, a refusal or the lifecycle event to perform comes out, with the
// warnings the answer carries. EventLifecycle decides whether the status takes it; the store performs it.
import Foundation

/// What a request asks to change; nil members stay as they are.
public struct EventChange: Sendable, Equatable {
    public var startsAt: Date?
    public var endsAt: Date?
    public var topics: [String]?
    /// `.some(nil)`: back to the server's default lead.
    public var audienceLead: Int??
    /// `.some(nil)`: no start alert any more (automatic starts are skipped).
    public var startAlert: JSONValue??
    /// The content-state that ends the running activities when the change postpones the event (nil: its latest).
    public var postponedState: JSONValue?
    /// The event's own freshness policy members; `.some(nil)`: none (its attribute type's apply).
    public var freshness: FreshnessSettings??

    public init(startsAt: Date? = nil, endsAt: Date? = nil, topics: [String]? = nil, audienceLead: Int?? = nil, startAlert: JSONValue?? = nil) {
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.topics = topics
        self.audienceLead = audienceLead
        self.startAlert = startAlert
    }

    /// True when the request names nothing to change.
    public var isEmpty: Bool {
        startsAt == nil && endsAt == nil && topics == nil && audienceLead == nil && startAlert == nil && freshness == nil
    }
}

/// The event as read for a change, under its row lock.
public struct EventChangeFacts: Sendable, Equatable {
    public var status: EventStatus
    public var startsAt: Date
    public var endsAt: Date?
    /// The event's own lead (nil: `defaultAudienceLead`).
    public var audienceLead: Int?
    /// Serve's `--audience-lead`.
    public var defaultAudienceLead: TimeInterval
    /// A start run of the event's current audience round sent push-to-starts (activities may be running).
    public var startsWentOut: Bool
    /// Serve's `--restart-on-postpone`: a later start by more than this, after starts went out, restarts the audience.
    public var restartOnPostpone: TimeInterval

    public init(
        status: EventStatus, startsAt: Date, endsAt: Date?, audienceLead: Int?, defaultAudienceLead: TimeInterval, startsWentOut: Bool,
        restartOnPostpone: TimeInterval
    ) {
        self.status = status
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.audienceLead = audienceLead
        self.defaultAudienceLead = defaultAudienceLead
        self.startsWentOut = startsWentOut
        self.restartOnPostpone = restartOnPostpone
    }
}

/// Something the answer tells the caller about an accepted event (the `warnings` array).
public enum EventWarning: String, Sendable, Equatable, CaseIterable {
    /// From the audience start to `endsAt` is longer than the 8 hours an activity lives.
    case outlivesActivity = "activity_outlives_8h"

    /// How long a Live Activity stays active before the system ends it.
    public static let activityLifetime: TimeInterval = 8 * 3600

    /// The warnings of an event with these times: `endsAt − (startsAt − lead)` over 8 hours.
    public static func warnings(startsAt: Date, endsAt: Date?, lead: TimeInterval) -> [EventWarning] {
        guard let endsAt, endsAt.timeIntervalSince(startsAt.addingTimeInterval(-lead)) > activityLifetime else { return [] }
        return [.outlivesActivity]
    }
}

/// Why a change is refused; nothing changed.
public enum EventChangeRefusal: Sendable, Equatable, Error {
    /// The event's status takes no change (ending, ended, cancelled).
    case closed(EventStatus)
    /// `endsAt` would not be after `startsAt`.
    case endsNotAfterStart
}

/// What to perform for an accepted change.
public struct EventChangePlan: Sendable, Equatable {
    /// `rescheduled`, or `postponed` when the audience is started again.
    public var event: EventLifecycle.Event
    /// `restartAudience` for a postponement; nil: the new times and settings are all there is to store.
    public var action: EventLifecycle.Action?
    /// The status the event is left in.
    public var status: EventStatus
    public var startsAt: Date
    public var endsAt: Date?
    public var warnings: [EventWarning]
}

/// Decides a change of an event's schedule or audience settings.
public enum EventChangePlanner {
    public static func plan(_ change: EventChange, facts: EventChangeFacts) -> Result<EventChangePlan, EventChangeRefusal> {
        let startsAt = change.startsAt ?? facts.startsAt
        let endsAt = change.endsAt ?? facts.endsAt
        if let endsAt, endsAt <= startsAt { return .failure(.endsNotAfterStart) }
        // A start moved later by more than the restart threshold after starts went out: the running activities
        // would show the old kick-off for hours and reach their 8 hours early, so the audience starts again.
        let postponed = facts.startsWentOut && startsAt.timeIntervalSince(facts.startsAt) > facts.restartOnPostpone
        let event: EventLifecycle.Event = postponed ? .postponed : .rescheduled
        guard let (status, action) = EventLifecycle.transition(from: facts.status, on: event) else {
            return .failure(.closed(facts.status))
        }
        let lead =
            change.audienceLead.map { $0.map(TimeInterval.init) ?? facts.defaultAudienceLead }
            ?? facts.audienceLead.map(TimeInterval.init) ?? facts.defaultAudienceLead
        return .success(
            EventChangePlan(
                event: event, action: action, status: status, startsAt: startsAt, endsAt: endsAt,
                warnings: EventWarning.warnings(startsAt: startsAt, endsAt: endsAt, lead: lead)))
    }
}

/// What a cancel of an event decides on: what the event has reached.
public struct EventCancelFacts: Sendable, Equatable {
    public var status: EventStatus
    /// A push-to-start went out, the app registered an activity, or a broadcast reached its channel.
    public var startedActivities: Bool
    /// Its channel is open (or ending) and can broadcast the end.
    public var channelCarriesEnd: Bool
    /// It has token activities, which take the end by the token route (with or without a channel).
    public var tokenActivitiesTakeEnd: Bool
    /// Accepted starts that no end reaches: their activity was never registered, and no channel carries the end to them.
    public var unreachableStarts: Int

    public init(
        status: EventStatus, startedActivities: Bool, channelCarriesEnd: Bool, tokenActivitiesTakeEnd: Bool = false, unreachableStarts: Int = 0
    ) {
        self.status = status
        self.startedActivities = startedActivities
        self.channelCarriesEnd = channelCarriesEnd
        self.tokenActivitiesTakeEnd = tokenActivitiesTakeEnd
        self.unreachableStarts = unreachableStarts
    }
}

/// What a cancel of an event does, decided from what it has reached.
public enum EventCancelPlan: Sendable, Equatable {
    /// Activities may be running: the final state goes out as the `end`, broadcast on the channel and sent to the
    /// token activities (mirrored, or by the token route when no channel broadcasts); the channel is deleted after
    /// the usual delay.
    case endActivities
    /// Nothing was started, or nothing can carry an end (no channel broadcasts and no token activity is known): no
    /// broadcast, no push; pending updates are unsent and a channel already open is deleted at once, freeing its
    /// quota slot.
    case closeQuietly

    /// The plan for an event, or nil when its status takes no cancel (ended, cancelled).
    public static func plan(_ facts: EventCancelFacts) -> EventCancelPlan? {
        guard EventLifecycle.transition(from: facts.status, on: .cancelRequested) != nil else { return nil }
        return facts.startedActivities && (facts.channelCarriesEnd || facts.tokenActivitiesTakeEnd) ? .endActivities : .closeQuietly
    }
}

/// What a cancel without a broadcast (`EventCancelPlan.closeQuietly`) does to the event's current channel, decided
/// from its lifecycle: none planned or refused is deleted in the database; an open (or ending) one is deleted at APNs
/// now (the channel lifecycle's forced delete), so it frees its quota slot; an unresolved create is left to settle.
public struct QuietCancelChannelPlan: Sendable, Equatable {
    /// The lifecycle to store.
    public var next: ChannelLifecycle
    /// `deleteChannel`: the scheduler sends the delete now; `nothing`: no channel exists at APNs.
    public var action: ChannelLifecycle.Action

    /// The plan for the event's current channel, or nil when nothing changes (no current channel, or a create
    /// whose outcome is unknown).
    public static func plan(_ lifecycle: ChannelLifecycle?) -> QuietCancelChannelPlan? {
        guard let lifecycle else { return nil }
        var next = lifecycle
        let action: ChannelLifecycle.Action?
        switch lifecycle.state {
        case .planned, .createFailed: action = try? next.endRequested()
        case .open, .ending: action = try? next.deleteRequested(force: true)
        default: action = nil
        }
        return action.map { QuietCancelChannelPlan(next: next, action: $0) }
    }
}
