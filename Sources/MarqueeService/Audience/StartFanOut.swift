// The start fan-out: push-to-starts of an event's audience at kick-off, each installation once, on the
// event's channel where the device can join it (docs/apns.md#push-to-start). Every instance runs it. Its
// loop creates the automatic runs that are due, advances the open runs (cuts their audience into keyset
// chunks, rolls them into late-follower passes, finishes them) and claims chunks; a chunk is read,
// decided through `StartPlanner`, and sent in windows: each window is marked `sending` in one statement
// just before it goes, and its answers are written in one statement after. A start is resent only when an
// answer proves APNs did nothing; a chunk whose holder died has its `sending` starts settled `unknown`.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// The fan-out's settings that serve's flags set (seconds unless named).
public struct StartSettings: Sendable, Equatable {
    /// `--audience-lead`: an event's audience starts this long before `startsAt`, unless it has its own.
    public var audienceLead: TimeInterval = 600
    /// `--start-max-lateness`: a run due longer ago than this is skipped as `late`.
    public var maxLateness: TimeInterval = 1800
    /// `--start-channel-wait`: iOS 18 installations wait this long for the event's channel.
    public var channelWait: TimeInterval = 60
    /// `--late-start-cutoff`: late followers are started until `endsAt` minus this.
    public var lateStartCutoff: TimeInterval = 900
    /// `--late-start-interval`: time between the passes for late followers.
    public var lateStartInterval: TimeInterval = 60
    /// `--start-ttl`: `apns-expiration` is `min(now + this, endsAt)`.
    public var startTTL: TimeInterval = 900
    /// `--starts-per-device-hour`, `--max-concurrent-activities`.
    public var limits = StartLimits()
    /// `--start-send-window`, `--start-chunks`, `--start-chunk-size`, `--start-chunk-lease`. At the defaults at most 300
    /// starts are in flight per instance, so a crash makes about that many plus one window `unknown` (450).
    public var chunks = ChunkJobSettings(sendWindow: 150, chunksInFlight: 2)
    /// Starts in flight per chunk, marked `sending` together.
    public var sendWindow: Int {
        get { chunks.sendWindow }
        set { chunks.sendWindow = newValue }
    }
    /// Chunks of followers one instance sends at once.
    public var chunksInFlight: Int {
        get { chunks.chunksInFlight }
        set { chunks.chunksInFlight = newValue }
    }
    /// `--restart-on-postpone`: a `PATCH` that moves `startsAt` later by more than this after starts went out ends
    /// the running activities and starts the audience again at the new lead.
    public var restartOnPostpone: TimeInterval = 3600

    public init() {}
}

/// The fan-out's configuration: serve's settings and the fixed parts.
public struct StartFanOutConfiguration: Sendable, Equatable {
    public var instance: String
    public var settings: StartSettings
    public var audienceLead: TimeInterval { settings.audienceLead }
    public var maxLateness: TimeInterval { settings.maxLateness }
    public var channelWait: TimeInterval { settings.channelWait }
    public var lateStartCutoff: TimeInterval { settings.lateStartCutoff }
    public var lateStartInterval: TimeInterval { settings.lateStartInterval }
    public var startTTL: TimeInterval { settings.startTTL }
    public var limits: StartLimits { settings.limits }
    public var sendWindow: Int { settings.sendWindow }
    public var chunksInFlight: Int { settings.chunksInFlight }
    /// Followers per chunk.
    public var chunkSize: Int { settings.chunks.chunkSize }
    /// Chunks cut ahead of the claims, per run.
    public var cutAhead: Int { settings.chunks.cutAhead }
    /// A chunk's lease, renewed each window; it ends sooner with its holder's heartbeat.
    public var chunkLease: TimeInterval { settings.chunks.chunkLease }
    /// A window's answers are written in batches of this many, or of what arrived in `answerInterval`, whichever
    /// comes first: a crash loses at most the window's requests in flight and the answers since the last batch.
    public var answerBatch = 50
    public var answerInterval: Duration = .milliseconds(50)
    /// How often the loop looks for chunks when nothing wakes it.
    public var pollInterval: Duration = .seconds(1)
    /// How often it looks for automatic runs that came due.
    public var dueRunInterval: Duration = .seconds(5)
    /// The statements take the fan-out's clock as the database's `now()` (tests, which move the clock); else the
    /// database's, shared by every instance.
    public var clockDrivesDatabase = false
    /// A chunk that met 500 or 503 waits this long, doubled each time, up to a minute.
    public var chunkBackoff = RetryBackoff(base: 1, maximum: 60)
    /// Retries inside one send (APNsClient's): one retry of a 429 or 5xx that proves nothing was done.
    public var retryPolicy = RetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(200), maxDelay: .seconds(5))

    public init(instance: String, settings: StartSettings = StartSettings()) {
        self.instance = instance
        self.settings = settings
    }
}

