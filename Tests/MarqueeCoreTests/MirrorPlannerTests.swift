import Foundation
import MarqueeCore
import Testing

/// Mirroring's decisions, without I/O.
struct MirrorPlannerTests {
    let planner = MirrorPlanner(throttleRetryDelay: 30, highPriorityBudget: 3, infrequentHighPriorityBudget: 1, window: 3600)
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func thePriorityTenBudgetIsCountedPerTokenAndSmallerWithoutFrequentPushes() {
        var window = TokenHighPriorityWindow()
        for _ in 0..<3 {
            let decided = planner.priority(.high, frequentPushes: true, window: window, now: now)
            #expect(decided.priority == .high)
            window = decided.windowIfAccepted
        }
        #expect(window == TokenHighPriorityWindow(startedAt: now, count: 3))
        let spent = planner.priority(.high, frequentPushes: true, window: window, now: now.addingTimeInterval(60))
        #expect(spent.priority == .low && spent.windowIfAccepted == window, "past the budget: priority 5, the window unchanged")
        let nextHour = planner.priority(.high, frequentPushes: true, window: window, now: now.addingTimeInterval(3600))
        #expect(nextHour.priority == .high && nextHour.windowIfAccepted.count == 1, "a new window")
        let infrequent = planner.priority(.high, frequentPushes: false, window: TokenHighPriorityWindow(startedAt: now, count: 1), now: now)
        #expect(infrequent.priority == .low, "frequentPushesEnabled false: the smaller budget")
        let low = planner.priority(.low, frequentPushes: true, window: TokenHighPriorityWindow(), now: now)
        #expect(low.priority == .low && low.windowIfAccepted == TokenHighPriorityWindow(), "a priority-5 broadcast uses no budget")
    }

    @Test func answersAndPassSteps() {
        #expect(planner.afterAnswer(.accepted) == .served)
        #expect(planner.afterAnswer(.throttled(reason: "TooManyRequests", retryAfter: nil)) == .retryTokenLater(30))
        #expect(planner.afterAnswer(.throttled(reason: "TooManyRequests", retryAfter: 90)) == .retryTokenLater(90), "APNs' Retry-After")
        #expect(planner.afterAnswer(.notDone(reason: "ServiceUnavailable", retryAfter: nil)) == .backOffChunk)
        #expect(planner.afterAnswer(.unknown(reason: "timeout")) == .sendInALaterPass, "the same timestamp twice is harmless")
        #expect(planner.afterAnswer(.parkCredentials(reason: "InvalidProviderToken")) == .parkApp)
        #expect(
            planner.afterAnswer(.rejected(reason: "Unregistered", refusal: .badDeviceToken))
                == .failed(reason: "Unregistered", refusal: .badDeviceToken))
        #expect(planner.next(planningDone: false, openChunks: 0) == .cutChunk)
        #expect(planner.next(planningDone: true, openChunks: 2) == .wait)
        #expect(planner.next(planningDone: true, openChunks: 0) == .finish)
    }
}
