import Foundation
import Testing

@testable import MarqueeCore

private let t0 = Date(timeIntervalSince1970: 1_800_000_000)

@Suite struct TimestampSequencerTests {
    @Test func strictlyIncreasingEvenWhenTheClockStallsOrGoesBack() {
        var sequencer = TimestampSequencer()
        #expect(sequencer.next(now: t0.addingTimeInterval(0.9)) == 1_800_000_000)
        #expect(sequencer.next(now: t0.addingTimeInterval(0.95)) == 1_800_000_001)
        #expect(sequencer.next(now: t0.addingTimeInterval(-30)) == 1_800_000_002)
        #expect(sequencer.next(now: t0.addingTimeInterval(10)) == 1_800_000_010)
        #expect(sequencer.last == 1_800_000_010)
        #expect(TimestampSequencer.next(after: 1_900_000_000, now: t0) == 1_900_000_001)
        #expect(TimestampSequencer.next(after: nil, now: t0) == 1_800_000_000)
    }

    @Test func persistsAsJSON() throws {
        let sequencer = TimestampSequencer(last: 42)
        let copy = try JSONDecoder().decode(TimestampSequencer.self, from: JSONEncoder().encode(sequencer))
        #expect(copy == sequencer)
    }
}

@Suite struct ConflationPolicyTests {
    let policy = ConflationPolicy()

    @Test func nothingPendingIsIdle() {
        #expect(policy.decide(pending: [PendingBroadcast<Int>](), lastSentAt: nil, now: t0) == .idle)
    }

    @Test func sendsOnlyTheNewestAndReportsTheRestAsConflated() {
        let pending = [PendingBroadcast(id: 1), PendingBroadcast(id: 2), PendingBroadcast(id: 3)]
        #expect(
            policy.decide(pending: pending, lastSentAt: nil, now: t0)
                == .send(BroadcastPlan(send: 3, conflated: [1, 2], alertFrom: nil, wantsHighPriority: false)))
        #expect(
            policy.decide(pending: pending, lastSentAt: t0.addingTimeInterval(-1), now: t0)
                == .send(BroadcastPlan(send: 3, conflated: [1, 2], alertFrom: nil, wantsHighPriority: false)))
    }

    @Test func waitsUntilASecondAfterTheLastSend() {
        let last = t0.addingTimeInterval(-0.25)
        #expect(policy.decide(pending: [PendingBroadcast(id: 1)], lastSentAt: last, now: t0) == .wait(until: last.addingTimeInterval(1)))
        let slow = ConflationPolicy(minimumInterval: 5)
        #expect(
            slow.decide(pending: [PendingBroadcast(id: 1)], lastSentAt: t0, now: t0.addingTimeInterval(4)) == .wait(until: t0.addingTimeInterval(5)))
    }

    @Test func theToleranceLetsABroadcastGoThatMuchEarlyAndNoEarlier() {
        let lenient = ConflationPolicy(minimumInterval: 1, tolerance: 0.025)
        #expect(lenient.pacing == 0.975)
        #expect(
            lenient.decide(pending: [PendingBroadcast(id: 1)], lastSentAt: t0, now: t0.addingTimeInterval(0.98))
                == .send(BroadcastPlan(send: 1, conflated: [], alertFrom: nil, wantsHighPriority: false)))
        #expect(
            lenient.decide(pending: [PendingBroadcast(id: 1)], lastSentAt: t0, now: t0.addingTimeInterval(0.97))
                == .wait(until: t0.addingTimeInterval(0.975)))
        #expect(ConflationPolicy(minimumInterval: 0.01, tolerance: 0.025).pacing == 0)
    }

    @Test func urgentUpdatesGoAtOnceAndAnOlderAlertTravelsWithTheNewestState() {
        let last = t0.addingTimeInterval(-0.1)
        let high = [PendingBroadcast(id: "a"), PendingBroadcast(id: "b", isHighPriority: true)]
        #expect(
            policy.decide(pending: high, lastSentAt: last, now: t0)
                == .send(BroadcastPlan(send: "b", conflated: ["a"], alertFrom: nil, wantsHighPriority: true)))

        let alertThenState = [PendingBroadcast(id: "goal", hasAlert: true), PendingBroadcast(id: "minute")]
        #expect(
            policy.decide(pending: alertThenState, lastSentAt: last, now: t0)
                == .send(BroadcastPlan(send: "minute", conflated: ["goal"], alertFrom: "goal", wantsHighPriority: false)))

        let twoAlerts = [PendingBroadcast(id: 1, hasAlert: true), PendingBroadcast(id: 2, hasAlert: true), PendingBroadcast(id: 3, hasAlert: true)]
        #expect(
            policy.decide(pending: twoAlerts, lastSentAt: last, now: t0)
                == .send(BroadcastPlan(send: 3, conflated: [1, 2], alertFrom: nil, wantsHighPriority: false)))
    }
}