/// The fan-out's metrics.
public struct StartMetrics: Sendable {
    /// Starts by `result` (accepted, rejected, unknown, skipped, retry) and `reason`.
    public let starts: Counter
    /// Starts sent and not yet answered.
    public let inFlight: Gauge
    /// Runs created or finished, by `kind` and `state`.
    public let runs: Counter
    /// Seconds from a run's start to its last accepted start, when its first pass ends.
    public let lag: Histogram
    /// Accepted starts of the last day, and those the app's registration shows adopted, by `os_major`.
    public let accepted: Gauge
    public let adopted: Gauge
    /// Windows of channel starts a broadcast raced, after which the channel's last state went again.
    public let racedWindows: Counter

    public init(registry: MetricsRegistry) {
        starts = registry.counter("marquee_starts_total", help: "Push-to-starts by result and reason.", labels: ["result", "reason"])
        inFlight = registry.gauge("marquee_starts_in_flight", help: "Push-to-starts sent and not yet answered.")
        runs = registry.counter("marquee_start_runs_total", help: "Start runs by kind and state reached.", labels: ["kind", "state"])
        lag = registry.histogram(
            "marquee_start_run_lag_seconds", help: "Seconds from a run's start to its last accepted start, at the end of its first pass.",
            buckets: [1, 5, 10, 30, 60, 120, 300, 600, 1800])
        accepted = registry.gauge(
            "marquee_start_accepted", help: "Push-to-starts APNs accepted in the last 24 hours, by OS major version.", labels: ["os_major"])
        adopted = registry.gauge(
            "marquee_start_adopted",
            help: "Accepted push-to-starts of the last 24 hours whose activity the app registered within 10 minutes, by OS major version.",
            labels: ["os_major"])
        racedWindows = registry.counter(
            "marquee_start_windows_raced_total",
            help: "Windows of push-to-starts on a channel that a broadcast raced; the channel's last state went again.")
    }
}

/// Starts events' audiences.
public final class StartFanOut: Service, ChunkJob {
    public let name = "starts"
    public let configuration: StartFanOutConfiguration
    private let repository: StartRepository
    private let hygiene: TokenHygieneRepository
    private let apns: any DevicePushAPNs
    private let metrics: StartMetrics
    private let logger: Logger
    private let planner: StartPlanner
    private let runPlanner: StartRunPlanner
    /// The audience's worker loop, running this job.
    private let worker: ChunkWorker
    private let inFlight = Mutex(0)
    /// The apps parked for a credentials fault, shared with the dispatcher and the scheduler (nil: none kept).
    private let parking: CredentialsParking?
    private let clock: any WallClock
    /// The clock's time for the statements with `clockDrivesDatabase`, else nil (the database's).
    private var databaseNow: Date? { configuration.clockDrivesDatabase ? clock.now : nil }

    public init(
        pool: PostgresPool, apns: any DevicePushAPNs, configuration: StartFanOutConfiguration, metrics: StartMetrics, logger: Logger,
        parking: CredentialsParking? = nil, clock: any WallClock = SystemWallClock()
    ) {
        self.parking = parking
        self.clock = clock
        repository = StartRepository(pool: pool)
        hygiene = TokenHygieneRepository(pool: pool)
        self.apns = apns
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger.with(["service": "starts"])
        planner = StartPlanner(limits: configuration.limits)
        runPlanner = StartRunPlanner(lateStartInterval: configuration.lateStartInterval)
        // Runs come due at a lead of minutes: looking for them every few seconds is enough, and spares the events
        // table a scan per poll under a busy ingest.
        worker = ChunkWorker(
            name: "start fan-out", chunksInFlight: configuration.chunksInFlight, pollInterval: configuration.pollInterval,
            dueInterval: configuration.dueRunInterval, sampleInterval: .seconds(60), logger: self.logger)
    }

