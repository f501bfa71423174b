import APNs
import Testing

/// A seeded generator (SplitMix64) so jitter is reproducible.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}

@Suite struct RetryPolicyTests {
    let serverError = APNsResult(response: APNsResponse(status: 503, body: Array(#"{"reason":"ServiceUnavailable"}"#.utf8)), operation: .broadcast)
    let expired = APNsResult(response: APNsResponse(status: 403, body: Array(#"{"reason":"ExpiredProviderToken"}"#.utf8)), operation: .broadcast)
    let tooFrequent = APNsResult(
        response: APNsResponse(status: 429, body: Array(#"{"reason":"TooManyProviderTokenUpdates"}"#.utf8)), operation: .broadcast)
    let rejected = APNsResult(response: APNsResponse(status: 400, body: Array(#"{"reason":"BadChannelId"}"#.utf8)), operation: .broadcast)
    let accepted = APNsResult(response: APNsResponse(status: 200), operation: .broadcast)
    let goaway = APNsResult(goawayDebugData: [])

    @Test func acceptedIsDoneAndPermanentIsNeverRetried() {
        var random = SeededRandom(state: 1)
        let policy = RetryPolicy()
        for attempt in 1...3 {
            #expect(policy.action(after: accepted, attempt: attempt, tokenRefreshed: false, random: &random) == .done)
            #expect(policy.action(after: rejected, attempt: attempt, tokenRefreshed: false, random: &random) == .giveUp)
        }
        var state = RetryState()
        #expect(state.next(after: rejected) == .giveUp)
        #expect(state.attempt == 1)
    }

    @Test func transientFailuresRetryWithinBoundsThenGiveUp() {
        let policy = RetryPolicy(maxAttempts: 4, baseDelay: .milliseconds(100), maxDelay: .seconds(1))
        var state = RetryState(policy: policy)
        var random = SeededRandom(state: 42)
        var delays: [Duration] = []
        while case .retry(let delay) = state.next(after: serverError, random: &random) {
            delays.append(delay)
        }
        #expect(delays.count == 3)
        #expect(state.attempt == 4)
        #expect(state.next(after: serverError, random: &random) == .giveUp)
        #expect(state.next(after: APNsResult(transportFailure: .timeout), random: &random) == .giveUp)
    }

    @Test func backoffIsExponentialWithFullJitterAndCapped() {
        let policy = RetryPolicy(maxAttempts: 20, baseDelay: .milliseconds(100), maxDelay: .seconds(2))
        var random = SeededRandom(state: 7)
        for attempt in 1...12 {
            let ceiling = min(Duration.seconds(2), .milliseconds(100) * (1 << (attempt - 1)))
            var seen = Set<Duration>()
            for _ in 0..<200 {
                let delay = policy.backoff(attempt: attempt, random: &random)
                #expect(delay >= .zero && delay <= ceiling, "attempt \(attempt): \(delay) > \(ceiling)")
                seen.insert(delay)
            }
            #expect(seen.count > 100, "jitter should spread delays")
            // Full jitter reaches into the upper half of the window.
            #expect(seen.contains { $0 > ceiling / 2 })
        }
        var a = SeededRandom(state: 9)
        var b = SeededRandom(state: 9)
        #expect(policy.backoff(attempt: 3, random: &a) == policy.backoff(attempt: 3, random: &b))
    }

    @Test func expiredTokenRefreshesAtMostOncePerRequest() {
        var state = RetryState()
        var random = SeededRandom(state: 3)
        #expect(state.next(after: expired, random: &random) == .refreshTokenAndRetry)
        #expect(state.tokenRefreshed)
        #expect(state.attempt == 2)
        #expect(state.next(after: expired, random: &random) == .giveUp)

        // A refresh still possible after transient failures, but only once.
        var other = RetryState()
        guard case .retry = other.next(after: serverError, random: &random) else {
            Issue.record("expected retry")
            return
        }
        #expect(other.next(after: expired, random: &random) == .refreshTokenAndRetry)
        guard case .retry = other.next(after: serverError, random: &random) else {
            Issue.record("expected retry")
            return
        }
        #expect(other.next(after: expired, random: &random) == .giveUp)

        // Out of attempts: no refresh either.
        var last = RetryState(policy: RetryPolicy(maxAttempts: 1))
        #expect(last.next(after: expired, random: &random) == .giveUp)
    }

    @Test func tooManyTokenUpdatesBacksOffWithoutRefreshing() {
        var state = RetryState()
        var random = SeededRandom(state: 5)
        for _ in 1..<state.policy.maxAttempts {
            guard case .retry = state.next(after: tooFrequent, random: &random) else {
                Issue.record("TooManyProviderTokenUpdates must back off and retry, never refresh")
                return
            }
        }
        #expect(!state.tokenRefreshed)
        #expect(state.next(after: tooFrequent, random: &random) == .giveUp)
    }

    @Test func goawayReconnects() {
        var state = RetryState(policy: RetryPolicy(maxAttempts: 2))
        var random = SeededRandom(state: 11)
        guard case .reconnectAndRetry(let delay) = state.next(after: goaway, random: &random) else {
            Issue.record("GOAWAY must reconnect")
            return
        }
        #expect(delay <= RetryPolicy().baseDelay)
        #expect(state.next(after: goaway, random: &random) == .giveUp)
    }

    @Test func retryAfterIsHonouredUpToTheCap() {
        let policy = RetryPolicy(maxAttempts: 3, baseDelay: .milliseconds(100), maxDelay: .seconds(10))
        var random = SeededRandom(state: 13)
        func throttled(_ seconds: String) -> APNsResult {
            APNsResult(
                response: APNsResponse(
                    status: 429, headers: ["retry-after": seconds],
                    body: Array(#"{"reason":"TooManyRequests"}"#.utf8)), operation: .broadcast)
        }
        #expect(policy.action(after: throttled("3"), attempt: 1, tokenRefreshed: false, random: &random) == .retry(after: .seconds(3)))
        #expect(policy.action(after: throttled("60"), attempt: 1, tokenRefreshed: false, random: &random) == .retry(after: .seconds(10)))
    }
}
