// The seam between Marquee's senders and APNs: the four channel operations the dispatcher and the scheduler need
// (`BroadcastChannelAPNs`) and the device push of the start fan-out and mirroring (`DevicePushAPNs`), each answered
// as one `APNsExchange`: APNs' final result and every attempt (one delivery row each), read once into an
// `APNsVerdict`. Production uses `APNsClientGateway` (over `APNsClient`); tests use in-memory doubles.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore

/// An app as the pipeline addresses it at APNs (bundle id and environment pick the host and key).
public struct PipelineApp: Sendable, Hashable {
    public var id: Int
    public var bundleID: String
    /// `development` or `production`.
    public var environment: String

    public init(id: Int, bundleID: String, environment: String) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
    }
}

/// One exchange with APNs (or a failed try to have one), as a delivery row records it.
public struct APNsExchangeAttempt: Sendable {
    public var result: APNsResult
    /// The `apns-request-id` sent or echoed.
    public var requestID: String?
    /// `apns-unique-id` of the answer, if any.
    public var uniqueID: String?
    public var latency: Duration
    /// APNs may have acted on it without an answer reaching us (`APNsAttempt.outcomeUnknown`).
    public var outcomeUnknown: Bool

    public init(
        result: APNsResult, requestID: String? = nil, uniqueID: String? = nil, latency: Duration = .zero,
        outcomeUnknown: Bool = false
    ) {
        self.result = result
        self.requestID = requestID
        self.uniqueID = uniqueID
        self.latency = latency
        self.outcomeUnknown = outcomeUnknown
    }

    /// The HTTP status, when APNs answered.
    public var status: Int? { result.acceptance?.status ?? result.failure?.status }

    /// APNs' reason, or the local cause of a missing answer (for `deliveries.reason`).
    public var reasonText: String? {
        guard let failure = result.failure else { return nil }
        if let reason = failure.reason { return reason.text }
        switch failure.cause {
        case .timeout: return "timeout"
        case .io(let detail): return "io: \(detail)"
        case .malformedAnswer(_, let detail): return "malformed answer: \(detail)"
        case .answer, .goaway: return failure.status == nil ? "no answer" : nil
        }
    }
}

/// Everything that happened to one request: the final result and every attempt, in order.
public struct APNsExchange: Sendable {
    public var result: APNsResult
    public var attempts: [APNsExchangeAttempt]

    public init(result: APNsResult, attempts: [APNsExchangeAttempt]) {
        self.result = result
        self.attempts = attempts
    }

    /// One attempt with this result.
    public init(_ attempt: APNsExchangeAttempt) {
        self.init(result: attempt.result, attempts: [attempt])
    }

    public var acceptance: APNsAcceptance? { result.acceptance }
    /// The last attempt was written and no answer came (a timeout is always such a case): what APNs did is unknown.
    public var outcomeUnknown: Bool {
        result.acceptance == nil && (attempts.last?.outcomeUnknown == true || result.failure?.cause == .timeout)
    }
    public var failure: APNsFailure? { result.failure }
    public var reason: APNsReason? { result.failure?.reason }
}

extension APNsExchange {
    /// What happens next, read once from the outcome for every operation (docs/apns.md#errors).
    public var verdict: APNsVerdict {
        if acceptance != nil { return .accepted }
        guard let failure else { return .unknown(reason: "no answer") }
        let reason = failure.reason?.text ?? failure.status.map { "HTTP \($0)" } ?? attempts.last?.reasonText ?? "no answer"
        if case .credentialsFault = result { return .parkCredentials(reason: reason) }
        // Written and unanswered, or a 502/504 a proxy may have sent after APNs acted.
        if outcomeUnknown { return .unknown(reason: reason) }
        let retryAfter = failure.retryAfterSeconds.map(TimeInterval.init)
        // No answer, and proof that none was needed: the request never left (GOAWAY above its stream, a refused
        // stream, a connection that never carried it).
        guard let status = failure.status else { return .notDone(reason: reason, retryAfter: retryAfter) }
        switch result {
        case .tokenUpdatesTooFrequent, .refreshTokenAndRetry, .reconnect: return .notDone(reason: reason, retryAfter: retryAfter)
        default: break
        }
        switch (status, failure.reason) {
        case (429, _): return .throttled(reason: reason, retryAfter: retryAfter)
        case (500, _), (503, _): return .notDone(reason: reason, retryAfter: retryAfter)
        case (410, _): return .rejected(reason: reason, refusal: .gone(reason: reason, apnsTimestampMilliseconds: failure.timestamp))
        case (_, .badDeviceToken?): return .rejected(reason: reason, refusal: .badDeviceToken)
        case (_, .deviceTokenNotForTopic?): return .rejected(reason: reason, refusal: .notForTopic)
        case (500..., _): return .unknown(reason: reason)
        default: return .rejected(reason: reason, refusal: nil)
        }
    }
}

/// What the dispatcher and the scheduler need from APNs. Implementations retry transient failures as
/// they see fit and report every attempt; they throw only when no request could be made at all
/// (signing key unreadable, client shut down, task cancelled).
public protocol BroadcastChannelAPNs: Sendable {
    /// `POST /1/apps/{bundle}/channels`; the acceptance carries `channelID`.
    func createChannel(app: PipelineApp, storagePolicy: MessageStoragePolicy) async throws -> APNsExchange
    /// `DELETE /1/apps/{bundle}/channels` for one channel id.
    func deleteChannel(app: PipelineApp, channelID: String) async throws -> APNsExchange
    /// `GET /1/apps/{bundle}/all-channels`; the acceptance carries `channels`.
    func listChannels(app: PipelineApp) async throws -> APNsExchange
    /// `POST /4/broadcasts/apps/{bundle}` on a channel; `expiration` in Unix seconds (0: do not store).
    func broadcast(
        app: PipelineApp, channelID: String, payload: [UInt8], expiration: Int64,
        priority: PushPriority
    ) async throws -> APNsExchange
}

extension APNsExchangeAttempt {
    /// The delivery row of this attempt.
    func delivery(
        appID: Int, kind: DeliveryKind, channelID: Int?, updateID: Int? = nil, priority: Int? = nil,
        attempt: Int, apsTimestamp: Int64? = nil
    ) -> DeliveryDraft {
        DeliveryDraft(
            appID: appID, kind: kind, channelID: channelID, updateID: updateID,
            apnsRequestID: requestID.flatMap(UUID.init(uuidString:)), apnsUniqueID: uniqueID.flatMap(UUID.init(uuidString:)),
            status: status, reason: reasonText ?? (status == nil ? "no answer" : nil),
            latencyMicroseconds: Self.microseconds(latency), priority: priority, attempt: max(1, attempt),
            apsTimestamp: apsTimestamp)
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }
}
