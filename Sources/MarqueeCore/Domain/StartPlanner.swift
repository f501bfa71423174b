// The decisions of the start fan-out, as values (docs/apns.md#push-to-start): which member of an event's
// audience is started and how (`StartPlanner.decide`), what an APNs answer does to a start
// (`StartPlanner.afterAnswer`), and where a run goes next (`StartRunPlanner`). The fan-out service reads
// the facts, asks these, and performs what they return; the tests need no I/O.
import Foundation

/// Where a start run stands (`start_runs.state`); StartRunLifecycle decides every change.
///
///   running → rolling → done      (the first pass over the audience, then late followers until the cutoff)
///   running | rolling → stopped   (cancelled or postponed; ended before the first pass was done)
///   skipped                       (never ran: too late, or an automatic run without an alert)
public enum StartRunState: String, Sendable, Codable, CaseIterable {
    /// The first pass over the audience.
    case running
    /// The first pass is done; late followers are started by later passes.
    case rolling
    /// No more starts: the late-start cutoff passed, or the event ended after the first pass.
    case done
    /// Never ran (`StartRunSkipReason`).
    case skipped
    /// The event was cancelled or postponed during the run, or ended before its first pass was done.
    case stopped

    /// States in which chunks are cut and claimed (StartRunLifecycle's open states).
    public static var openStates: [StartRunState] { StartRunLifecycle.openStates }
}

/// How a run came to be.
public enum StartRunKind: String, Sendable, Codable, CaseIterable {
    /// At `startsAt − audience lead`, by the fan-out itself.
    case automatic
    /// On `POST /v1/events/{id}/starts`.
    case manual
}

/// Why a run never ran.
public enum StartRunSkipReason: String, Sendable, Codable, CaseIterable {
    /// Due longer ago than `--start-max-lateness` (serve was down at the lead, for example).
    case late
    /// An automatic run of an event without a start alert: ActivityKit shows no start without one.
    case noAlert = "no_alert"
}

/// Why a start was not sent (`starts.reason` of a `skipped` start).
public enum StartSkipReason: String, Sendable, Codable, CaseIterable {
    /// Below iOS 17.2: push-to-start does not exist there.
    case notStartable = "not_startable"
    /// The installation had `--starts-per-device-hour` starts in the last hour.
    case deviceLimit = "device_limit"
    /// The installation runs `--max-concurrent-activities` activities of other events already.
    case concurrency
    /// APNs answered 429 to the start and to its one retry.
    case throttled
    /// The installation turned Live Activities off, or lost its token, before its start was sent.
    case disabled
    /// Another run of the event started the installation before this run's retry.
    case startedByAnotherRun = "started_by_another_run"
    /// The installation shows an activity of the event's current audience round already, registered by its app
    /// (active, scheduled or ended, by whatever route): a push-to-start would put a second one beside it.
    case hasActivity = "has_activity"
    /// The user dismissed the event's activity while it ran: no start of the event brings it back.
    case dismissed
    /// The event ended, was cancelled or was postponed before a planned retry went.
    case eventOver = "event_over"
}

/// How a start reaches its activity's updates (`starts.path`).
public enum StartRoute: String, Sendable, Codable, CaseIterable {
    /// `input-push-channel`: the activity joins the event's channel.
    case channel
    /// A plain start (iOS 17.x): the activity's update token reaches the app.
    case plain
    /// `input-push-token: 1` (iOS 18 with no channel to join): served by mirroring, counted `no_channel`.
    case token
}

