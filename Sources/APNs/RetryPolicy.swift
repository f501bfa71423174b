// How many times and how long to wait: bounded attempts, exponential backoff with full jitter
// (delay drawn uniformly from 0 up to base·2^(attempt-1), capped). A permanent rejection is never retried,
// and an expired provider token is refreshed at most once per request.

/// What to do after an attempt.
public enum RetryAction: Sendable, Hashable {
    /// The request was accepted.
    case done
    /// Stop and report the failure: permanent, or out of attempts.
    case giveUp
    /// Wait, then send again on the same connection.
    case retry(after: Duration)
    /// Refresh the provider token (`ProviderTokenSigner.tokenAfterExpiry`), then send again at once.
    case refreshTokenAndRetry
    /// Open a new connection, wait, then send again.
    case reconnectAndRetry(after: Duration)
}

/// Bounded retries with exponential backoff and full jitter.
public struct RetryPolicy: Sendable, Hashable {
    /// Sends per request, the first included.
    public var maxAttempts: Int
    /// Upper bound of the first backoff; doubles each attempt.
    public var baseDelay: Duration
    /// Cap on any backoff, including an honoured `retry-after`.
    public var maxDelay: Duration

    public init(maxAttempts: Int = 5, baseDelay: Duration = .milliseconds(200), maxDelay: Duration = .seconds(30)) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = max(baseDelay, maxDelay)
    }

    /// The action after attempt number `attempt` (1 for the first send) ended with `result`.
    /// `tokenRefreshed` says whether this request already refreshed its token once.
    public func action(
        after result: APNsResult, attempt: Int, tokenRefreshed: Bool, random: inout some RandomNumberGenerator
    ) -> RetryAction {
        let hasAttemptsLeft = attempt < maxAttempts
        switch result {
        case .accepted: return .done
        case .rejected, .credentialsFault: return .giveUp
        case .refreshTokenAndRetry:
            return hasAttemptsLeft && !tokenRefreshed ? .refreshTokenAndRetry : .giveUp
        case .retryAfterBackoff(let failure), .tokenUpdatesTooFrequent(let failure):
            guard hasAttemptsLeft else { return .giveUp }
            var delay = backoff(attempt: attempt, random: &random)
            if let seconds = failure.retryAfterSeconds, seconds > 0 {
                delay = min(maxDelay, max(delay, .seconds(seconds)))
            }
            return .retry(after: delay)
        case .reconnect:
            return hasAttemptsLeft ? .reconnectAndRetry(after: backoff(attempt: attempt, random: &random)) : .giveUp
        }
    }

    /// A delay drawn uniformly from 0 up to min(maxDelay, baseDelay·2^(attempt-1)).
    public func backoff(attempt: Int, random: inout some RandomNumberGenerator) -> Duration {
        let ceiling = min(maxDelay, baseDelay * (1 << min(max(attempt - 1, 0), 30)))
        let nanoseconds = ceiling.nanoseconds
        guard nanoseconds > 0 else { return .zero }
        return .nanoseconds(Int64.random(in: 0...nanoseconds, using: &random))
    }
}

/// One request's retry bookkeeping: call `next(after:)` with each result and do what it says.
public struct RetryState: Sendable {
    public let policy: RetryPolicy
    /// The number of the attempt whose result comes next (1 for the first send).
    public private(set) var attempt = 1
    public private(set) var tokenRefreshed = false

    public init(policy: RetryPolicy = RetryPolicy()) { self.policy = policy }

    /// Records `result` and returns what to do; counts the next attempt when the action sends again.
    public mutating func next(after result: APNsResult, random: inout some RandomNumberGenerator) -> RetryAction {
        let action = policy.action(after: result, attempt: attempt, tokenRefreshed: tokenRefreshed, random: &random)
        switch action {
        case .done, .giveUp: break
        case .refreshTokenAndRetry:
            tokenRefreshed = true
            attempt += 1
        case .retry, .reconnectAndRetry:
            attempt += 1
        }
        return action
    }

    /// Same, with the system's random numbers.
    public mutating func next(after result: APNsResult) -> RetryAction {
        var random = SystemRandomNumberGenerator()
        return next(after: result, random: &random)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