    /// A run was created in this process: look for its chunks now.
    public func wake() { worker.wake() }

    public func run(until shutdown: ShutdownSignal) async throws {
        logger.info("start fan-out started", ["instance": .string(configuration.instance)])
        await worker.run(self, until: shutdown)
        logger.info("start fan-out stopped", ["instance": .string(configuration.instance)])
    }

    func beginDueWork() async throws {
        for run in try await repository.createDueAutomaticRuns(
            lead: configuration.audienceLead, maxLateness: configuration.maxLateness, channelWait: configuration.channelWait, now: databaseNow)
        {
            metrics.runs.increment([StartRunKind.automatic.rawValue, run.state.rawValue])
            if let reason = run.skipReason {
                // Late: serve was down at the lead, an operator's matter. Without a start alert there is nothing to
                // start with, as for every event of an app that does not use push-to-start: the run records it.
                logger.log(
                    reason == .late ? .warning : .info, "automatic start run skipped",
                    ["event": .int(run.eventID), "run": .int(run.id), "reason": .string(reason.rawValue)])
            } else {
                logger.info("automatic start run began", ["event": .int(run.eventID), "run": .int(run.id)])
            }
        }
    }

    func advancePasses() async throws {
        for runID in try await repository.openRunIDs() {
            guard
                let advanced = try await repository.advance(
                    runID: runID, lateStartCutoff: configuration.lateStartCutoff, chunkSize: configuration.chunkSize,
                    cutAhead: configuration.cutAhead, now: databaseNow, decide: { [runPlanner] in runPlanner.next($0) })
            else { continue }
            if let lag = advanced.firstPassLag {
                metrics.lag.observe(lag)
                logger.info("start run's first pass done", ["run": .int(runID), "lag_seconds": .double(lag)])
            }
            switch advanced.step {
            case .roll, .beginPass: try await repository.refreshEstimatedAudience(runID: runID)  // late followers count too
            default: break
            }
            if case .finish(let state) = advanced.step {
                metrics.runs.increment([advanced.kind.rawValue, state.rawValue])
                logger.info("start run finished", ["run": .int(runID), "state": .string(state.rawValue)])
            }
        }
    }

    func claimChunk() async throws -> ClaimedStartChunk? {
        try await repository.claimChunk(instance: configuration.instance, lease: configuration.chunkLease, now: databaseNow)
    }

    func sample() async throws {
        for group in try await repository.adoption(window: 86400) {
            metrics.accepted.set(Double(group.accepted), [group.osMajor])
            metrics.adopted.set(Double(group.adopted), [group.osMajor])
        }
    }

    // MARK: one chunk