/// What the fan-out knows of one audience member when it decides.
public struct StartCandidate: Sendable, Equatable {
    public var installation: Int
    public var os: OSVersion?
    /// The current push-to-start token (nil: none, or refused by APNs).
    public var token: String?
    public var enabled: Bool
    /// It follows the event itself, not only one of its topics.
    public var followsEventDirectly: Bool
    /// A start of this event is sending, accepted or unknown for it (by any run).
    public var startedForEvent: Bool
    /// The app registered an activity of the event in the run's audience round (any state, any push type).
    public var hasActivityOfRound: Bool
    /// The user dismissed an activity of the event while its round ran (`ActivityLifecycle.dismissalIsTheUsers`).
    public var dismissedByUser: Bool
    /// This run's rows for the installation's current token: its state, if any.
    public var runStateForToken: StartState?
    /// When this run's planned start for the current token may go again (nil: at once).
    public var retryAt: Date?
    /// This run has a planned start of the installation (a retry), for whatever token.
    public var hasPlannedStart: Bool
    /// Starts sending, accepted or unknown for it in the last hour, any event.
    public var startsLastHour: Int
    /// Other events, not over, it runs an activity of (started by Marquee, or registered by the app).
    public var concurrentEvents: Int
    /// Other events, not over and overlapping this one, it follows directly and has no activity of yet.
    public var directFollowsWaiting: Int

    public init(
        installation: Int, os: OSVersion?, token: String?, enabled: Bool = true, followsEventDirectly: Bool = true,
        startedForEvent: Bool = false, hasActivityOfRound: Bool = false, dismissedByUser: Bool = false, runStateForToken: StartState? = nil,
        retryAt: Date? = nil, hasPlannedStart: Bool = false, startsLastHour: Int = 0, concurrentEvents: Int = 0, directFollowsWaiting: Int = 0
    ) {
        self.installation = installation
        self.os = os
        self.token = token
        self.enabled = enabled
        self.followsEventDirectly = followsEventDirectly
        self.startedForEvent = startedForEvent
        self.hasActivityOfRound = hasActivityOfRound
        self.dismissedByUser = dismissedByUser
        self.runStateForToken = runStateForToken
        self.retryAt = retryAt
        self.hasPlannedStart = hasPlannedStart
        self.startsLastHour = startsLastHour
        self.concurrentEvents = concurrentEvents
        self.directFollowsWaiting = directFollowsWaiting
    }
}

/// What to do with one member.
public enum StartDecision: Sendable, Equatable {
    /// Nothing: not in the audience (disabled, no token), started already, or settled in this run. (A planned
    /// retry of a member that left the audience is skipped instead, so the run does not wait for it.)
    case none
    /// Record it skipped, with the reason.
    case skip(StartSkipReason)
    /// Leave it for later in this run: its channel may still open, or its retry is not due.
    case wait(until: Date)
    /// Send it now on this route (`channel` carries the event's channel id).
    case send(StartRoute)
}

/// The limits the fan-out observes (serve's flags).
public struct StartLimits: Sendable, Equatable {
    /// `--starts-per-device-hour`: observed by developers, not documented by Apple.
    public var startsPerDeviceHour: Int
    /// `--max-concurrent-activities`: iOS drops starts past its cap, and APNs still answers 200.
    public var maxConcurrentActivities: Int
    /// How long after a 429 a start is tried once more.
    public var throttleRetryDelay: TimeInterval

    public init(startsPerDeviceHour: Int = 8, maxConcurrentActivities: Int = 2, throttleRetryDelay: TimeInterval = 30) {
        self.startsPerDeviceHour = startsPerDeviceHour
        self.maxConcurrentActivities = maxConcurrentActivities
        self.throttleRetryDelay = throttleRetryDelay
    }
}

/// What to write for one start after its answer.
public struct StartAnswerPlan: Sendable, Equatable {
    public var state: StartState
    /// `starts.reason`.
    public var reason: String?
    /// A planned start goes again then.
    public var retryAfter: TimeInterval?
    /// The registry learns of a refused token.
    public var refusal: TokenRefusal?
    /// The whole chunk backs off (500 or 503).
    public var backOffChunk: Bool
    /// The app's credentials were refused: park the app; the chunk waits for the park to end.
    public var parkApp = false
}

