// A device-push double for in-process tests of the audience's jobs: it records every push it is handed, in order,
// and answers each as the test says (200 unless told otherwise), without a network.
import APNs
import Foundation
import MarqueeCore
import MarqueeService
import Synchronization

/// Records device pushes and answers them as scripted.
public final class RecordingDevicePushAPNs: DevicePushAPNs {
    /// One push as handed to APNs.
    public struct Push: Sendable {
        public let appID: Int
        public let token: String
        public let payload: [UInt8]
        public let expiration: Int64
        public let priority: PushPriority
        /// The payload's `aps` dictionary.
        public var aps: [String: Any] {
            ((try? JSONSerialization.jsonObject(with: Data(payload))) as? [String: Any])?["aps"] as? [String: Any] ?? [:]
        }
    }

    private let recorded = Mutex<[Push]>([])
    private let answer: Mutex<@Sendable (_ token: String, _ sent: Int) -> APNsResult>

    /// `answer` says what APNs answers the `sent`-th push (from 1) to a token; default: 200.
    public init(answer: @escaping @Sendable (_ token: String, _ sent: Int) -> APNsResult = { _, _ in RecordingDevicePushAPNs.accepted }) {
        self.answer = Mutex(answer)
    }

    /// Tokens whose pushes are held unanswered (as requests in flight are) until `releaseHeld()`.
    private let held = Mutex<(tokens: Set<String>, waiting: [CheckedContinuation<Void, Never>])>(([], []))

    /// Holds the pushes to `tokens` unanswered from now on, until `releaseHeld()`.
    public func hold(_ tokens: Set<String>) { held.withLock { $0.tokens = tokens } }

    /// Answers the held pushes (as `answer` says), and holds no more.
    public func releaseHeld() {
        let waiting = held.withLock { held in
            held.tokens = []
            defer { held.waiting = [] }
            return held.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Pushes held unanswered now.
    public var heldCount: Int { held.withLock { $0.waiting.count } }

    /// Every push so far, in the order they were handed over.
    public var pushes: [Push] { recorded.withLock { $0 } }

    /// Answers from now on as `answer` says.
    public func answer(with answer: @escaping @Sendable (_ token: String, _ sent: Int) -> APNsResult) { self.answer.withLock { $0 = answer } }

    public func devicePush(
        app: PipelineApp, token: String, payload: [UInt8], expiration: Int64, priority: PushPriority, retryPolicy: RetryPolicy
    ) async throws -> APNsExchange {
        let sent = recorded.withLock { pushes in
            pushes.append(Push(appID: app.id, token: token, payload: payload, expiration: expiration, priority: priority))
            return pushes.count { $0.token == token }
        }
        await withCheckedContinuation { continuation in
            let resumeNow = held.withLock { held in
                guard held.tokens.contains(token) else { return true }
                held.waiting.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
        let result = answer.withLock { $0 }(token, sent)
        return APNsExchange(APNsExchangeAttempt(result: result, requestID: UUID().uuidString, uniqueID: UUID().uuidString))
    }

    /// APNs' 200.
    public static let accepted = APNsResult(response: APNsResponse(status: 200), operation: .devicePush)

    /// APNs' refusal with `status` and `reason`.
    public static func refused(_ status: Int, _ reason: APNsReason) -> APNsResult {
        APNsResult(response: APNsResponse(status: status, body: APNsErrorBody(reason: reason).json), operation: .devicePush)
    }
}