    func work(_ chunk: ClaimedStartChunk, shutdown: ShutdownSignal) async {
        let logger = logger.with(["run": .int(chunk.runID), "event": .int(chunk.eventID), "chunk": .int(chunk.id)])
        do {
            let abandoned = try await repository.settleAbandoned(chunk, now: databaseNow)
            if abandoned > 0 {
                metrics.starts.increment([StartState.unknown.rawValue, "holder_lost"], by: Double(abandoned))
                logger.warning("starts left sending by a holder that is gone are unknown", ["starts": .int(abandoned)])
            }
            var content = try await repository.content(of: chunk, now: databaseNow)
            guard StartRepository.startableEventStates.contains(content.eventStatus) else {
                try await repository.finish(chunk, instance: configuration.instance, now: databaseNow)
                return
            }
            guard let alertJSON = content.startAlert, let alert = try? LiveActivityAlert(json: alertJSON, at: ["startAlert"]) else {
                // A run never begins without an alert; an event whose alert was removed since ends the chunk unsent.
                logger.error("start run has no alert; chunk left unsent")
                try await repository.finish(chunk, instance: configuration.instance, now: databaseNow)
                return
            }
            let members = try await repository.members(of: chunk, now: databaseNow)
            let now = clock.now
            var skipped: [SkippedStart] = []
            var sends: [PlannedStart] = []
            var waitUntil: Date?
            for member in members {
                let candidate = member.candidate
                switch planner.decide(candidate, channelID: content.channelID, channelWaitUntil: chunk.channelWaitUntil, now: now) {
                case .none:
                    break
                case .skip(let reason):
                    guard let token = candidate.token ?? member.plannedToken else { continue }
                    skipped.append(
                        SkippedStart(
                            installation: candidate.installation, token: token, osMajor: member.osMajor, reason: reason,
                            plannedStartID: member.plannedStartID))
                case .wait(let until):
                    waitUntil = min(waitUntil ?? until, until)
                case .send(let route):
                    guard let token = candidate.token else { continue }
                    sends.append(
                        PlannedStart(
                            installation: candidate.installation, token: token, osMajor: member.osMajor, route: route,
                            plannedStartID: member.plannedStartID))
                }
            }
            try await repository.skip(chunk, skipped)
            for start in skipped { metrics.starts.increment([StartState.skipped.rawValue, start.reason.rawValue]) }
            var backOff = false
            var parkedUntil: Date?
            var index = 0
            while index < sends.count && !backOff && parkedUntil == nil && !shutdown.isTriggered {
                // A parked app sends nothing: the chunk waits for the park to end.
                if let until = await parking?.heldUntil(appID: chunk.appID) {
                    parkedUntil = until
                    break
                }
                let window = Array(sends[index..<min(index + configuration.sendWindow, sends.count)])
                index += window.count
                guard try await repository.renew(chunk, instance: configuration.instance, lease: configuration.chunkLease, now: databaseNow) else {
                    logger.warning("start chunk claim lost; its holder now is another instance")
                    return
                }
                if index > window.count { content = try await repository.content(of: chunk, now: databaseNow) }
                // The event ended or was cancelled during the chunk: nothing more starts.
                guard StartRepository.startableEventStates.contains(content.eventStatus) else { break }
                let composer = StartComposer(content: content, alert: alert, ttl: configuration.startTTL)
                let outcome = try await send(window, chunk: chunk, app: content.app, composer: composer)
                backOff = outcome.backOff
                parkedUntil = outcome.parkedUntil
                if let retry = outcome.retryAt { waitUntil = min(waitUntil ?? retry, retry) }
                if outcome.wentOutOnChannel, let channelID = content.channelID {
                    try await followBroadcastsRacing(startedWith: content.apsTimestamp, chunk: chunk, apnsChannelID: channelID, logger: logger)
                }
            }
            if let parkedUntil {
                let delay = ChunkWorker.parkedDelay(until: parkedUntil, now: clock.now)
                try await repository.release(chunk, instance: configuration.instance, after: delay, now: databaseNow)
                logger.warning("the app's credentials are parked; its starts wait", ["retry_in_seconds": .double(delay)])
            } else if backOff || index < sends.count {
                let delay = backOff ? configuration.chunkBackoff.delay(attempt: chunk.attempts) : 0
                try await repository.release(chunk, instance: configuration.instance, after: delay, now: databaseNow)
                if backOff { logger.warning("APNs could not take starts; chunk backs off", ["retry_in_seconds": .double(delay)]) }
            } else if let waitUntil {
                try await repository.release(
                    chunk, instance: configuration.instance, after: max(0.1, min(waitUntil.timeIntervalSince(clock.now), 5)), now: databaseNow)
            } else {
                try await repository.finish(chunk, instance: configuration.instance, now: databaseNow)
            }
        } catch {
            logger.error("start chunk failed; it is claimed again later", ["error": .string("\(error)")])
            // The database went away: the chunk is given back as soon as it answers again (else it would wait for its
            // lease, this instance being alive), and claimed again shortly after.
            let outage = (error as? PostgresError)?.isRetryable == true
            let delay = outage ? Self.outageDelay : configuration.chunkBackoff.delay(attempt: chunk.attempts)
            try? await DurableWrite.run(until: .now + .seconds(configuration.chunkLease), logger: logger) {
                try await repository.release(chunk, instance: configuration.instance, after: delay, now: databaseNow)
            }
        }
    }

