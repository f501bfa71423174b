// The dispatcher's decisions for one claim, as values: what to do with a claimed outbox row given what is
// known (`plan`), and what an APNs answer asks for (`afterAnswer`). No I/O here: the dispatcher reads the
// facts (the claim, its channel's memory, the content-state schema), asks, and performs the plan. In order:
// conflation (at most one broadcast per channel per interval unless urgent), the payload (the newest state,
// its own alert or the newest carried one, the carried alert dropped when it would not fit 5,120 bytes; the
// stale date, relevance and dismissal of the event's `FreshnessPolicy` at the send time), a
// strictly increasing aps.timestamp, and the priority (auto: 10 for an alert or a significant change,
// within the channel's hourly budget).
import APNs
import Foundation
import MarqueeCore
import MarqueeStore

/// What the dispatcher knows about a claim when it plans it.
struct ClaimFacts: Sendable {
    var claim: ClaimedBroadcast
    /// What this instance remembers of the channel (trusted only while its aps.timestamp matches the claim's),
    /// or what was rebuilt from the database.
    var memory: ChannelMemory?
    /// The event's content-state schema (its `significant` fields), when known.
    var schema: ObjectSchema?
    var now: Date
    /// The service is stopping: give the row back rather than send.
    var stopping: Bool
}

/// A broadcast ready to send, and what it changes in the channel's memory once APNs accepts it.
struct PlannedBroadcast: Sendable, Equatable {
    var body: [UInt8]
    var apsTimestamp: Int64
    var priority: PushPriority
    /// Wanted 10, sent 5: the channel's hourly budget is spent.
    var downgraded: Bool
    /// A carried alert did not fit the broadcast limit and was left out.
    var droppedAlert: Bool
    /// The body has an alert (the channel's alert boost runs from its acceptance).
    var carriesAlert: Bool { alertUpdateID != nil }
    /// The update whose alert the body carries: the one sent, or an older pending one it conflates (nil: none).
    var alertUpdateID: Int?
    /// The channel's budget with this send counted (stored in its memory once accepted).
    var budget: HighPriorityBudget
    /// Pending updates older than the one sent, which become conflated.
    var conflated: Int
}

/// What to do with a claim.
enum ClaimPlan: Sendable, Equatable {
    /// Too soon after the channel's last broadcast: give the row back, due after this many seconds.
    case postpone(by: TimeInterval)
    /// Give the row back unsent now (the service is stopping).
    case release
    /// The payload cannot be made to fit: record the refusal, send nothing.
    case refuse(String)
    case send(PlannedBroadcast)
}

/// What an APNs answer to a broadcast asks for.
enum BroadcastAnswerPlan: Sendable, Equatable {
    /// Accepted: record the broadcast (the channel's memory follows).
    case record
    /// ChannelNotRegistered: the channel is lost, broadcasting stops.
    case channelLost
    /// Refused for good: record it, do not retry.
    case reject(reason: String)
    /// The app's credentials were refused, for this reason: park the app (`CredentialsParking`), the row waits for it.
    case parkApp(reason: String)
    /// Transient: record it, try again after this many seconds.
    case retry(after: TimeInterval)
}

/// The dispatcher's policy for one claim.
struct BroadcastClaimPlanner: Sendable {
    var conflation: ConflationPolicy
    var highPriorityBudget: Int
    var highPriorityWindow: TimeInterval