/// What a window of starts on the channel asks for once answered. APNs delivers a broadcast to the activities
/// subscribed when it accepts it, so a broadcast accepted while the window was in flight reaches none of the
/// activities the window started after it, and those show the older state the window read before it went.
public enum StartWindowFollowUp: Sendable, Equatable {
    /// Nothing was broadcast since the window's content was read.
    case none
    /// A broadcast of the event is in flight: it may have been accepted before some of the window's starts.
    /// Look again once it is recorded.
    case waitForBroadcast
    /// A broadcast was recorded since the window's content was read (or one stayed in flight past the wait):
    /// the channel broadcasts its last state again, without its alert and at priority 5.
    case broadcastAgain
}

/// The fan-out's decisions.
public struct StartPlanner: Sendable {
    public var limits: StartLimits

    public init(limits: StartLimits = StartLimits()) { self.limits = limits }

    /// What to do with `member` now, given the event's open channel id (nil: none) and when the run's wait
    /// for a channel ends.
    public func decide(_ member: StartCandidate, channelID: String?, channelWaitUntil: Date, now: Date) -> StartDecision {
        guard member.enabled, member.token != nil else { return member.hasPlannedStart ? .skip(.disabled) : .none }
        guard !member.startedForEvent else { return member.hasPlannedStart ? .skip(.startedByAnotherRun) : .none }
        // Sent, answered or skipped in this run already; a newer token is another row.
        if let state = member.runStateForToken, state != .planned { return .none }
        // A duplicate is worse than a missing activity (the app can still start a missing one): these skips stay
        // for the run, and hold back a planned retry too.
        if member.dismissedByUser { return .skip(.dismissed) }
        if member.hasActivityOfRound { return .skip(.hasActivity) }
        if member.runStateForToken == .planned, let retryAt = member.retryAt, retryAt > now { return .wait(until: retryAt) }
        let path = StartPath.decide(os: member.os, channelID: channelID, channelWaitEnded: now >= channelWaitUntil)
        if path == .notStartable { return .skip(.notStartable) }
        if member.startsLastHour >= limits.startsPerDeviceHour { return .skip(.deviceLimit) }
        // Direct follows rank before topic follows: a topic follower keeps room for the events it follows itself.
        let held = member.concurrentEvents + (member.followsEventDirectly ? 0 : member.directFollowsWaiting)
        if held >= limits.maxConcurrentActivities { return .skip(.concurrency) }
        switch path {
        case .channel: return .send(.channel)
        case .plain: return .send(.plain)
        case .tokenRequested: return .send(.token)
        case .waitForChannel: return .wait(until: channelWaitUntil)
        case .notStartable: return .skip(.notStartable)
        }
    }

    /// What a window of starts on the channel asks for once answered: `startedWith` is the aps.timestamp its
    /// starts carried, `channelTimestamp` the channel's last one now, `broadcastInFlight` whether a broadcast of
    /// the event is claimed and unrecorded now, and `waitedOut` whether the wait for one is over.
    public func afterChannelWindow(startedWith: Int64, channelTimestamp: Int64?, broadcastInFlight: Bool, waitedOut: Bool)
        -> StartWindowFollowUp
    {
        if let channelTimestamp, channelTimestamp > startedWith { return .broadcastAgain }
        guard broadcastInFlight else { return .none }
        return waitedOut ? .broadcastAgain : .waitForBroadcast
    }

