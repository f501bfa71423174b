// The decisions of per-activity mirroring, as values (docs/operations.md#mirroring-to-activity-tokens):
// what an APNs answer to a mirrored push does to its token, and where a pass goes next. The mirroring
// service reads the facts, asks these, and performs what they return.
import Foundation

/// Where a mirroring pass stands (`mirror_passes.state`).
public enum MirrorPassState: String, Sendable, Codable, CaseIterable {
    case running
    case done
}

/// What to do for one token after APNs' answer to a mirrored push.
public enum MirrorAnswerPlan: Sendable, Equatable {
    /// Accepted: the token has this aps.timestamp now.
    case served
    /// 429 for this token: it waits, and a later pass tries it again.
    case retryTokenLater(TimeInterval)
    /// 500, 503, or a connection that never carried it: the chunk backs off and sends again.
    case backOffChunk
    /// No answer that can be trusted: a push of the same timestamp is harmless, so a later pass sends it again.
    case sendInALaterPass
    /// A final refusal; the registry learns of a refused token (`refusal`).
    case failed(reason: String, refusal: TokenRefusal?)
    /// The app's credentials were refused: park the app; the token stays behind and the chunk waits for the park.
    case parkApp
}

/// A pass's next step.
public enum MirrorPassStep: Sendable, Equatable {
    case cutChunk
    /// Its chunks are still being sent.
    case wait
    /// Every chunk is done.
    case finish
}

/// A token's priority-10 pushes in its current window.
public struct TokenHighPriorityWindow: Sendable, Equatable {
    /// When the window began (nil: no priority-10 push yet).
    public var startedAt: Date?
    public var count: Int

    public init(startedAt: Date? = nil, count: Int = 0) {
        self.startedAt = startedAt
        self.count = count
    }
}

/// Mirroring's decisions.
public struct MirrorPlanner: Sendable {
    /// How long a token APNs throttled waits.
    public var throttleRetryDelay: TimeInterval
    /// Priority-10 pushes per token per window (`--high-priority-budget`), and for installations with
    /// `frequentPushesEnabled: false` (`--infrequent-high-priority-budget`).
    public var highPriorityBudget: Int
    public var infrequentHighPriorityBudget: Int
    public var window: TimeInterval

    public init(
        throttleRetryDelay: TimeInterval = 30, highPriorityBudget: Int = 30, infrequentHighPriorityBudget: Int = 10, window: TimeInterval = 3600
    ) {
        self.throttleRetryDelay = throttleRetryDelay
        self.highPriorityBudget = highPriorityBudget
        self.infrequentHighPriorityBudget = infrequentHighPriorityBudget
        self.window = window
    }

    /// The priority a mirrored push goes at, for a broadcast sent at `wanted`: priority 10 within the token's
    /// budget, else 5. Returns the window as it stands once the push is accepted.
    public func priority(
        _ wanted: PushPriority, frequentPushes: Bool, window current: TokenHighPriorityWindow, now: Date
    ) -> (priority: PushPriority, windowIfAccepted: TokenHighPriorityWindow) {
        guard wanted == .high else { return (.low, current) }
        var window = current
        if let startedAt = window.startedAt, now.timeIntervalSince(startedAt) < self.window {
            // Within the window.
        } else {
            window = TokenHighPriorityWindow(startedAt: now, count: 0)
        }
        let budget = frequentPushes ? highPriorityBudget : infrequentHighPriorityBudget
        guard window.count < budget else { return (.low, current) }
        window.count += 1
        return (.high, window)
    }

    public func afterAnswer(_ verdict: APNsVerdict) -> MirrorAnswerPlan {
        switch verdict {
        case .accepted: .served
        case .throttled(_, let retryAfter): .retryTokenLater(max(throttleRetryDelay, retryAfter ?? 0))
        case .notDone: .backOffChunk
        case .unknown: .sendInALaterPass
        case .rejected(let reason, let refusal): .failed(reason: reason, refusal: refusal)
        case .parkCredentials: .parkApp
        }
    }

    public func next(planningDone: Bool, openChunks: Int) -> MirrorPassStep {
        if !planningDone { return .cutChunk }
        return openChunks > 0 ? .wait : .finish
    }
}