@Suite struct PriorityPolicyTests {
    @Test func autoIsHighOnlyForAlertsAndSignificantChanges() {
        #expect(PushPriority.wanted(for: .auto, hasAlert: false, changesSignificantField: false) == .low)
        #expect(PushPriority.wanted(for: .auto, hasAlert: true, changesSignificantField: false) == .high)
        #expect(PushPriority.wanted(for: .auto, hasAlert: false, changesSignificantField: true) == .high)
        #expect(PushPriority.wanted(for: .high, hasAlert: false, changesSignificantField: false) == .high)
        #expect(PushPriority.wanted(for: .low, hasAlert: true, changesSignificantField: true) == .low)
        #expect(PushPriority.high.rawValue == 10 && PushPriority.low.rawValue == 5)
    }

    @Test func theSignificanceComesFromTheSchema() throws {
        let match = Fixtures.match
        let before = try match.encodeContentState(
            Fixtures.json(
                #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 10, "kickoff": 0, "goals": []}"#))
        let minute = try match.patchContentState(before, with: ["minute": 11])
        let goal = try match.patchContentState(minute, with: ["homeScore": 1])
        #expect(
            PushPriority.wanted(for: .auto, hasAlert: false, changesSignificantField: !match.significantChanges(from: before, to: minute).isEmpty)
                == .low)
        #expect(
            PushPriority.wanted(for: .auto, hasAlert: false, changesSignificantField: !match.significantChanges(from: minute, to: goal).isEmpty)
                == .high)
    }

    @Test func budgetDowngradesInASlidingWindow() {
        var budget = HighPriorityBudget(limit: 3, window: 3600)
        for minute in 0..<3 {
            #expect(budget.admit(.high, now: t0.addingTimeInterval(Double(minute) * 60)) == PriorityDecision(priority: .high, downgraded: false))
        }
        #expect(budget.remaining(now: t0.addingTimeInterval(180)) == 0)
        #expect(budget.admit(.high, now: t0.addingTimeInterval(180)) == PriorityDecision(priority: .low, downgraded: true))
        #expect(budget.admit(.low, now: t0.addingTimeInterval(181)) == PriorityDecision(priority: .low, downgraded: false))
        // The first send leaves the window exactly one hour later.
        #expect(budget.admit(.high, now: t0.addingTimeInterval(3599)) == PriorityDecision(priority: .low, downgraded: true))
        #expect(budget.admit(.high, now: t0.addingTimeInterval(3600)) == PriorityDecision(priority: .high, downgraded: false))
        #expect(budget.sends.count == 3)
        #expect(budget.remaining(now: t0.addingTimeInterval(3660)) == 1)
    }

    @Test func budgetPersistsAsJSON() throws {
        var budget = HighPriorityBudget(limit: 2)
        _ = budget.admit(.high, now: t0)
        let copy = try JSONDecoder().decode(HighPriorityBudget.self, from: JSONEncoder().encode(budget))
        #expect(copy == budget)
    }
}

@Suite struct ExpirationAndQuotaTests {
    @Test func expiration() {
        let policy = ExpirationPolicy(timeToLive: 600)
        #expect(policy.expiration(for: .notStored, now: t0) == 0)
        #expect(policy.expiration(for: .mostRecent, now: t0.addingTimeInterval(0.7)) == 1_800_000_600)
        #expect(ExpirationPolicy(timeToLive: 24 * 3600).expiration(for: .mostRecent, now: t0) == 1_800_000_000 + 8 * 3600)
        #expect(ExpirationPolicy(timeToLive: -5).timeToLive == 0)
        #expect(MessageStoragePolicy(rawValue: "none") == .notStored)
        #expect(MessageStoragePolicy.mostRecent.apnsValue == 1 && MessageStoragePolicy(apnsValue: 0) == .notStored)
        #expect(MessageStoragePolicy(apnsValue: 2) == nil)
    }

    @Test func quotaWarnsAtEightyPercentAndRefusesAtTheLimit() throws {
        let quota = ChannelQuota()
        #expect(try quota.admitCreate(inUse: 0) == .ok)
        #expect(try quota.admitCreate(inUse: 7_998) == .ok)
        #expect(try quota.admitCreate(inUse: 7_999) == .nearLimit(inUse: 8_000, limit: 10_000))
        #expect(try quota.admitCreate(inUse: 9_999) == .nearLimit(inUse: 10_000, limit: 10_000))
        #expect(throws: ChannelQuotaExhausted(inUse: 10_000, limit: 10_000)) { try quota.admitCreate(inUse: 10_000) }
        #expect(throws: ChannelQuotaExhausted(inUse: 12, limit: 10)) { try ChannelQuota(limit: 10).admitCreate(inUse: 12) }
    }

    @Test func backoffGrowsIsCappedAndJittered() {
        let backoff = RetryBackoff(base: 1, maximum: 60)
        var random = SplitMix64(seed: 1)
        for attempt in 1...20 {
            let full = min(60, pow(2, Double(attempt - 1)))
            let delay = backoff.delay(attempt: attempt, using: &random)
            #expect(delay >= full / 2 && delay <= full, "attempt \(attempt): \(delay)")
        }
        let delays = (0..<20).map { _ in backoff.delay(attempt: 8, using: &random) }
        #expect(Set(delays).count > 1)
        #expect(backoff.delay(attempt: 1_000_000) <= 60)
    }
}