    /// What a start's answer leads to, for a start on its `attempt`-th send (1 for the first).
    public func afterAnswer(_ verdict: APNsVerdict, attempt: Int) -> StartAnswerPlan {
        func plan(_ events: [StartLifecycle.Event], reason: String? = nil) -> StartAnswerPlan {
            var state = StartState.sending
            for event in events { state = StartLifecycle.transition(from: state, on: event) ?? state }
            return StartAnswerPlan(state: state, reason: reason, retryAfter: nil, refusal: nil, backOffChunk: false)
        }
        switch verdict {
        case .accepted:
            return plan([.accepted])
        case .unknown:
            return plan([.outcomeUnknown])
        case .rejected(let reason, let refusal):
            var rejected = plan([.rejected], reason: reason)
            rejected.refusal = refusal
            return rejected
        case .throttled:
            // One later retry, then skipped: a token APNs throttles twice is not pressed further.
            guard attempt < 2 else { return plan([.notDone, .skipped], reason: StartSkipReason.throttled.rawValue) }
            var again = plan([.notDone], reason: "TooManyRequests")
            again.retryAfter = limits.throttleRetryDelay
            return again
        case .notDone:
            var again = plan([.notDone])
            again.backOffChunk = true
            return again
        case .parkCredentials:
            // Nothing was done, and nothing will be until the app's key works: the start waits for the park.
            var parked = plan([.notDone])
            parked.parkApp = true
            return parked
        }
    }
}

/// What the fan-out knows of a run when it decides the run's next step.
public struct StartRunFacts: Sendable, Equatable {
    public var state: StartRunState
    public var eventStatus: EventStatus
    /// Every chunk of the current pass is cut.
    public var planningDone: Bool
    /// Chunks of the current pass not yet done.
    public var openChunks: Int
    public var nextPassAt: Date?
    /// `endsAt − --late-start-cutoff` (nil: the event has no end; late followers are started while it is not over).
    public var lateStartCutoff: Date?
    public var now: Date

    public init(
        state: StartRunState, eventStatus: EventStatus, planningDone: Bool, openChunks: Int, nextPassAt: Date?, lateStartCutoff: Date?,
        now: Date
    ) {
        self.state = state
        self.eventStatus = eventStatus
        self.planningDone = planningDone
        self.openChunks = openChunks
        self.nextPassAt = nextPassAt
        self.lateStartCutoff = lateStartCutoff
        self.now = now
    }
}

/// A run's next step.
public enum StartRunStep: Sendable, Equatable {
    /// Cut the next chunk of the current pass.
    case cutChunk
    /// Nothing to do until its chunks are done, or until `until`.
    case wait(until: Date?)
    /// A pass is done (the run is `rolling` from now on): the next pass, for late followers, at `nextPassAt`.
    case roll(nextPassAt: Date)
    /// Begin the next pass over the audience, for late followers (it clears `nextPassAt`).
    case beginPass
    /// The run is over, in this state.
    case finish(StartRunState)
}

/// The run-level decisions.
public struct StartRunPlanner: Sendable {
    /// Time between passes for late followers (`--late-start-interval`).
    public var lateStartInterval: TimeInterval

    public init(lateStartInterval: TimeInterval = 60) { self.lateStartInterval = lateStartInterval }

    public func next(_ run: StartRunFacts) -> StartRunStep {
        guard StartRunState.openStates.contains(run.state) else { return .wait(until: nil) }
        let over = [.ending, .ended, .cancelled].contains(run.eventStatus)
        if over {
            let event: StartRunLifecycle.Event = run.eventStatus == .cancelled ? .eventCancelled : .eventEnded
            return .finish(StartRunLifecycle.transition(from: run.state, on: event) ?? .stopped)
        }
        if !run.planningDone { return .cutChunk }
        if run.openChunks > 0 { return .wait(until: nil) }
        guard run.lateStartCutoff.map({ run.now < $0 }) ?? true else {
            return .finish(StartRunLifecycle.transition(from: run.state, on: .cutoffPassed) ?? .done)
        }
        // A pass just ended (the first, or a late one, whose start cleared `nextPassAt`): the next one later.
        guard let next = run.nextPassAt else { return .roll(nextPassAt: run.now.addingTimeInterval(lateStartInterval)) }
        return next > run.now ? .wait(until: next) : .beginPass
    }
}
