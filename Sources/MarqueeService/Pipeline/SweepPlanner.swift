// The channel scheduler's decisions, as values: which lifecycle step each piece of due work asks for
// (`SweepPlanner.plan`), and what APNs' answer to a create or a delete means (`ChannelAnswer`). No I/O:
// the scheduler reads the due work (ChannelRepository.dueWork), asks, and `ChannelRequests` performs.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore

/// A lifecycle step for one channel: the state read, the state it moves to, and the action to perform.
struct ChannelStep: Sendable {
    var channel: ChannelRecord
    var before: ChannelLifecycle
    var after: ChannelLifecycle
    var action: ChannelLifecycle.Action
}

/// What one read of due work asks for, in the order a sweep performs it.
struct SweepPlan: Sendable {
    /// Events past their end and grace: queue an `end`.
    var eventsToEnd: [EventRecord] = []
    /// Ending events no channel can carry: end them without one.
    var endsWithoutChannel: [EventRecord] = []
    /// Events within their lead time without a channel: plan one (then `createSteps(for:)`).
    var channelsToPlan: [EventRecord] = []
    /// Planned channels to create, admitted one at a time against the quota, then sent together.
    var creates: [ChannelStep] = []
    /// Creates and deletes whose backoff elapsed.
    var retries: [ChannelStep] = []
    /// Apps whose unresolved creates a reconcile settles, with those channels.
    var reconciles: [(appID: Int, unresolved: [ChannelRecord])] = []
    /// Ended channels past the delete delay.
    var deletions: [ChannelStep] = []
    /// Rows the read returned in a state their kind of work does not apply to (a writer moved them since).
    var skipped: [(channel: ChannelRecord, error: ChannelLifecycleError)] = []
}

enum SweepPlanner {
    /// The steps a read of due work asks for.
    static func plan(_ work: SchedulerWork) -> SweepPlan {
        var plan = SweepPlan()
        plan.eventsToEnd = work.eventsToEnd
        plan.endsWithoutChannel = work.endsWithoutChannel
        plan.channelsToPlan = work.eventsNeedingChannel
        plan.creates = steps(work.plannedChannels, .leadTimeReached, into: &plan.skipped)
        plan.retries = steps(work.retriesDue, .retryDue, into: &plan.skipped)
        let unresolved = Dictionary(grouping: work.unresolvedCreates, by: \.appID)
        plan.reconciles = unresolved.keys.sorted().map { ($0, unresolved[$0]!) }
        plan.deletions = steps(work.deletionsDue, .deleteDelayElapsed, into: &plan.skipped)
        return plan
    }

    /// The create steps of channels planned during the sweep (they join the read's planned ones).
    static func createSteps(for planned: [ChannelRecord]) -> SweepPlan {
        var plan = SweepPlan()
        plan.creates = steps(planned, .leadTimeReached, into: &plan.skipped)
        return plan
    }

    /// Each channel's step for `event`; a step whose action is `.nothing` needs no request and is left out.
    private static func steps(
        _ channels: [ChannelRecord], _ event: ChannelLifecycle.Event,
        into skipped: inout [(channel: ChannelRecord, error: ChannelLifecycleError)]
    ) -> [ChannelStep] {
        channels.compactMap { channel -> ChannelStep? in
            guard let before = channel.lifecycle else { return nil }  // unknown channels have no lifecycle
            var after = before
            do throws(ChannelLifecycleError) {
                let action = try after.handle(event)
                return action == .nothing ? nil : ChannelStep(channel: channel, before: before, after: after, action: action)
            } catch {
                skipped.append((channel, error))
                return nil
            }
        }
    }
}

/// What APNs' answer to a channel create means, read from the outcome's verdict.
enum CreateAnswer: Sendable, Equatable {
    /// 201 with the channel's id.
    case opened(apnsChannelID: String)
    /// CannotCreateChannelConfig: the app's quota at APNs is spent; wait, do not count it a failure.
    case quotaExhausted
    /// Refused for good (FeatureNotEnabled, a malformed answer...): an operator must act.
    case refusedForGood(String)
    /// The app's credentials were refused, for this reason: park the app, keep the create as a retry.
    case parkApp(reason: String)
    /// Written and unanswered (timeout, reset, connection lost in flight): APNs may have made the channel.
    case unknown(String)
    /// Proven not done (429, 500, 503, a request never written, a connection that never carried it): try again
    /// after this many seconds.
    case retry(String, after: TimeInterval)

    /// Reads an outcome; `backoff` is the delay of the next attempt, raised to APNs' Retry-After.
    init(_ outcome: APNsExchange, backoff: TimeInterval) {
        let failure = outcome.failure.map { "\($0)" } ?? "unknown"
        switch outcome.verdict {
        case .accepted:
            if let id = outcome.acceptance?.channelID?.value { self = .opened(apnsChannelID: id) } else { self = .refusedForGood("no channel id") }
        case .rejected(let reason, _) where reason == APNsReason.cannotCreateChannelConfig.text: self = .quotaExhausted
        case .rejected: self = .refusedForGood(failure)
        case .parkCredentials(let reason): self = .parkApp(reason: reason)
        case .unknown: self = .unknown(failure)
        case .notDone(_, let retryAfter), .throttled(_, let retryAfter): self = .retry(failure, after: max(backoff, retryAfter ?? 0))
        }
    }
}

/// What APNs' answer to a channel delete means, read from the outcome's verdict.
enum DeleteAnswer: Sendable, Equatable {
    /// 204: gone.
    case deleted
    /// ChannelNotRegistered: gone already (or never known).
    case notRegistered
    /// The app's credentials were refused, for this reason: park the app, keep the delete as a retry.
    case parkApp(reason: String)
    /// Anything else: try again after this many seconds (a delete is safe to repeat).
    case retry(String, after: TimeInterval)

    init(_ outcome: APNsExchange, backoff: TimeInterval) {
        let failure = outcome.failure.map { "\($0)" } ?? "unknown"
        switch outcome.verdict {
        case .accepted: self = .deleted
        case .rejected(let reason, _) where reason == APNsReason.channelNotRegistered.text: self = .notRegistered
        case .parkCredentials(let reason): self = .parkApp(reason: reason)
        case .notDone(_, let retryAfter), .throttled(_, let retryAfter): self = .retry(failure, after: max(backoff, retryAfter ?? 0))
        case .rejected, .unknown: self = .retry(failure, after: backoff)
        }
    }
}
