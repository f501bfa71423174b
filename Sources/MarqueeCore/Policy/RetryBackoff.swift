import Foundation

/// Exponential backoff with jitter for retryable failures: attempt n waits about base * 2^(n-1),
/// capped, with the upper half of the delay randomized so instances do not retry in step.
public struct RetryBackoff: Sendable, Equatable {
    public var base: TimeInterval
    public var maximum: TimeInterval

    public init(base: TimeInterval = 1, maximum: TimeInterval = 300) {
        self.base = base
        self.maximum = maximum
    }

    /// The delay before retry number `attempt` (1 for the first retry), in [d/2, d].
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> TimeInterval {
        let exponent = Double(min(max(attempt, 1) - 1, 62))
        let full = min(maximum, base * pow(2, exponent))
        return full / 2 + Double.random(in: 0...(full / 2), using: &generator)
    }

    public func delay(attempt: Int) -> TimeInterval {
        var generator = SystemRandomNumberGenerator()
        return delay(attempt: attempt, using: &generator)
    }
}
