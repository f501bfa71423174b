// Per-activity mirroring: every broadcast of an event also reaches the event's `token` activities (devices
// below iOS 18, or started without a channel) as device pushes (docs/operations.md#mirroring-to-activity-tokens).
// An event with no channel that broadcasts reaches them too: each turn first takes such events' outbox work by
// the token route (TokenRouteRepository), whose newest state is then mirrored as a broadcast would be.
// Every instance runs it. Its loop begins a pass for each event with a token activity behind its newest
// broadcast, advances the running passes (cuts keyset chunks of activities, finishes them), and claims
// chunks. A chunk takes the newest broadcast at its claim, so tokens still waiting get a state accepted
// during the pass, and sends only to tokens behind it, so a timestamp never goes back; tokens served with an
// older state get the newer one in the next pass. A new token activity (a catch-up) is behind too.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Mirroring's metrics.
public struct MirrorMetrics: Sendable {
    /// Mirrored pushes by `result` (accepted, retry, failed, unknown) and `reason`.
    public let pushes: Counter
    /// Seconds from a broadcast's ingest to the end of the pass that mirrored it to every token behind it.
    public let lag: Histogram
    /// Passes running (sampled).
    public let backlog: Gauge

    public init(registry: MetricsRegistry) {
        pushes = registry.counter(
            "marquee_mirrored_pushes_total", help: "Device pushes mirroring broadcasts to activity tokens, by result and reason.",
            labels: ["result", "reason"])
        lag = registry.histogram(
            "marquee_mirroring_lag_seconds", help: "Seconds from a broadcast's ingest to the end of the pass that mirrored it.",
            buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300])
        backlog = registry.gauge("marquee_mirror_passes_running", help: "Mirroring passes running.")
    }
}

/// Mirrors broadcasts to activity tokens.
public final class MirrorService: Service, ChunkJob {
    public let name = "mirroring"
    private let instance: String
    private let repository: MirrorRepository
    private let tokenRoute: TokenRouteRepository
    private let hygiene: TokenHygieneRepository
    private let apns: any DevicePushAPNs
    private let metrics: MirrorMetrics
    private let logger: Logger
    private let planner: MirrorPlanner
    private let expiration: ExpirationPolicy
    /// The audience's worker loop, running this job.
    private let worker: ChunkWorker
    /// Tokens per chunk, pushes in flight per chunk, chunks per instance, chunks cut ahead, a chunk's lease.
    private let settings: ChunkJobSettings
    private let pollInterval: Duration
    private let chunkBackoff = RetryBackoff(base: 1, maximum: 60)
    private let retryPolicy = RetryPolicy(maxAttempts: 3, baseDelay: .milliseconds(200), maxDelay: .seconds(5))
    /// The apps parked for a credentials fault, shared with the other senders (nil: none kept).
    private let parking: CredentialsParking?
    private let clock: any WallClock
    private let clockDrivesDatabase: Bool
    /// The clock's time for the statements when it drives the database's (tests), else nil (the database's).
    private var databaseNow: Date? { clockDrivesDatabase ? clock.now : nil }

    public init(
        pool: PostgresPool, apns: any DevicePushAPNs, instance: String, expiration: ExpirationPolicy, settings: ChunkJobSettings,
        planner: MirrorPlanner = MirrorPlanner(), pollInterval: Duration = .seconds(1), metrics: MirrorMetrics, logger: Logger,
        parking: CredentialsParking? = nil, clock: any WallClock = SystemWallClock(), clockDrivesDatabase: Bool = false
    ) {
        self.parking = parking
        self.clock = clock
        self.clockDrivesDatabase = clockDrivesDatabase
        self.planner = planner
        repository = MirrorRepository(pool: pool)
        tokenRoute = TokenRouteRepository(pool: pool)
        hygiene = TokenHygieneRepository(pool: pool)
        self.apns = apns
        self.instance = instance
        self.expiration = expiration
        var settings = settings
        settings.sendWindow = max(1, settings.sendWindow)
        self.settings = settings
        self.pollInterval = pollInterval
        self.metrics = metrics
        self.logger = logger.with(["service": "mirroring"])
        worker = ChunkWorker(
            name: "mirroring", chunksInFlight: settings.chunksInFlight, pollInterval: pollInterval, dueInterval: .zero, sampleInterval: .zero,
            logger: self.logger)
    }

