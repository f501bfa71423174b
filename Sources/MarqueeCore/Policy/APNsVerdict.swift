// What happens next after APNs answered one request, or did not (docs/apns.md#errors): read once from the
// outcome (MarqueeService's `APNsExchange.verdict`), for broadcasts, channel requests and device pushes
// alike, so every planner maps from this value alone and no sender reads an answer its own way.
import Foundation

/// The next step after one APNs request.
public enum APNsVerdict: Sendable, Equatable {
    /// 2xx.
    case accepted
    /// Refused for good, with APNs' reason and, for a device push, what it means for the token (nil: not the
    /// token's fault).
    case rejected(reason: String, refusal: TokenRefusal?)
    /// A 403 other than `ExpiredProviderToken` and `UnrelatedKeyIdInToken`: the app's credentials are at fault,
    /// not this request. Park the app's work until they are fixed (docs/operations.md#credentials-faults).
    case parkCredentials(reason: String)
    /// APNs provably did nothing: 500, 503, `TooManyProviderTokenUpdates`, an expired or unrelated token that its
    /// refresh or new connection did not mend, a stream above GOAWAY's last id, or a connection that never carried the
    /// request (refused, a failed TLS handshake, a rejected certificate or ALPN). It may go again, after
    /// `retryAfter` (APNs' Retry-After) or the sender's backoff.
    case notDone(reason: String, retryAfter: TimeInterval?)
    /// 429 `TooManyRequests`: this device token or channel is pushed too often.
    case throttled(reason: String, retryAfter: TimeInterval?)
    /// Written and not answered (a timeout, a reset, a connection lost in flight), or answered with doubt (a
    /// proxy's 502 or 504): APNs may have acted on it.
    case unknown(reason: String)

    /// APNs' reason or the local cause, for logs and records (nil when accepted).
    public var reason: String? {
        switch self {
        case .accepted: nil
        case .rejected(let reason, _), .parkCredentials(let reason), .notDone(let reason, _), .throttled(let reason, _), .unknown(let reason):
            reason
        }
    }
}
