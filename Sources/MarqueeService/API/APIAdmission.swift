// Back-pressure: a request that will need the database is refused at the door, before it queues, while the API's
// pool is behind. What is measured is the pool's own queue: how long its oldest waiting request has waited for a
// connection (and, as a bound on memory, how many wait). Past `maxQueueWait` every new keyed request is answered
// 429 with `Retry-After` (503 when the pool's connects fail: the database is down, not busy) and costs neither a
// connection nor a queue slot, so the work already admitted keeps its latency. It is not a fixed rate: a faster
// database or a bigger pool admits more. Open routes (`/healthz`, `/readyz`, `/metrics`) are never refused.
import Foundation
import Postgres

/// Decides, from the load of the API's pool, whether a request is let in (a planner: facts in, a decision out).
public struct AdmissionPolicy: Sendable, Equatable {
    /// What becomes of one request.
    public enum Decision: Sendable, Equatable {
        case admit
        /// 429: the database keeps up with less than is offered.
        case overloaded(retryAfter: Int)
        /// 503: the database cannot be reached.
        case databaseUnavailable(retryAfter: Int)
    }

    /// New requests are refused while the oldest request waiting for a connection has waited this long.
    public var maxQueueWait: Duration
    /// New requests are refused while this many wait for a connection, however briefly (a bound on memory).
    public var maxWaiting: Int
    /// The `Retry-After` of a refusal, in seconds.
    public var retryAfter: Int

    /// `--max-queue-wait`'s default, in seconds.
    public static let defaultMaxQueueWait: TimeInterval = 0.5
    /// Waiting requests at most, per connection of the pool.
    public static let waitingPerConnection = 64

    public init(maxQueueWait: Duration, maxWaiting: Int, retryAfter: Int = 1) {
        self.maxQueueWait = maxQueueWait
        self.maxWaiting = maxWaiting
        self.retryAfter = retryAfter
    }

    /// The policy for a pool of `connections` with `--max-queue-wait` of `seconds`.
    public static func forPool(connections: Int, maxQueueWait seconds: TimeInterval) -> AdmissionPolicy {
        AdmissionPolicy(
            maxQueueWait: .milliseconds(Int64((seconds * 1000).rounded())), maxWaiting: max(1, connections) * waitingPerConnection)
    }

    public func decide(_ load: PostgresPoolLoad) -> Decision {
        let behind = (load.waiting > 0 && load.oldestWait >= maxQueueWait) || load.waiting >= maxWaiting
        guard behind else { return .admit }
        return load.unreachable ? .databaseUnavailable(retryAfter: retryAfter) : .overloaded(retryAfter: retryAfter)
    }
}

/// The API's admission check: a policy and the pool it measures.
public struct APIAdmission: Sendable {
    public let policy: AdmissionPolicy
    private let load: @Sendable () -> PostgresPoolLoad

    public init(policy: AdmissionPolicy, pool: PostgresPool) {
        self.init(policy: policy) { pool.load }
    }

    /// With a load of the caller's (tests).
    public init(policy: AdmissionPolicy, load: @escaping @Sendable () -> PostgresPoolLoad) {
        self.policy = policy
        self.load = load
    }

    /// nil to let the request in, else the refusal to answer.
    func refusal() -> APIError? {
        switch policy.decide(load()) {
        case .admit: nil
        case .overloaded(let seconds): .overloaded(retryAfter: seconds)
        case .databaseUnavailable(let seconds):
            .unavailable("the database cannot be reached; retry later", retryAfter: seconds)
        }
    }
}
