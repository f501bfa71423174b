// Back-pressure: a request that will need the database is refused at the door, before it queues, while serve is
// behind. Two things are measured. The API pool's own queue: how long its oldest waiting request has waited for a
// connection (and, as a bound on memory, how many wait); past `maxQueueWait` the database is the bottleneck. And the
// requests in flight against the rate they complete at (Little's law: in flight / rate is how long a new request
// waits on average): past a quarter of `maxQueueWait` of that, the machine's CPU is (two cores shared by the HTTP loop, the handlers and
// PostgreSQL saturate before the pool's queue grows). Either way a new keyed request is answered 429 with
// `Retry-After` (503 when the pool's connects fail: the database is down, not busy) and costs neither a connection
// nor a queue slot, so the work already admitted keeps its latency. It is not a fixed rate: a faster machine, database
// or pool admits more. Open routes (`/healthz`, `/readyz`, `/metrics`) are never refused.
import Foundation
import Postgres
import Synchronization

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

    /// `inFlight` keyed requests are under way, and such requests completed at `completionRate` per second lately.
    public func decide(_ load: PostgresPoolLoad, inFlight: Int = 0, completionRate: Double = 0) -> Decision {
        let seconds = Double(maxQueueWait.components.seconds) + Double(maxQueueWait.components.attoseconds) / 1e18
        // Little's law bounds the mean wait: a quarter of the bound, since on a saturated machine the tail runs at two
        // to three times the mean. However slowly requests complete (an idle server has no rate yet), `maxWaiting` may
        // be in flight.
        let inFlightLimit = max(Double(maxWaiting), completionRate * seconds / 4)
        let behind =
            (load.waiting > 0 && load.oldestWait >= maxQueueWait) || load.waiting >= maxWaiting || Double(inFlight) >= inFlightLimit
        guard behind else { return .admit }
        return load.unreachable ? .databaseUnavailable(retryAfter: retryAfter) : .overloaded(retryAfter: retryAfter)
    }
}

/// The API's admission check: a policy, the pool it measures, and the keyed requests in flight and their rate.
public struct APIAdmission: Sendable {
    public let policy: AdmissionPolicy
    private let load: @Sendable () -> PostgresPoolLoad
    private let flow = RequestFlow()

    public init(policy: AdmissionPolicy, pool: PostgresPool) {
        self.init(policy: policy) { pool.load }
    }

    /// With a load of the caller's (tests).
    public init(policy: AdmissionPolicy, load: @escaping @Sendable () -> PostgresPoolLoad) {
        self.policy = policy
        self.load = load
    }

    /// nil to let the request in (then `finished()` must follow its answer), else the refusal to answer.
    func refusal() -> APIError? {
        let (inFlight, rate) = flow.reading()
        switch policy.decide(load(), inFlight: inFlight, completionRate: rate) {
        case .admit:
            flow.started()
            return nil
        case .overloaded(let seconds): return APIError.overloaded(retryAfter: seconds)
        case .databaseUnavailable(let seconds):
            return APIError.unavailable("the database cannot be reached; retry later", retryAfter: seconds)
        }
    }

    /// An admitted request was answered.
    func finished() { flow.finished() }
}

/// Keyed requests in flight, and the rate they complete at, over windows of a quarter second (smoothed).
final class RequestFlow: Sendable {
    private struct State {
        var inFlight = 0
        var completed = 0
        var windowStart = ContinuousClock.now
        var rate = 0.0
    }

    private let state = Mutex(State())
    private static let window: Duration = .milliseconds(250)

    func reading() -> (inFlight: Int, rate: Double) { state.withLock { ($0.inFlight, $0.rate) } }

    func started() { state.withLock { $0.inFlight += 1 } }

    func finished() {
        let now = ContinuousClock.now
        state.withLock { state in
            state.inFlight -= 1
            state.completed += 1
            let elapsed = now - state.windowStart
            guard elapsed >= Self.window else { return }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let latest = Double(state.completed) / seconds
            state.rate = state.rate == 0 ? latest : 0.7 * state.rate + 0.3 * latest
            state.completed = 0
            state.windowStart = now
        }
    }
}