    func plan(_ facts: ClaimFacts) -> ClaimPlan {
        let claim = facts.claim
        let pending: [(id: Int, priority: RequestedPriority, alert: JSONValue?)] =
            claim.pending.isEmpty
            ? [(claim.update.id, claim.update.priority, claim.update.alert)]
            : claim.pending.map { ($0.id, $0.priority, $0.alert) }
        let decision = conflation.decide(
            pending: pending.map { PendingBroadcast(id: $0.id, isHighPriority: $0.priority == .high, hasAlert: $0.alert != nil) },
            lastSentAt: facts.memory?.lastSentAt ?? claim.lastBroadcastAt, now: facts.now)
        var alertFrom: Int?
        var wantsHighPriority = claim.update.priority == .high
        switch decision {
        case .wait(let until): return .postpone(by: max(0.01, until.timeIntervalSince(facts.now)))
        case .send(let plan):
            alertFrom = plan.alertFrom
            wantsHighPriority = plan.wantsHighPriority
        case .idle: break
        }
        if facts.stopping { return .release }

        // The update's own alert, else the one the conflation carries from an older pending update.
        let alertSource: (updateID: Int, json: JSONValue)? =
            claim.update.alert.map { (claim.update.id, $0) }
            ?? alertFrom.flatMap { id in pending.first { $0.id == id }?.alert.map { (id, $0) } }
        let alert = alertSource.flatMap { try? LiveActivityAlert(json: $0.json) }
        // The claim's own timestamp (the same on a send repeated after a crash), unless this instance
        // remembers sending a later one.
        let apsTimestamp =
            claim.apsTimestamp.map { max($0, (facts.memory?.lastApsTimestamp ?? 0) + 1) }
            ?? TimestampSequencer.next(
                after: [claim.lastApsTimestamp, facts.memory?.lastApsTimestamp].compactMap { $0 }.max(),
                now: facts.now)
        let composed = Self.compose(claim, alert: alert, apsTimestamp: apsTimestamp, sentAt: facts.now)
        guard let body = composed.body else { return .refuse("payload over \(PayloadLimit.broadcast.rawValue) bytes") }

        let requested: RequestedPriority = wantsHighPriority ? .high : claim.update.priority
        let significant =
            requested == .auto && !composed.hasAlert
            && facts.schema.map {
                !$0.significantChanges(from: facts.memory?.lastState, to: claim.update.contentState).isEmpty
            } == true
        let wanted = PushPriority.wanted(for: requested, hasAlert: composed.hasAlert, changesSignificantField: significant)
        var budget = facts.memory?.budget ?? HighPriorityBudget(limit: highPriorityBudget, window: highPriorityWindow)
        let priority = budget.admit(wanted, now: facts.now)
        return .send(
            PlannedBroadcast(
                body: body, apsTimestamp: apsTimestamp, priority: priority.priority, downgraded: priority.downgraded,
                droppedAlert: composed.droppedAlert,
                alertUpdateID: composed.hasAlert ? alertSource?.updateID : nil, budget: budget,
                conflated: pending.count(where: { $0.id < claim.update.id })))
    }

    /// What the answer to a broadcast asks for; `retryDelay` is the backoff of the claim's next attempt. A
    /// broadcast is safe to repeat (the same aps.timestamp), so no answer leaves it unknown.
    func afterAnswer(_ verdict: APNsVerdict, retryDelay: TimeInterval) -> BroadcastAnswerPlan {
        switch verdict {
        case .accepted: return .record
        case .rejected(let reason, _) where reason == APNsReason.channelNotRegistered.text: return .channelLost
        case .rejected(let reason, _): return .reject(reason: reason)
        case .parkCredentials(let reason): return .parkApp(reason: reason)
        case .notDone(_, let retryAfter), .throttled(_, let retryAfter):
            // 429, 500, 503, an expired token that a refresh did not mend, a request that never left.
            return .retry(after: max(retryDelay, retryAfter ?? 0))
        case .unknown:
            return .retry(after: retryDelay)
        }
    }

    /// The body within 5,120 bytes, sent at `sentAt`; a carried alert is dropped when it would not fit.
    static func compose(_ claim: ClaimedBroadcast, alert: LiveActivityAlert?, apsTimestamp: Int64, sentAt: Date)
        -> (body: [UInt8]?, hasAlert: Bool, droppedAlert: Bool)
    {
        let update = claim.update
        func payload(_ alert: LiveActivityAlert?) -> LiveActivityPayload {
            let fields = claim.freshness.fields(
                for: update.action,
                explicit: SendTimeFields(staleDate: update.staleDate, relevanceScore: update.relevanceScore, dismissalDate: update.dismissalDate),
                carriesAlert: alert != nil, lastAlertAt: claim.lastAlertAt, sentAt: sentAt)
            return LiveActivityPayload(
                action: update.action, timestamp: apsTimestamp, contentState: update.contentState, fields: fields, alert: alert)
        }
        if let body = try? payload(alert).body(within: .broadcast) { return (body, alert != nil, false) }
        guard alert != nil, let body = try? payload(nil).body(within: .broadcast) else { return (nil, false, false) }
        return (body, false, true)
    }
}

/// What this instance knows about a channel it sent on.
struct ChannelMemory: Sendable, Equatable {
    var lastApsTimestamp: Int64?
    /// The content-state of the last broadcast (the baseline of `significantChanges`).
    var lastState: JSONValue?
    /// When this instance's last broadcast on it was accepted (clock time).
    var lastSentAt: Date?
    var budget: HighPriorityBudget
}

/// Channel memories, valid only while the stored aps.timestamp matches the claim's.
struct ChannelMemoryTable: Sendable {
    let capacity: Int
    private var entries: [Int: ChannelMemory] = [:]

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func entry(channelID: Int, lastApsTimestamp: Int64?) -> ChannelMemory? {
        guard let entry = entries[channelID], entry.lastApsTimestamp == lastApsTimestamp else { return nil }
        return entry
    }

    mutating func store(channelID: Int, _ memory: ChannelMemory) {
        if entries[channelID] == nil && entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
        entries[channelID] = memory
    }

    mutating func forget(channelID: Int) { entries[channelID] = nil }
}
