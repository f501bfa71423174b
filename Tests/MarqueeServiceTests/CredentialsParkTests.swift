import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Testing

@testable import MarqueeService

/// A 403 other than ExpiredProviderToken is the app's fault, not the request's: the app's work is parked
/// (5 minutes doubling to an hour), flagged in the status and a metric, and goes on at the first success.
@Suite struct CredentialsParkPolicyTests {
    @Test func parksDoubleFromFiveMinutesToAnHour() {
        let policy = CredentialsParkPolicy()
        #expect((1...6).map(policy.delay(strike:)) == [300, 600, 1200, 2400, 3600, 3600])
    }

    @Test func refusalsInsideAWindowAddNoStrike() {
        let policy = CredentialsParkPolicy()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let first = CredentialsPark.after(nil, refusal: "InvalidProviderToken", at: start, policy: policy)
        #expect(first == CredentialsPark(reason: "InvalidProviderToken", since: start, strikes: 1, retryAt: start + 300, lastAt: start))
        // Other channels' requests already in flight answer the same: one window, one strike.
        let same = CredentialsPark.after(first, refusal: "InvalidProviderToken", at: start + 2, policy: policy)
        #expect(same.strikes == 1 && same.retryAt == start + 300 && same.lastAt == start + 2)
        #expect(same.holds(at: start + 299) && !same.holds(at: start + 300))
        // The window ended in another refusal: twice as long, from now.
        let second = CredentialsPark.after(same, refusal: "TopicMismatch", at: start + 301, policy: policy)
        #expect(second == CredentialsPark(reason: "TopicMismatch", since: start, strikes: 2, retryAt: start + 901, lastAt: start + 301))
    }
}

@Suite(.enabled(if: PipelineServiceFixture.available))
struct CredentialsParkTests {
    static let refused = RecordingChannelAPNs.failure(403, .invalidProviderToken)

    @Test func aRefusedBroadcastParksEveryBroadcastOfTheAppUntilTheFirstSuccess() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let first = try await f.makeEvent()
        let second = try await f.makeEvent()
        _ = try await f.openChannel(eventID: first.id)
        _ = try await f.openChannel(eventID: second.id)
        let dispatcher = f.dispatcher()
        let label = ["com.example.scores/development"]

        f.apns.scriptBroadcasts([Self.refused])
        try await f.post(first.id, ["home": 1, "away": 0], at: f.clock.now)
        let parkedAt = f.clock.now
        #expect(try await dispatcher.dispatchOnce() == [.parked(until: parkedAt + 300)])
        #expect(f.metrics.credentialsParked.value(label) == 1)
        #expect(f.metrics.credentialsRefusals.value(label) == 1)
        #expect(f.metrics.credentialsParked.value(["\(f.appID)"]) == 1 && f.metrics.credentialsRefusals.value(["\(f.appID)"]) == 1)
        #expect(f.metrics.retries.value(["broadcast"]) == 0)  // not a retry of the request

        // The other event's update is not sent at all while the app is parked.
        try await f.post(second.id, ["home": 0, "away": 1], at: f.clock.now)
        #expect(try await dispatcher.dispatchOnce() == [.parked(until: parkedAt + 300)])
        #expect(f.apns.state.withLock { $0.broadcastsStarted } == 1)
        let status = try #require(try await StatusRepository(pool: f.pool).status().apps.first { $0.appID == f.appID })
        #expect(status.credentialsPark?.strikes == 1 && status.credentialsPark?.reason == "InvalidProviderToken")

        // The window ends: one request probes (the other waits for its answer), is refused again: twice as long.
        f.clock.advance(by: 301)
        f.apns.scriptBroadcasts([Self.refused])
        #expect(try await dispatcher.dispatchOnce(limit: 1) == [.parked(until: f.clock.now + 600)])
        #expect(try await dispatcher.dispatchOnce(limit: 1) == [.parked(until: f.clock.now + 600)])
        #expect(f.apns.state.withLock { $0.broadcastsStarted } == 2)
        #expect(f.metrics.credentialsRefusals.value(label) == 2)

        // The key is fixed: the next window's probe succeeds, which ends the park and makes the other due at once.
        f.clock.advance(by: 601)
        let probe = try await dispatcher.dispatchOnce(limit: 1)
        guard case .sent? = probe.first else {
            Issue.record("the probe was not sent: \(probe)")
            return
        }
        #expect(f.metrics.credentialsParked.value(label) == 0)
        let rest = try await dispatcher.dispatchOnce()
        guard case .sent? = rest.first else {
            Issue.record("the other broadcast did not resume: \(rest)")
            return
        }
        #expect(try await StatusRepository(pool: f.pool).status().apps.first { $0.appID == f.appID }?.credentialsPark == nil)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM app_credential_faults") == 0)
    }

    @Test func aProbeIsTakenByOneRequestAtATime() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let repository = CredentialsParkRepository(pool: f.pool)
        let start = f.clock.now
        _ = try await repository.recordRefusal(appID: f.appID, reason: "InvalidProviderToken", now: start, policy: CredentialsParkPolicy())
        #expect(try await repository.takeProbe(appID: f.appID, now: start + 299, timeout: 30) == nil)  // the window runs
        let taken = try #require(try await repository.takeProbe(appID: f.appID, now: start + 300, timeout: 30))
        #expect(taken.probeUntil == start + 330 && taken.waits(at: start + 300) == start + 330)
        #expect(try await repository.takeProbe(appID: f.appID, now: start + 310, timeout: 30) == nil)  // held
        #expect(try await repository.takeProbe(appID: f.appID, now: start + 331, timeout: 30) != nil)  // its answer never came
        // The probe's refusal starts the second window.
        let second = try await repository.recordRefusal(
            appID: f.appID, reason: "InvalidProviderToken", now: start + 335,
            policy: CredentialsParkPolicy())
        #expect(second.strikes == 2 && second.retryAt == start + 935 && second.probeUntil == nil)
    }

    @Test func aRefusedCreateWaitsForTheAppAndNeverFailsForGood() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now)
        f.apns.scriptCreates([Self.refused])
        let scheduler = f.scheduler()
        let first = try #require(try await scheduler.tick())
        #expect(first.createsFailed.isEmpty && first.createRetries.isEmpty)
        let channel = try #require(try await f.channels.channels(eventID: event.id).first)
        #expect(first.parked == [channel.id])
        #expect(channel.state == .lifecycle(.creating))
        #expect(channel.nextAttemptAt == f.clock.now + 300)

        // Another event of the app gets no create while parked; nor does the retry before its time.
        let other = try await f.makeEvent(startsAt: f.clock.now)
        f.clock.advance(by: 10)
        let waiting = try #require(try await scheduler.tick())
        #expect(waiting.opened.isEmpty)
        #expect(f.apns.state.withLock { $0.creates } == 1)
        #expect(try await f.channels.channels(eventID: other.id).first?.state == .lifecycle(.planned))

        // After the park, both are created and the park ends.
        f.clock.advance(by: 300)
        let resumed = try #require(try await scheduler.tick())
        #expect(Set(resumed.opened).count == 2, "\(resumed)")
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM app_credential_faults") == 0)
        #expect(f.metrics.credentialsParked.value(["com.example.scores/development"]) == 0)
    }
}
