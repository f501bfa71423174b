// A deadline for the APNs work done on behalf of someone who waits: an operator's admin request (reconcile,
// sweep, delete, recreate) must answer within a bound even when APNs cannot be reached, where the client's
// own retries (five attempts of up to 30 s) would hold it for minutes. It is a task-local, so it reaches
// every APNsClient call made below the caller, through the scheduler and its child tasks, with no
// parameter on each; work without one (the dispatcher, the scheduler's own sweeps) keeps the full policy.
import Synchronization

/// A time by which APNs must have answered (`APNsDeadline.$current.withValue(deadline) { ... }`). While one
/// is set, each attempt's timeout is cut to what is left and no retry starts past it; `cutShort` then says so.
public final class APNsDeadline: Sendable {
    /// The deadline of the work in this task, if any.
    @TaskLocal public static var current: APNsDeadline?

    public let instant: ContinuousClock.Instant
    private let cut = Atomic<Bool>(false)

    public init(after duration: Duration) { instant = .now + duration }

    /// True once a request ended without APNs' answer because of the deadline.
    public var cutShort: Bool { cut.load(ordering: .relaxed) }

    /// What is left of the deadline (zero when past).
    var remaining: Duration { max(.zero, instant - .now) }

    func markCutShort() { cut.store(true, ordering: .relaxed) }
}
