import APNs
import Foundation
import MarqueeCore
import Network
import Testing

@testable import MarqueeService

/// One reading of an APNs answer: every documented reason, for every operation, read into one verdict, and what each
/// sender's planner makes of it (docs/apns.md#errors).
struct APNsVerdictTests {
    /// The app's credentials are at fault: every 403 but an expired token (refresh, retry once) and an unrelated key
    /// id (new connection, retry once).
    static let parks: Set<APNsReason> = [
        .badCertificate, .badCertificateEnvironment, .forbidden, .invalidProviderToken, .missingProviderToken, .topicMismatch,
        .badEnvironmentKeyInToken,
    ]
    /// APNs did nothing: what the client's own retry did not mend may go again.
    static let notDone: Set<APNsReason> = [
        .expiredProviderToken, .unrelatedKeyIdInToken, .tooManyProviderTokenUpdates, .internalServerError, .serviceUnavailable, .shutdown,
        .idleTimeout,
    ]

    static func outcome(_ status: Int, _ reason: APNsReason, _ operation: APNsOperation, retryAfter: String? = nil) -> APNsExchange {
        APNsExchange(
            APNsExchangeAttempt(
                result: APNsResult(
                    response: APNsResponse(
                        status: status, headers: retryAfter.map { ["retry-after": $0] } ?? [:], body: APNsErrorBody(reason: reason).json),
                    operation: operation)))
    }

    static func expected(_ reason: APNsReason, status: Int) -> APNsVerdict {
        let text = reason.text
        if parks.contains(reason) { return .parkCredentials(reason: text) }
        if notDone.contains(reason) { return .notDone(reason: text, retryAfter: nil) }
        switch reason {
        case .tooManyRequests: return .throttled(reason: text, retryAfter: nil)
        case .expiredToken, .unregistered: return .rejected(reason: text, refusal: .gone(reason: text, apnsTimestampMilliseconds: nil))
        case .badDeviceToken: return .rejected(reason: text, refusal: .badDeviceToken)
        case .deviceTokenNotForTopic: return .rejected(reason: text, refusal: .notForTopic)
        default:
            #expect(status < 500, "\(text) is not a refusal")
            return .rejected(reason: text, refusal: nil)
        }
    }

    @Test func everyDocumentedReasonForEveryOperationHasOneVerdictAndEachSenderItsNextStep() {
        #expect(APNsReason.documented.count >= 40)
        let starts = StartPlanner()
        let mirroring = MirrorPlanner()
        let broadcasts = BroadcastClaimPlannerTests.planner
        for operation in APNsOperation.allCases {
            for (reason, text, status) in APNsReason.documented {
                let outcome = Self.outcome(status, reason, operation)
                let verdict = outcome.verdict
                let expected = Self.expected(reason, status: status)
                #expect(verdict == expected, "\(operation) \(status) \(text)")
                let start = starts.afterAnswer(verdict, attempt: 1)
                let mirrored = mirroring.afterAnswer(verdict)
                let broadcast = broadcasts.afterAnswer(verdict, retryDelay: 2)
                let create = CreateAnswer(outcome, backoff: 2)
                let delete = DeleteAnswer(outcome, backoff: 2)
                switch expected {
                case .parkCredentials:
                    #expect(start.parkApp && start.state == .planned, "\(text)")
                    #expect(mirrored == .parkApp && broadcast == .parkApp(reason: text), "\(text)")
                    #expect(create == .parkApp(reason: text) && delete == .parkApp(reason: text), "\(text)")
                case .notDone:
                    #expect(start.state == .planned && start.backOffChunk && !start.parkApp, "\(text)")
                    #expect(mirrored == .backOffChunk && broadcast == .retry(after: 2), "\(text)")
                    guard case .retry = create, case .retry = delete else {
                        Issue.record("\(text): a create or delete APNs did not act on goes again")
                        continue
                    }
                case .throttled:
                    #expect(start.state == .planned && start.retryAfter == 30, "\(text)")
                    #expect(mirrored == .retryTokenLater(30) && broadcast == .retry(after: 2), "\(text)")
                case .rejected(_, let refusal):
                    #expect(start.state == .rejected && start.refusal == refusal, "\(text)")
                    #expect(mirrored == .failed(reason: text, refusal: refusal), "\(text)")
                    let lost = reason == .channelNotRegistered
                    #expect(broadcast == (lost ? .channelLost : .reject(reason: text)), "\(text)")
                    if reason == .cannotCreateChannelConfig {
                        #expect(create == .quotaExhausted)
                    } else {
                        guard case .refusedForGood = create else {
                            Issue.record("\(text): a refused create is for good")
                            continue
                        }
                    }
                    if lost { #expect(delete == .notRegistered) }
                case .accepted, .unknown:
                    Issue.record("\(text): an APNs refusal is neither accepted nor unknown")
                }
            }
        }
        // APNs' Retry-After is kept.
        #expect(Self.outcome(429, .tooManyRequests, .devicePush, retryAfter: "60").verdict == .throttled(reason: "TooManyRequests", retryAfter: 60))
        #expect(Self.outcome(503, .serviceUnavailable, .broadcast, retryAfter: "5").verdict == .notDone(reason: "ServiceUnavailable", retryAfter: 5))
    }

    @Test func answersWithoutAReasonAndConnectionsThatNeverCarriedTheRequest() {
        func attempt(_ result: APNsResult, unknown: Bool) -> APNsExchange {
            APNsExchange(APNsExchangeAttempt(result: result, outcomeUnknown: unknown))
        }
        #expect(
            APNsExchange(APNsExchangeAttempt(result: APNsResult(response: APNsResponse(status: 200), operation: .devicePush))).verdict
                == .accepted)
        // A proxy's 502 or 504 after the request was written: APNs may have acted.
        for status in [502, 504] {
            let result = APNsResult(response: APNsResponse(status: status), operation: .devicePush)
            guard case .unknown = attempt(result, unknown: true).verdict else {
                Issue.record("\(status) leaves doubt")
                continue
            }
        }
        // Written and unanswered: unknown; a timeout always is.
        guard case .unknown = attempt(APNsResult(transportFailure: .timeout), unknown: false).verdict,
            case .unknown = attempt(APNsResult(transportFailure: .io("reset")), unknown: true).verdict
        else {
            Issue.record("a request written and unanswered is unknown")
            return
        }
        // A connection that failed before the request could be written proves nothing was done: refused, a TLS
        // handshake failure, a rejected certificate, ALPN refused, a GOAWAY below the stream.
        for error in [
            NetworkError.connectFailed("refused"), .tls("handshake failure"), .certificateRejected("unable to get local issuer certificate"),
            .alpnRefused, .goAway(errorCode: 0, debugData: ""), .requestNotSent("closed"),
        ] {
            #expect(APNsClient.provesNotActedOn(error), "\(error)")
            let verdict = attempt(APNsResult(transportFailure: .io("\(error)")), unknown: !APNsClient.provesNotActedOn(error)).verdict
            guard case .notDone = verdict else {
                Issue.record("\(error): \(verdict)")
                continue
            }
            // So a create or a start may go again.
            guard case .retry = CreateAnswer(attempt(APNsResult(transportFailure: .io("\(error)")), unknown: false), backoff: 1) else {
                Issue.record("\(error): a create that never left is retried")
                continue
            }
            #expect(StartPlanner().afterAnswer(verdict, attempt: 1).state == .planned)
        }
        for error in [NetworkError.connectionClosed, .streamReset(errorCode: 2), .timedOut] {
            #expect(!APNsClient.provesNotActedOn(error), "\(error) may come after the request was written")
        }
    }
}
