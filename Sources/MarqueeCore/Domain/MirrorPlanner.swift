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
}

/// A pass's next step.
public enum MirrorPassStep: Sendable, Equatable {
    case cutChunk
    /// Its chunks are still being sent.
    case wait
    /// Every chunk is done.
    case finish
}

/// Mirroring's decisions.
public struct MirrorPlanner: Sendable {
    /// How long a token APNs throttled waits.
    public var throttleRetryDelay: TimeInterval

    public init(throttleRetryDelay: TimeInterval = 30) { self.throttleRetryDelay = throttleRetryDelay }

    public func afterAnswer(_ answer: StartAnswer) -> MirrorAnswerPlan {
        switch answer {
        case .accepted: .served
        case .throttled: .retryTokenLater(throttleRetryDelay)
        case .notDone: .backOffChunk
        case .unknown: .sendInALaterPass
        case .rejected(let reason, let refusal): .failed(reason: reason, refusal: refusal)
        }
    }

    public func next(planningDone: Bool, openChunks: Int) -> MirrorPassStep {
        if !planningDone { return .cutChunk }
        return openChunks > 0 ? .wait : .finish
    }
}
