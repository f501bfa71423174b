import APNs
import Foundation
import MarqueeCore
import Testing

@testable import MarqueeService
@testable import MarqueeStore

/// The scheduler's decisions without I/O: every state a read of due work can bring for each kind of work,
/// and every kind of APNs answer to a create and a delete.
@Suite struct SweepPlannerTests {
    static func channel(_ id: Int, _ state: StoredChannelState, attempts: Int = 1, appID: Int = 1) -> ChannelRecord {
        ChannelRecord(
            id: id, appID: appID, eventID: id, apnsChannelID: "ch\(id)==", storagePolicy: .mostRecent, state: state,
            attempts: attempts, nextAttemptAt: nil, requestedAt: nil, openedAt: nil, endedAt: nil, deletedAt: nil,
            firstSeenAt: nil, lastApsTimestamp: nil, lastError: nil, lastErrorAt: nil, createdAt: Date(timeIntervalSince1970: 0))
    }

    /// For each state a row of the kind may be in: what the planner makes of it (`-`: skipped as moved on,
    /// `none`: no step needed).
    @Test(arguments: StoredChannelState.allCases)
    func everyStateOfEveryKindOfChannelWork(state: StoredChannelState) {
        var work = SchedulerWork()
        work.plannedChannels = [Self.channel(1, state)]
        work.retriesDue = [Self.channel(2, state)]
        work.deletionsDue = [Self.channel(3, state)]
        let plan = SweepPlanner.plan(work)
        func outcome(_ steps: [ChannelStep], _ id: Int) -> String {
            if let step = steps.first(where: { $0.channel.id == id }) { return "\(step.after.state.rawValue) \(step.action)" }
            return plan.skipped.contains { $0.channel.id == id } ? "-" : "none"
        }
        let expected: [StoredChannelState: (create: String, retry: String, delete: String)] = [
            .lifecycle(.planned): ("creating createChannel(attempt: 1)", "none", "-"),
            .lifecycle(.creating): ("none", "creating createChannel(attempt: 2)", "-"),
            .lifecycle(.createUnknown): ("none", "none", "-"),
            .lifecycle(.createFailed): ("none", "none", "-"),
            .lifecycle(.open): ("none", "none", "-"),
            .lifecycle(.ending): ("-", "none", "-"),
            .lifecycle(.ended): ("-", "none", "deleting deleteChannel(attempt: 1)"),
            .lifecycle(.deleting): ("-", "deleting deleteChannel(attempt: 2)", "none"),
            .lifecycle(.deleted): ("-", "none", "none"),
            .lifecycle(.lost): ("-", "none", "-"),
            .unknown: ("none", "none", "none"),  // no lifecycle: never planned from due work
        ]
        let row = expected[state]!
        #expect(outcome(plan.creates, 1) == row.create, "planned-channel work in \(state)")
        #expect(outcome(plan.retries, 2) == row.retry, "retry work in \(state)")
        #expect(outcome(plan.deletions, 3) == row.delete, "deletion work in \(state)")
    }

    @Test func unresolvedCreatesAreReconciledPerAppAndEventsPassThrough() {
        var work = SchedulerWork()
        work.unresolvedCreates = [
            Self.channel(1, .lifecycle(.createUnknown), appID: 2), Self.channel(2, .lifecycle(.createUnknown), appID: 1),
            Self.channel(3, .lifecycle(.createUnknown), appID: 2),
        ]
        let plan = SweepPlanner.plan(work)
        #expect(plan.reconciles.map(\.appID) == [1, 2])
        #expect(plan.reconciles.map { $0.unresolved.map(\.id) } == [[2], [1, 3]])
        #expect(SweepPlanner.createSteps(for: [Self.channel(9, .lifecycle(.planned))]).creates.map(\.action) == [.createChannel(attempt: 1)])
    }

    static func outcome(_ result: APNsResult, unknown: Bool = false) -> APNsExchange {
        APNsExchange(APNsExchangeAttempt(result: result, outcomeUnknown: unknown))
    }

    static func answer(_ status: Int, _ reason: APNsReason, operation: APNsOperation, retryAfter: String? = nil) -> APNsResult {
        APNsResult(
            response: APNsResponse(
                status: status, headers: retryAfter.map { ["retry-after": $0] } ?? [:],
                body: APNsErrorBody(reason: reason).json), operation: operation)
    }

    @Test func everyKindOfAnswerToACreate() {
        let created = APNsResult(response: APNsResponse(status: 201, headers: ["apns-channel-id": "new=="]), operation: .createChannel)
        #expect(CreateAnswer(Self.outcome(created), backoff: 2) == .opened(apnsChannelID: "new=="))
        #expect(CreateAnswer(Self.outcome(Self.answer(400, .cannotCreateChannelConfig, operation: .createChannel)), backoff: 2) == .quotaExhausted)
        guard case .refusedForGood = CreateAnswer(Self.outcome(Self.answer(400, .featureNotEnabled, operation: .createChannel)), backoff: 2) else {
            Issue.record("FeatureNotEnabled is for good")
            return
        }
        #expect(
            CreateAnswer(Self.outcome(Self.answer(403, .invalidProviderToken, operation: .createChannel)), backoff: 2)
                == .parkApp(reason: "InvalidProviderToken"), "a refused key parks the app")
        // Written and unanswered: unknown, never repeated. A timeout always is.
        guard case .unknown = CreateAnswer(Self.outcome(APNsResult(transportFailure: .timeout)), backoff: 2) else {
            Issue.record("a timed-out create is unknown")
            return
        }
        guard case .unknown = CreateAnswer(Self.outcome(APNsResult(transportFailure: .io("reset")), unknown: true), backoff: 2) else {
            Issue.record("a create written and unanswered is unknown")
            return
        }
        // Proven not acted on: a retry after the backoff, or APNs' Retry-After when longer.
        guard case .retry(_, let after) = CreateAnswer(Self.outcome(APNsResult(transportFailure: .io("refused"))), backoff: 2), after == 2 else {
            Issue.record("a create never written is retried")
            return
        }
        guard
            case .retry(_, let later) = CreateAnswer(
                Self.outcome(Self.answer(429, .tooManyRequests, operation: .createChannel, retryAfter: "60")),
                backoff: 2), later == 60
        else {
            Issue.record("429 waits for Retry-After")
            return
        }
        guard case .retry = CreateAnswer(Self.outcome(Self.answer(503, .serviceUnavailable, operation: .createChannel)), backoff: 2) else {
            Issue.record("503 is retried")
            return
        }
    }

    @Test func everyKindOfAnswerToADelete() {
        #expect(DeleteAnswer(Self.outcome(APNsResult(response: APNsResponse(status: 204), operation: .deleteChannel)), backoff: 1) == .deleted)
        #expect(DeleteAnswer(Self.outcome(Self.answer(400, .channelNotRegistered, operation: .deleteChannel)), backoff: 1) == .notRegistered)
        guard case .parkApp = DeleteAnswer(Self.outcome(Self.answer(403, .topicMismatch, operation: .deleteChannel)), backoff: 1) else {
            Issue.record("a refused key parks the app")
            return
        }
        // A delete is safe to repeat: a timeout, a 5xx, even a 400 other than ChannelNotRegistered, is retried.
        for result in [
            APNsResult(transportFailure: .timeout), Self.answer(500, .internalServerError, operation: .deleteChannel),
            Self.answer(400, .badChannelId, operation: .deleteChannel),
        ] {
            guard case .retry(_, let after) = DeleteAnswer(Self.outcome(result), backoff: 3), after == 3 else {
                Issue.record("\(result) is retried")
                continue
            }
        }
    }
}
