import APNs
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Testing

@testable import APNsSimulator

/// Every rejection the simulator can give (every row of each API's table), sent over the wire through `APNsClient`,
/// and the client's classification held against what Apple's descriptions imply. The expectations are written here
/// from Apple's pages, not from the client's retry policy:
///   https://developer.apple.com/documentation/usernotifications/handling-error-responses-from-apns
///   https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
///   https://developer.apple.com/documentation/usernotifications/establishing-a-token-based-connection-to-apns
@Suite struct SimulatorRejectionClassificationTests {
    /// What a provider should do after an answer, in the house style's four classes.
    enum Class: String, CustomStringConvertible {
        case permanent, retryAfterBackoff, refreshToken, reconnect
        var description: String { rawValue }
    }

    /// Apple's implied class of each reason text, whichever API it came from.
    static func appleClass(_ text: String) -> Class {
        switch text {
        // "The provider token is stale and a new token should be generated."
        case "ExpiredProviderToken": .refreshToken
        // "too many requests were received" / "made consecutively to the same device token": wait, then send again.
        case "TooManyRequests": .retryAfterBackoff
        // "Update the authentication token no more than once every 20 minutes": wait, keep the token, send again.
        case "TooManyProviderTokenUpdates": .retryAfterBackoff
        // "An unexpected error occurred" / "The service is unavailable": the request was not done; send it later.
        case "InternalServerError", "ServiceUnavailable", "Service Unavailable": .retryAfterBackoff
        // "The server is shutting down and unavailable": go to another server, i.e. a new connection.
        case "Shutdown": .reconnect
        // "Idle timeout": the connection was idle too long; a new one carries the request.
        case "IdleTimeout": .reconnect
        // "...isn't related to the key ID of the token used in the first push of this connection. To use this token,
        // open a new connection."
        case "UnrelatedKeyIdInToken": .reconnect
        // Everything else says what is wrong with the request, the token, the certificate or the device token:
        // sending it again unchanged gets the same answer.
        default: .permanent
        }
    }

    static func clientClass(_ result: APNsResult) -> Class? {
        var random = SystemRandomNumberGenerator()
        let policy = RetryPolicy(maxAttempts: 3, baseDelay: .milliseconds(1), maxDelay: .milliseconds(2))
        switch policy.action(after: result, attempt: 1, tokenRefreshed: false, random: &random) {
        case .done: return nil
        case .giveUp: return .permanent
        case .retry: return .retryAfterBackoff
        case .refreshTokenAndRetry: return .refreshToken
        case .reconnectAndRetry: return .reconnect
        }
    }

    /// Where today's client disagrees with Apple's description; the test records it as a known issue, and fails
    /// (the issue is no longer seen) once the client agrees.
    static let knownDisagreements: Set<String> = []

    @Test(arguments: SimulatorAPI.allCases)
    func everyRejectionIsClassifiedAsAppleImplies(_ api: SimulatorAPI) async throws {
        let folder = SimulatorTestHost.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(configuration: SimulatorTestHost.configuration(folder))
        let client = try APNsClient(
            signingKey: simulator.files.apnsSigningKey(), endpoints: simulator.endpoints,
            configuration: .init(attemptTimeout: .seconds(10), retryPolicy: RetryPolicy(maxAttempts: 1)))
        let bundle = SimulatorTestHost.bundleID
        let request: APNsRequest
        switch api {
        case .channelManagement:
            request = try .listChannels(bundleID: bundle)
        case .broadcast:
            let channel = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored)
            request = try .broadcast(
                bundleID: bundle, channelID: channel, payload: Array(#"{"aps":{"event":"update"}}"#.utf8),
                expiration: 0, priority: .powerConsidered)
        case .devicePush:
            request = try .devicePush(
                bundleID: bundle, deviceToken: APNsDeviceToken(hex: String(repeating: "ab", count: 32)),
                payload: Array(#"{"aps":{"event":"update"}}"#.utf8), priority: .powerConsidered)
        }
        #expect(try await client.send(request).acceptance != nil, "the request is accepted when nothing is scripted")

        let reasons = api.documentedReasons
        #expect(reasons.count == (api == .devicePush ? 31 : 28))
        for reason in reasons {
            let answer = try #require(api.answer(for: reason))
            #expect(simulator.engine.rejectNext(reason, on: api))
            let outcome = try await client.send(request)
            #expect(outcome.attempts.count == 1)
            let failure = try #require(outcome.result.failure, "\(api) \(answer)")
            #expect(failure.status == answer.status, "\(api) \(answer)")
            // The client reads the reason as this API spells it (an unknown text would be kept as .other).
            if case .other(let text)? = failure.reason { Issue.record("\(api): the client does not know \(text)") }
            #expect(failure.reason?.text.replacingOccurrences(of: " ", with: "") == answer.text.replacingOccurrences(of: " ", with: ""))
            if answer.status == 410 { #expect(failure.timestamp != nil, "\(answer): a 410 carries its timestamp") }

            let expected = Self.appleClass(answer.text)
            let actual = Self.clientClass(outcome.result)
            if Self.knownDisagreements.contains(answer.text) {
                withKnownIssue("\(api) \(answer): Apple implies \(expected), the client says \(actual.map(String.init(describing:)) ?? "done")") {
                    #expect(actual == expected)
                }
            } else {
                #expect(
                    actual == expected,
                    "\(api) \(answer): Apple implies \(expected), the client says \(actual.map(String.init(describing:)) ?? "done")")
            }
        }
        #expect(try await client.send(request).acceptance != nil, "scripted answers are used up")
        await client.shutdown()
        await simulator.shutdown()
    }
}
