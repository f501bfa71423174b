// What Marquee does when APNs refuses an app's credentials (a 403 other than ExpiredProviderToken): the
// fault is the app's, not the request's, so retrying each request with its own backoff would only repeat the
// refusal for every channel at once. The app's work is parked instead: nothing is sent for it until
// `retryAt`, 5 minutes after the first refusal and doubling with each window that ends in another, up to an
// hour. When a window ends, one request takes the probe and goes while the rest wait for it (`probeUntil`):
// the first success ends the park, a refusal starts the next window.
import Foundation

/// How long an app's work waits after its credentials were refused.
public struct CredentialsParkPolicy: Sendable, Equatable {
    /// The first park; default 5 min.
    public var base: TimeInterval
    /// The longest park; default 1 h.
    public var maximum: TimeInterval

    public init(base: TimeInterval = 300, maximum: TimeInterval = 3600) {
        self.base = max(0, base)
        self.maximum = max(self.base, maximum)
    }

    /// The park after the `strike`-th window that ended in a refusal (from 1).
    public func delay(strike: Int) -> TimeInterval {
        min(maximum, base * pow(2, Double(max(0, min(strike, 40) - 1))))
    }
}

/// An app parked for a credentials fault.
public struct CredentialsPark: Sendable, Equatable {
    /// APNs' reason for the refusal (InvalidProviderToken, ...), the last one seen.
    public var reason: String
    /// When the first refusal of this park was seen.
    public var since: Date
    /// Windows that ended in a refusal.
    public var strikes: Int
    /// Nothing is sent for the app before this.
    public var retryAt: Date
    /// When the last refusal was seen.
    public var lastAt: Date
    /// The window ended and one request went to find out whether the credentials work now; the rest wait for
    /// its answer until this time (after which another may try).
    public var probeUntil: Date?

    public init(reason: String, since: Date, strikes: Int, retryAt: Date, lastAt: Date, probeUntil: Date? = nil) {
        self.reason = reason
        self.since = since
        self.strikes = strikes
        self.retryAt = retryAt
        self.lastAt = lastAt
        self.probeUntil = probeUntil
    }

    /// Whether the window is still running at `now` (a refusal now adds no strike).
    public func holds(at now: Date) -> Bool { retryAt > now }

    /// Until when the app's work waits at `now`: the window's end, or a probe's answer; nil when the window
    /// ended and no probe is out (the next request may take it).
    public func waits(at now: Date) -> Date? {
        if retryAt > now { return retryAt }
        if let probeUntil, probeUntil > now { return probeUntil }
        return nil
    }

    /// The park after a refusal seen at `now`. Refusals of requests already in flight when the app was parked
    /// (several channels, several instances) fall inside the current window and do not add a strike; the first
    /// refusal after the window ends adds one.
    public static func after(
        _ current: CredentialsPark?, refusal reason: String, at now: Date,
        policy: CredentialsParkPolicy
    ) -> CredentialsPark {
        guard var park = current else {
            return CredentialsPark(
                reason: reason, since: now, strikes: 1, retryAt: now.addingTimeInterval(policy.delay(strike: 1)),
                lastAt: now)
        }
        park.reason = reason
        park.lastAt = now
        park.probeUntil = nil
        if !park.holds(at: now) {
            park.strikes += 1
            park.retryAt = now.addingTimeInterval(policy.delay(strike: park.strikes))
        }
        return park
    }
}
