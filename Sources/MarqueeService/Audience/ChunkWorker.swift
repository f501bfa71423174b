// The audience's one worker loop. The start fan-out and mirroring are two jobs of one shape: begin the work that
// came due (start runs; mirroring passes and the token route), advance the open passes (cut their keyset chunks,
// finish them), claim chunks while fewer than `chunksInFlight` are worked here, and work each to an end (finished,
// given back, or backed off) in a task of its own. A turn that fails backs off (the poll interval doubling up to
// 10 s, the first failure and every tenth logged); a chunk that ends, or `wake()`, starts the next turn at once.
import Foundation
import MarqueeCore
import Synchronization

/// The sizes of one chunk job (the start fan-out's, mirroring's), which serve's flags set alike for both
/// (`--start-…` and `--mirror-…`: send window, chunks, chunk size, chunk lease).
public struct ChunkJobSettings: Sendable, Equatable {
    /// Pushes in flight per chunk, marked and recorded together.
    public var sendWindow: Int
    /// Chunks one instance works at once (each holds an audience connection while it marks or records a window).
    public var chunksInFlight: Int
    /// Members (followers, token activities) per chunk.
    public var chunkSize: Int
    /// A chunk's lease in seconds, renewed every window; it ends sooner with its holder's heartbeat.
    public var chunkLease: TimeInterval
    /// Chunks cut ahead of the claims, per pass.
    public var cutAhead = 4

    public init(sendWindow: Int, chunksInFlight: Int = 2, chunkSize: Int = 1000, chunkLease: TimeInterval = 60) {
        self.sendWindow = sendWindow
        self.chunksInFlight = chunksInFlight
        self.chunkSize = chunkSize
        self.chunkLease = chunkLease
    }
}

/// One job of the audience's chunk queue.
protocol ChunkJob: Sendable {
    associatedtype Chunk: Sendable
    /// Creates the passes that came due.
    func beginDueWork() async throws
    /// Advances the open passes: cuts their chunks, rolls or finishes them.
    func advancePasses() async throws
    /// Claims the next due chunk, if any.
    func claimChunk() async throws -> Chunk?
    /// Works the chunk to an end (finished, given back, backed off); it never throws.
    func work(_ chunk: Chunk, shutdown: ShutdownSignal) async
    /// Samples the job's gauges.
    func sample() async throws
}

/// Runs a chunk job until shutdown.
final class ChunkWorker: Sendable {
    let name: String
    let chunksInFlight: Int
    let pollInterval: Duration
    /// How often `beginDueWork` runs (zero: every turn).
    let dueInterval: Duration
    /// How often `sample` runs (zero: every turn).
    let sampleInterval: Duration
    let logger: Logger
    private let wakeup = Wakeup()
    private let working = Mutex(0)

    init(name: String, chunksInFlight: Int, pollInterval: Duration, dueInterval: Duration, sampleInterval: Duration, logger: Logger) {
        self.name = name
        self.chunksInFlight = max(1, chunksInFlight)
        self.pollInterval = pollInterval
        self.dueInterval = dueInterval
        self.sampleInterval = sampleInterval
        self.logger = logger
    }

    /// How long a chunk of a parked app is given back for: until the park's window ends, but looked at again every
    /// 5 s at most, since the park may end sooner (another sender's probe succeeded).
    static func parkedDelay(until: Date, now: Date) -> TimeInterval { max(0.1, min(until.timeIntervalSince(now), 5)) }

    /// The longest wait between two turns that failed.
    static let outageBackoff: Duration = .seconds(2)

    /// Work was made in this process: take a turn now.
    func wake() { wakeup.signal() }

    func run<Job: ChunkJob>(_ job: Job, until shutdown: ShutdownSignal) async {
        let bridge = Task { [wakeup] in
            await shutdown.wait()
            wakeup.signal()
        }
        defer { bridge.cancel() }
        await withDiscardingTaskGroup { group in
            var failures = 0
            var lastDue: ContinuousClock.Instant?
            var lastSample: ContinuousClock.Instant?
            while !shutdown.isTriggered && !Task.isCancelled {
                do {
                    if lastDue.map({ ContinuousClock.now - $0 >= dueInterval }) ?? true {
                        lastDue = .now
                        try await job.beginDueWork()
                    }
                    try await job.advancePasses()
                    while working.withLock({ $0 < chunksInFlight }), !shutdown.isTriggered, let chunk = try await job.claimChunk() {
                        working.withLock { $0 += 1 }
                        group.addTask { [self] in
                            await job.work(chunk, shutdown: shutdown)
                            working.withLock { $0 -= 1 }
                            wakeup.signal()
                        }
                    }
                    if lastSample.map({ ContinuousClock.now - $0 >= sampleInterval }) ?? true {
                        lastSample = .now
                        try await job.sample()
                    }
                    failures = 0
                } catch {
                    failures += 1
                    if failures % 10 == 1 { logger.error("\(name) turn failed", ["error": .string("\(error)"), "failures": .int(failures)]) }
                }
                // While the database is away: back off to 2 s, so the work resumes within that once it is back.
                let wait = failures == 0 ? pollInterval : min(pollInterval * (1 << min(failures, 5)), Self.outageBackoff)
                await wakeup.wait(upTo: wait)
            }
        }
    }
}