    /// Marks one window just before it goes, sends it, and records the answers as they arrive: a batch every
    /// `answerBatch` answers or `answerInterval`, whichever comes first, so a crash costs only what was in flight and
    /// answered since the last batch. The last batch deletes the window's mark.
    private func send(
        _ window: [PlannedStart], chunk: ClaimedStartChunk, app: StartApp, composer: StartComposer
    ) async throws -> (backOff: Bool, retryAt: Date?, wentOutOnChannel: Bool, parkedUntil: Date?) {
        let marked = try await repository.markWindow(chunk, window, now: databaseNow)
        guard !marked.starts.isEmpty else { return (false, nil, false, nil) }
        let pipelineApp = PipelineApp(id: chunk.appID, bundleID: app.bundleID, environment: app.environment)
        inFlight.withLock { $0 += marked.starts.count }
        metrics.inFlight.set(Double(inFlight.withLock { $0 }))
        // Every start of a route in the window carries the same payload and expiration: built once a route.
        let sentAt = clock.now
        let expiration = composer.expiration(now: sentAt)
        var bodies: [StartRoute: Result<[UInt8], any Error>] = [:]
        for start in marked.starts where bodies[start.route] == nil {
            bodies[start.route] = Result { try composer.body(route: start.route, sentAt: sentAt) }
        }
        let writeLogger = logger.with(["chunk": .int(chunk.id), "write": "start answers"])
        let writeDeadline = ContinuousClock.now + .seconds(configuration.chunkLease)
        var tally = WindowTally()
        try await withThrowingTaskGroup(of: WindowArrival.self) { group in
            for start in marked.starts {
                let body = bodies[start.route]!
                group.addTask { [self] in
                    do {
                        let outcome = try await apns.devicePush(
                            app: pipelineApp, token: start.token, payload: try body.get(), expiration: expiration,
                            priority: .high, retryPolicy: configuration.retryPolicy)
                        return .answer(start, outcome.verdict, outcome)
                    } catch {
                        // No request could be made (a signing key unreadable, a payload too large): nothing went out.
                        return .answer(start, .rejected(reason: "not sent: \(error)", refusal: nil), nil)
                    }
                }
            }
            let interval = configuration.answerInterval
            group.addTask {
                try? await Task.sleep(for: interval)
                return .tick
            }
            var pending: [StartAnswerRecord] = []
            var outstanding = marked.starts.count
            while let arrival = try await group.next() {
                switch arrival {
                case .answer(let start, let verdict, let outcome):
                    outstanding -= 1
                    inFlight.withLock { $0 -= 1 }
                    pending.append(tally.add(start, verdict, outcome, planner: planner, at: clock.now, metrics: metrics))
                    guard pending.count >= configuration.answerBatch || outstanding == 0 else { continue }
                case .tick:
                    if outstanding > 0 {
                        group.addTask {
                            try? await Task.sleep(for: interval)
                            return .tick
                        }
                    }
                    guard !pending.isEmpty else { continue }
                }
                // The answers are known: written as soon as PostgreSQL takes them, else the starts would count unknown.
                let batch = pending
                pending.removeAll(keepingCapacity: true)
                let last = outstanding == 0
                try await DurableWrite.run(until: writeDeadline, logger: writeLogger) {
                    try await repository.record(
                        chunk, window: marked, batch, last: last, windowAccepted: tally.anyAccepted, now: databaseNow)
                }
                if last { group.cancelAll() }
            }
        }
        metrics.inFlight.set(Double(inFlight.withLock { $0 }))
        for (token, refusal) in tally.refusals {
            do {
                let recorded = try await hygiene.recordRefusal(appID: chunk.appID, token: token, kind: .pushToStart, refusal: refusal)
                logger.info(
                    "push-to-start token refused by APNs",
                    [
                        "installation_id": .string(recorded.installationID ?? "unknown"), "reason": .string(refusal.reason),
                        "outcome": .string(recorded.outcome.rawValue),
                    ])
            } catch {
                logger.warning("token refusal not recorded", ["error": .string("\(error)")])
            }
        }
        // A refused key parks the app (its other senders hold too); an accepted start ends a park.
        let parkedUntil = try await parking?.settle(pipelineApp, refusedFor: tally.parkReason, accepted: tally.anyAccepted)
        return (tally.backOff, tally.retryAt, tally.wentOutOnChannel, parkedUntil)
    }

