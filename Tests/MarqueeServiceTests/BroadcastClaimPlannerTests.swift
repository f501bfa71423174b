import APNs
import Foundation
import MarqueeCore
import Testing

@testable import MarqueeService
@testable import MarqueeStore

/// The dispatcher's decisions for one claim, without I/O: every plan and every kind of APNs answer.
@Suite struct BroadcastClaimPlannerTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let planner = BroadcastClaimPlanner(
        conflation: BroadcastDispatcherConfiguration.conflation(interval: 1),
        highPriorityBudget: 2, highPriorityWindow: 3600)
    static let schema = try! ObjectSchema(json: [
        "home": ["type": "int", "significant": true], "away": ["type": "int", "significant": true],
        "minute": "int?",
    ])

    static func claim(
        state: JSONValue = ["home": 1, "away": 0], alert: JSONValue? = nil, priority: RequestedPriority = .auto,
        action: UpdateAction = .update, pending: [PendingUpdate] = [], lastBroadcastAt: Date? = nil,
        lastApsTimestamp: Int64? = nil, apsTimestamp: Int64? = nil
    ) -> ClaimedBroadcast {
        ClaimedBroadcast(
            outboxID: 1, claimToken: UUID(), claimedUntil: now + 120, attempts: 0, eventID: 7, appID: 1, attributeTypeID: 1,
            channelID: 3, apnsChannelID: "ch==", storagePolicy: .mostRecent, channelState: .open,
            lastApsTimestamp: lastApsTimestamp, apsTimestamp: apsTimestamp, lastBroadcastAt: lastBroadcastAt,
            update: OutboxUpdate(
                id: 10, action: action, contentState: state, alert: alert, staleDate: nil, dismissalDate: nil,
                relevanceScore: nil, priority: priority, occurredAt: now, receivedAt: now),
            pending: pending)
    }

    static func facts(
        _ claim: ClaimedBroadcast, memory: ChannelMemory? = nil, schema: ObjectSchema? = BroadcastClaimPlannerTests.schema,
        stopping: Bool = false
    ) -> ClaimFacts {
        ClaimFacts(claim: claim, memory: memory, schema: schema, now: now, stopping: stopping)
    }

    func sent(_ plan: ClaimPlan) -> PlannedBroadcast? {
        if case .send(let planned) = plan { return planned }
        Issue.record("not a send: \(plan)")
        return nil
    }

    @Test func tooSoonAfterTheLastBroadcastIsPostponedUnlessUrgent() {
        let recent = Self.claim(lastBroadcastAt: Self.now - 0.4)
        guard case .postpone(let delay) = Self.planner.plan(Self.facts(recent)) else {
            Issue.record("not postponed")
            return
        }
        #expect(delay > 0.5 && delay <= 0.6)
        let urgent = Self.claim(alert: ["title": "Goal", "body": "1-0"], lastBroadcastAt: Self.now - 0.4)
        #expect(sent(Self.planner.plan(Self.facts(urgent)))?.priority == .high)
    }

    @Test func aStoppingServiceGivesTheRowBack() {
        #expect(Self.planner.plan(Self.facts(Self.claim(), stopping: true)) == .release)
    }

    @Test func aPayloadThatCannotFitIsRefusedAndACarriedAlertIsDroppedToFit() throws {
        let huge: JSONValue = ["home": 1, "away": 0, "minute": .string(String(repeating: "x", count: 6000))]
        guard case .refuse(let reason) = Self.planner.plan(Self.facts(Self.claim(state: huge), schema: nil)) else {
            Issue.record("not refused")
            return
        }
        #expect(reason.contains("5120"))
        // A state that fits only without the alert carried from an older pending update.
        let big: JSONValue = ["home": 1, "away": 0, "minute": .string(String(repeating: "x", count: 4900))]
        let carried = Self.claim(
            state: big,
            pending: [
                PendingUpdate(
                    id: 9, priority: .auto, alert: ["title": .string(String(repeating: "g", count: 300)), "body": "Goal"],
                    occurredAt: Self.now - 1),
                PendingUpdate(id: 10, priority: .auto, alert: nil, occurredAt: Self.now),
            ])
        let planned = try #require(sent(Self.planner.plan(Self.facts(carried, schema: nil))))
        #expect(planned.droppedAlert && planned.conflated == 1 && planned.body.count <= 5120)
        #expect(planned.alertUpdateID == nil && !planned.carriesAlert)
    }

    /// The update whose alert a broadcast carries: its own, else the one it conflates, recorded so mirroring sends it too.
    @Test func aBroadcastNamesTheUpdateWhoseAlertItCarries() throws {
        let goal: JSONValue = ["title": "Goal", "body": "1-0"]
        let conflating = Self.claim(
            pending: [
                PendingUpdate(id: 9, priority: .auto, alert: goal, occurredAt: Self.now - 1),
                PendingUpdate(id: 10, priority: .auto, alert: nil, occurredAt: Self.now),
            ])
        let carried = try #require(sent(Self.planner.plan(Self.facts(conflating))))
        #expect(carried.alertUpdateID == 9 && carried.carriesAlert && carried.conflated == 1)
        let own = try #require(sent(Self.planner.plan(Self.facts(Self.claim(alert: goal)))))
        #expect(own.alertUpdateID == 10 && own.carriesAlert)
        let none = try #require(sent(Self.planner.plan(Self.facts(Self.claim()))))
        #expect(none.alertUpdateID == nil && !none.carriesAlert)
    }

    @Test func apsTimestampsComeFromTheClaimUnlessThisInstanceSentALaterOne() throws {
        let budget = HighPriorityBudget(limit: 2, window: 3600)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(apsTimestamp: 500))))?.apsTimestamp == 500)
        let later = ChannelMemory(lastApsTimestamp: 600, lastState: nil, lastSentAt: nil, budget: budget)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(apsTimestamp: 500), memory: later)))?.apsTimestamp == 601)
        let fresh = try #require(sent(Self.planner.plan(Self.facts(Self.claim(lastApsTimestamp: Int64(Self.now.timeIntervalSince1970) + 5)))))
        #expect(fresh.apsTimestamp == Int64(Self.now.timeIntervalSince1970) + 6)
    }

    @Test func autoIsTenForAnAlertOrASignificantChangeWithinTheBudget() throws {
        let budget = HighPriorityBudget(limit: 2, window: 3600)
        let seen = ChannelMemory(lastApsTimestamp: nil, lastState: ["home": 1, "away": 0], lastSentAt: nil, budget: budget)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(state: ["home": 1, "away": 0, "minute": 5]), memory: seen)))?.priority == .low)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(state: ["home": 2, "away": 0]), memory: seen)))?.priority == .high)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(state: ["home": 2, "away": 0]), memory: seen, schema: nil)))?.priority == .low)
        #expect(
            sent(
                Self.planner.plan(Self.facts(Self.claim(state: ["home": 1, "away": 0], alert: ["title": "Card", "body": "Red card"]), memory: seen)))?
                .priority == .high)
        #expect(sent(Self.planner.plan(Self.facts(Self.claim(priority: .low), memory: seen)))?.priority == .low)
        // The budget spent: wanted 10, sent 5.
        var spent = budget
        _ = spent.admit(.high, now: Self.now - 10)
        _ = spent.admit(.high, now: Self.now - 5)
        let over = try #require(
            sent(
                Self.planner.plan(
                    Self.facts(
                        Self.claim(priority: .high),
                        memory: ChannelMemory(lastApsTimestamp: nil, lastState: nil, lastSentAt: nil, budget: spent)))))
        #expect(over.priority == .low && over.downgraded)
    }

    @Test func everyKindOfAnswerHasItsPlan() {
        func answer(_ status: Int, _ reason: APNsReason, retryAfter: String? = nil) -> APNsVerdict {
            APNsExchange(
                APNsExchangeAttempt(
                    result: APNsResult(
                        response: APNsResponse(
                            status: status, headers: retryAfter.map { ["retry-after": $0] } ?? [:],
                            body: APNsErrorBody(reason: reason).json), operation: .broadcast))
            ).verdict
        }
        let planner = Self.planner
        #expect(planner.afterAnswer(.accepted, retryDelay: 1) == .record)
        #expect(planner.afterAnswer(answer(400, .channelNotRegistered), retryDelay: 1) == .channelLost)
        #expect(planner.afterAnswer(answer(400, .badRequestPayload), retryDelay: 1) == .reject(reason: "BadRequestPayload"))
        #expect(planner.afterAnswer(answer(403, .invalidProviderToken), retryDelay: 1) == .parkApp(reason: "InvalidProviderToken"))
        #expect(planner.afterAnswer(answer(503, .serviceUnavailable), retryDelay: 2) == .retry(after: 2))
        #expect(planner.afterAnswer(answer(429, .tooManyRequests, retryAfter: "30"), retryDelay: 2) == .retry(after: 30))
        #expect(planner.afterAnswer(answer(429, .tooManyProviderTokenUpdates), retryDelay: 2) == .retry(after: 2))
        #expect(planner.afterAnswer(answer(403, .expiredProviderToken), retryDelay: 2) == .retry(after: 2))
        #expect(planner.afterAnswer(.unknown(reason: "timeout"), retryDelay: 3) == .retry(after: 3))
        #expect(planner.afterAnswer(.notDone(reason: "GOAWAY", retryAfter: nil), retryDelay: 3) == .retry(after: 3))
    }
}