    public func run(until shutdown: ShutdownSignal) async throws { await worker.run(self, until: shutdown) }

    func beginDueWork() async throws {
        // Events with no channel that broadcasts: their newest state goes to their token activities.
        for eventID in try await tokenRoute.sendDue() {
            logger.debug("token route took the event's newest state", ["event": .int(eventID)])
        }
        for (pass, eventID) in try await repository.beginDuePasses(now: databaseNow) {
            logger.debug("mirroring pass began", ["pass": .int(pass), "event": .int(eventID)])
        }
    }

    func advancePasses() async throws {
        for passID in try await repository.runningPassIDs() {
            let advanced = try await repository.advance(passID: passID, chunkSize: settings.chunkSize, cutAhead: settings.cutAhead, now: databaseNow)
            {
                [planner] in
                planner.next(planningDone: $0, openChunks: $1)
            }
            if let lag = advanced?.lag { metrics.lag.observe(max(0, lag)) }
        }
    }

    func claimChunk() async throws -> ClaimedMirrorChunk? {
        try await repository.claimChunk(instance: instance, lease: settings.chunkLease, now: databaseNow)
    }

    func sample() async throws { metrics.backlog.set(Double(try await repository.backlog())) }

    func work(_ chunk: ClaimedMirrorChunk, shutdown: ShutdownSignal) async {
        let logger = logger.with(["event": .int(chunk.eventID), "pass": .int(chunk.passID), "chunk": .int(chunk.id)])
        var sent = 0
        var accepted = 0
        var failed = 0
        do {
            guard let content = try await repository.content(eventID: chunk.eventID) else {
                try await repository.finish(chunk, instance: instance, sent: 0, accepted: 0, failed: 0, now: databaseNow)
                return
            }
            let tokens = try await repository.tokens(of: chunk, behind: content.apsTimestamp, now: databaseNow)
            let body = try Self.body(content, sentAt: clock.now)
            let app = PipelineApp(id: chunk.appID, bundleID: content.app.bundleID, environment: content.app.environment)
            var index = 0
            var backOff = false
            var parkedUntil: Date?
            while index < tokens.count && !backOff && parkedUntil == nil && !shutdown.isTriggered {
                // A parked app is sent nothing: the chunk waits for the park to end.
                if let until = await parking?.heldUntil(appID: chunk.appID) {
                    parkedUntil = until
                    break
                }
                let window = Array(tokens[index..<min(index + settings.sendWindow, tokens.count)])
                index += window.count
                let now = clock.now
                let answers = await withTaskGroup(of: (MirrorToken, APNsVerdict, TokenHighPriorityWindow?).self) { group in
                    for token in window {
                        // The broadcast's priority, within this token's own priority-10 budget.
                        let (priority, windowIfAccepted) = planner.priority(
                            content.priority == 10 ? .high : .low, frequentPushes: token.frequentPushes, window: token.highPriority, now: now)
                        let changed = windowIfAccepted == token.highPriority ? nil : windowIfAccepted
                        group.addTask { [self] in
                            do {
                                let outcome = try await apns.devicePush(
                                    app: app, token: token.token, payload: body,
                                    expiration: expiration.expiration(for: content.storagePolicy, now: now), priority: priority,
                                    retryPolicy: retryPolicy)
                                return (token, outcome.verdict, changed)
                            } catch {
                                return (token, .rejected(reason: "not sent: \(error)", refusal: nil), nil)
                            }
                        }
                    }
                    var answers: [(MirrorToken, APNsVerdict, TokenHighPriorityWindow?)] = []
                    for await answer in group { answers.append(answer) }
                    return answers
                }
                sent += answers.count
                var outcomes: [MirrorOutcome] = []
                var parkReason: String?
                for (token, answer, window) in answers {
                    switch planner.afterAnswer(answer) {
                    case .parkApp:
                        parkReason = answer.reason
                        metrics.pushes.increment(["parked", answer.reason ?? "-"])
                    case .served:
                        accepted += 1
                        outcomes.append(
                            MirrorOutcome(
                                activityID: token.activityID, servedTimestamp: content.apsTimestamp, retryAfter: nil, failed: false,
                                highPriority: window))
                        metrics.pushes.increment(["accepted", "ok"])
                    case .retryTokenLater(let delay):
                        outcomes.append(MirrorOutcome(activityID: token.activityID, servedTimestamp: nil, retryAfter: delay, failed: false))
                        metrics.pushes.increment(["retry", "TooManyRequests"])
                    case .backOffChunk:
                        backOff = true
                        metrics.pushes.increment(["retry", "not_done"])
                    case .sendInALaterPass:
                        metrics.pushes.increment(["unknown", "-"])
                    case .failed(let reason, let refusal):
                        failed += 1
                        outcomes.append(MirrorOutcome(activityID: token.activityID, servedTimestamp: nil, retryAfter: nil, failed: true))
                        metrics.pushes.increment(["failed", reason])
                        if let refusal {
                            do {
                                let recorded = try await hygiene.recordRefusal(
                                    appID: chunk.appID, token: token.token, kind: .activity, refusal: refusal)
                                logger.info(
                                    "activity token refused by APNs",
                                    [
                                        "installation_id": .string(recorded.installationID ?? "unknown"),
                                        "reason": .string(refusal.reason), "outcome": .string(recorded.outcome.rawValue),
                                    ])
                            } catch {
                                logger.warning("token refusal not recorded", ["error": .string("\(error)")])
                            }
                        }
                    }
                }
                try await repository.record(outcomes, now: databaseNow)
                parkedUntil = try await parking?.settle(
                    app, refusedFor: parkReason, accepted: outcomes.contains { $0.servedTimestamp != nil })
            }
            if let parkedUntil {
                try await repository.release(
                    chunk, instance: instance, after: ChunkWorker.parkedDelay(until: parkedUntil, now: clock.now),
                    now: databaseNow)
            } else if backOff || index < tokens.count {
                let delay = backOff ? chunkBackoff.delay(attempt: chunk.attempts) : 0
                try await repository.release(chunk, instance: instance, after: delay, now: databaseNow)
            } else {
                try await repository.finish(chunk, instance: instance, sent: sent, accepted: accepted, failed: failed, now: databaseNow)
            }
        } catch {
            logger.error("mirroring chunk failed; it is claimed again later", ["error": .string("\(error)")])
            // After a database outage the chunk is given back once it answers again, not left for its lease.
            let delay = (error as? PostgresError)?.isRetryable == true ? 0.5 : chunkBackoff.delay(attempt: chunk.attempts)
            try? await DurableWrite.run(until: .now + .seconds(settings.chunkLease), logger: logger) {
                try await repository.release(chunk, instance: instance, after: delay, now: databaseNow)
            }
        }
    }

    /// The broadcast's `aps` as a device push sent at `sentAt` (4,096 bytes: an alert that does not fit is left out).
    static func body(_ content: MirrorContent, sentAt: Date) throws -> [UInt8] {
        let alert = try content.alert.map { try LiveActivityAlert(json: $0) }
        func payload(_ alert: LiveActivityAlert?) -> LiveActivityPayload {
            let fields = content.freshness.fields(
                for: content.action, explicit: content.explicitFields, carriesAlert: alert != nil, lastAlertAt: content.lastAlertAt,
                sentAt: sentAt)
            return LiveActivityPayload(
                action: content.action, timestamp: content.apsTimestamp, contentState: content.contentState, fields: fields, alert: alert)
        }
        if let body = try? payload(alert).body(within: .device) { return body }
        return try payload(nil).body(within: .device)
    }
}
