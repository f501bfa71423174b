// The parks of apps whose credentials APNs refused (`CredentialsPark`), as the dispatcher and the scheduler
// consult them before each request and update them after each answer. The rows are shared by every instance
// (CredentialsParkRepository); this view reads them again every couple of seconds, so a park another
// instance recorded holds here within that time, and a park recorded here holds at once.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Parks an app's work while APNs refuses its credentials, and ends the park at its first success.
public final class CredentialsParking: Sendable {
    public let policy: CredentialsParkPolicy
    private let repository: CredentialsParkRepository
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let clock: any WallClock
    private let refreshInterval: Duration
    /// The parks as known here; `changes` counts the ones made here, so a read started before one is not stored over it.
    private let view = Mutex<(parks: [Int: CredentialsPark], readAt: ContinuousClock.Instant?, changes: Int)>(([:], nil, 0))

    public init(
        pool: PostgresPool, policy: CredentialsParkPolicy = CredentialsParkPolicy(), metrics: PipelineMetrics, logger: Logger,
        clock: any WallClock = SystemWallClock(), refreshInterval: Duration = .seconds(2)
    ) {
        self.policy = policy
        repository = CredentialsParkRepository(pool: pool)
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.refreshInterval = refreshInterval
    }

    /// When the app's work may go again, while it is parked; nil when it may go now: not parked, or the
    /// window ended and this request took the probe (then its answer ends the park or starts the next window).
    public func heldUntil(appID: Int) async -> Date? {
        let now = clock.now
        guard let park = await parks()[appID] else { return nil }
        if let until = park.waits(at: now) { return until }
        do {
            if let probing = try await repository.takeProbe(appID: appID, now: now, timeout: probeTimeout) {
                view.withLock { view in
                    view.parks[appID] = probing
                    view.changes += 1
                }
                return nil
            }
            // Another request holds the probe: wait for its answer.
            let current = try await repository.parks()
            view.withLock { view in
                view.parks = current
                view.readAt = .now
                view.changes += 1
            }
            return current[appID].map { $0.waits(at: now) ?? now.addingTimeInterval(1) }
        } catch {
            return now.addingTimeInterval(1)
        }
    }

    /// How long the other requests of a parked app wait for the probe's answer.
    private let probeTimeout: TimeInterval = 30

    /// Records that APNs refused the app's credentials (`APNsResult.credentialsFault`); returns its park.
    public func refused(_ app: PipelineApp, failure: APNsFailure) async throws -> CredentialsPark {
        try await refused(app, reason: failure.reason?.text ?? "HTTP \(failure.status ?? 403)")
    }

    /// Records that APNs refused the app's credentials (`APNsVerdict.parkCredentials`) for `reason`; returns its park.
    public func refused(_ app: PipelineApp, reason: String) async throws -> CredentialsPark {
        let park = try await repository.recordRefusal(appID: app.id, reason: reason, now: clock.now, policy: policy)
        let earlier = view.withLock { view in
            defer {
                view.parks[app.id] = park
                view.changes += 1
            }
            return view.parks[app.id]
        }
        for label in PipelineMetrics.appLabels(app) { metrics.credentialsParked.set(1, [label]) }
        if earlier?.strikes != park.strikes {
            for label in PipelineMetrics.appLabels(app) { metrics.credentialsRefusals.increment([label]) }
            logger.error(
                "APNs refused the app's credentials; its work is parked until they are fixed",
                [
                    "app": .string(Self.label(app)), "reason": .string(park.reason), "strikes": .int(park.strikes),
                    "retry_at": .string(park.retryAt.ISO8601Format()),
                ])
        }
        return park
    }

    /// What a window of an audience job's pushes says of the app's credentials: a refusal (`reason`) parks the app and
    /// returns when its work may go again; otherwise an accepted push ends a park, and nil is returned.
    public func settle(_ app: PipelineApp, refusedFor reason: String?, accepted: Bool) async throws -> Date? {
        if let reason { return try await refused(app, reason: reason).retryAt }
        if accepted { await succeeded(app) }
        return nil
    }

    /// A request of the app succeeded: a park ends.
    public func succeeded(_ app: PipelineApp) async {
        guard await parks()[app.id] != nil else { return }
        do {
            try await repository.clear(appID: app.id)
            view.withLock { view in
                view.parks[app.id] = nil
                view.changes += 1
            }
            for label in PipelineMetrics.appLabels(app) { metrics.credentialsParked.set(0, [label]) }
            logger.notice("APNs accepted the app's credentials again; its work goes on", ["app": .string(Self.label(app))])
        } catch {
            logger.warning(
                "credentials park not cleared; the next success tries again",
                [
                    "app": .string(Self.label(app)),
                    "error": .string("\(error)"),
                ])
        }
    }

    /// The parks as last read. A read older than the refresh interval starts one more in the background (one at
    /// a time), so no request waits for the database here: the dispatcher asks before every claim.
    private func parks() async -> [Int: CredentialsPark] {
        let (parks, stale, changes) = view.withLock { view -> ([Int: CredentialsPark], Bool, Int) in
            let stale = view.readAt.map { ContinuousClock.now - $0 >= refreshInterval } ?? true
            if stale { view.readAt = .now }
            return (view.parks, stale, view.changes)
        }
        if stale {
            Task { [repository, self] in
                guard let read = try? await repository.parks() else { return }
                store(read, ifUnchangedSince: changes)
            }
        }
        return parks
    }

    private func store(_ parks: [Int: CredentialsPark], ifUnchangedSince changes: Int) {
        view.withLock { view in if view.changes == changes { view.parks = parks } }
    }

    static func label(_ app: PipelineApp) -> String { "\(app.bundleID)/\(app.environment)" }
}