    /// After a window of starts on the channel (`StartWindowFollowUp`): once a broadcast in flight, if any, is
    /// recorded (waiting up to `raceWait`), a broadcast recorded since the window's content was read makes the
    /// channel's last state go again, for the activities the window started after APNs accepted that broadcast.
    private func followBroadcastsRacing(startedWith: Int64, chunk: ClaimedStartChunk, apnsChannelID: String, logger: Logger) async throws {
        let deadline = ContinuousClock.now + Self.raceWait
        while true {
            let channel = try await repository.channelAfterWindow(eventID: chunk.eventID, apnsChannelID: apnsChannelID, now: databaseNow)
            switch planner.afterChannelWindow(
                startedWith: startedWith, channelTimestamp: channel.lastApsTimestamp, broadcastInFlight: channel.broadcastInFlight,
                waitedOut: ContinuousClock.now >= deadline)
            {
            case .none:
                return
            case .waitForBroadcast:
                try await Task.sleep(for: .milliseconds(20))
            case .broadcastAgain:
                metrics.racedWindows.increment()
                if try await repository.broadcastLastStateAgain(eventID: chunk.eventID) {
                    logger.info("a broadcast raced a window of starts; the channel's last state goes again")
                }
                return
            }
        }
    }

    /// How long a chunk that met a database outage waits before it is claimed again.
    static let outageDelay: TimeInterval = 0.5

    /// How long a window of channel starts waits for a broadcast in flight to be recorded.
    private static let raceWait: Duration = .seconds(2)
}

/// What a window's task group yields: a start's answer, or the time to write the answers so far.
private enum WindowArrival: Sendable {
    case answer(SendingStart, APNsVerdict, APNsExchange?)
    case tick
}

/// What a window's answers decided, as they arrive (`StartPlanner.afterAnswer` for each).
private struct WindowTally {
    var backOff = false
    var retryAt: Date?
    var wentOutOnChannel = false
    var parkReason: String?
    var anyAccepted = false
    /// Tokens APNs refused, for the token hygiene.
    var refusals: [(token: String, refusal: TokenRefusal)] = []

    /// Takes one answer and returns its record.
    mutating func add(
        _ start: SendingStart, _ answer: APNsVerdict, _ outcome: APNsExchange?, planner: StartPlanner, at now: Date, metrics: StartMetrics
    ) -> StartAnswerRecord {
        let plan = planner.afterAnswer(answer, attempt: start.attempt)
        if plan.parkApp { parkReason = answer.reason }
        anyAccepted = anyAccepted || plan.state == .accepted
        wentOutOnChannel = wentOutOnChannel || (start.route == .channel && StartLifecycle.startedStates.contains(plan.state))
        backOff = backOff || plan.backOffChunk
        if let delay = plan.retryAfter {
            let at = now.addingTimeInterval(delay)
            retryAt = min(retryAt ?? at, at)
        }
        if case .rejected(_, let refusal?) = answer { refusals.append((start.token, refusal)) }
        let result = plan.parkApp ? "parked" : plan.state == .planned ? "retry" : plan.state.rawValue
        metrics.starts.increment([result, plan.reason ?? answer.reason ?? (plan.state == .accepted ? "ok" : "-")])
        return StartAnswerRecord(
            start: start, state: plan.state, reason: plan.reason, status: outcome?.attempts.last?.status, retryAfter: plan.retryAfter,
            apnsUniqueID: outcome?.attempts.last?.uniqueID)
    }
}
