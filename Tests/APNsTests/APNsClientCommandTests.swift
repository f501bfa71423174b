import Crypto
import Foundation
import MarqueeCommandLine
import MarqueeCore
import Network
import Testing

@testable import APNs
@testable import MarqueeCommands

/// `marquee apns ...` exit codes that need no APNs: usage, payload and file errors, and an unreachable host.
@Suite struct APNsClientCommandTests {
    static let root = Command("marquee", summary: "test root", subcommands: [apnsCommand])
    static let payload = #"{"aps":{"timestamp":1800000000,"event":"update","content-state":{"score":"1-0"}}}"#

    /// A fresh .p8 key in a temporary folder, and credentials pointing at a port nobody listens on.
    struct Setup {
        let folder: String
        let environment: [String: String]

        func run(_ arguments: String...) async -> ExitCode {
            await CommandRunner.run(APNsClientCommandTests.root, arguments: ["apns"] + arguments, environment: environment)
        }

        func close() async {
            let folder = self.folder
            try? await onOwnThread { try FileManager.default.removeItem(atPath: folder) }
        }
    }

    static func setup() async throws -> Setup {
        let folder = NSTemporaryDirectory() + "marquee-apns-cli-test-\(UUID().uuidString.prefix(8))"
        let keyFile = folder + "/AuthKey_ABC123DEFG.p8"
        let pem = try P256.SigningKey.generate().pemRepresentation
        try await onOwnThread {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
            try "{not json".write(toFile: folder + "/bad.json", atomically: true, encoding: .utf8)
        }
        return Setup(
            folder: folder,
            environment: [
                "MARQUEE_APNS_TEAM_ID": "DEF123GHIJ", "MARQUEE_APNS_KEY_ID": "ABC123DEFG", "MARQUEE_APNS_KEY_FILE": keyFile,
                "MARQUEE_APNS_BUNDLE": "com.example.live",
                // Port 1 on loopback: nothing listens, so a request that got past validation fails with 69, not 64-66.
                APNsEndpoints.pushURLVariable: "https://127.0.0.1:1", APNsEndpoints.managementURLVariable: "https://127.0.0.1:1",
            ])
    }

    @Test func badInputIsRefusedWithItsOwnExitCode() async throws {
        let s = try await Self.setup()
        defer { Task { await s.close() } }
        let channel = "Y2hhbm5lbA=="
        let big = #"{"aps":{"x":""# + String(repeating: "y", count: 5_200) + #""}}"#
        #expect(await s.run("broadcast", "--channel", channel, "--payload", "{not json") == .dataError)
        #expect(await s.run("broadcast", "--channel", channel, "--payload-file", s.folder + "/bad.json") == .dataError)
        #expect(await s.run("broadcast", "--channel", channel, "--payload", "[1]") == .dataError)
        #expect(await s.run("broadcast", "--channel", channel, "--payload", big) == .dataError)
        #expect(
            await s.run(
                "push", "--token", String(repeating: "ab", count: 32), "--payload",
                #"{"aps":{"x":""# + String(repeating: "y", count: 4_100) + #""}}"#) == .dataError)
        #expect(await s.run("broadcast", "--channel", channel, "--payload-file", s.folder + "/missing.json") == .noInput)
        #expect(await s.run("channels", "list", "--key-file", s.folder + "/missing.p8") == .noInput)
        #expect(await s.run("channels", "list", "--key-file", s.folder + "/bad.json") == .noInput)
        #expect(await s.run("broadcast", "--channel", channel) == .usage)
        #expect(await s.run("broadcast", "--channel", channel, "--payload", Self.payload, "--payload-file", s.folder + "/bad.json") == .usage)
        #expect(await s.run("broadcast", "--channel", "not base64!", "--payload", Self.payload) == .usage)
        #expect(await s.run("broadcast", "--channel", channel, "--priority", "7", "--payload", Self.payload) == .usage)
        #expect(await s.run("broadcast", "--channel", channel, "--expiration", "-5", "--payload", Self.payload) == .usage)
        #expect(await s.run("push", "--token", "xyz", "--payload", Self.payload) == .usage)
        #expect(await s.run("push", "--token", "abab", "--priority", "1", "--payload", Self.payload) == .usage)
        #expect(await s.run("channels", "create", "--storage-policy", "forever") == .usage)
        #expect(await s.run("channels", "create") == .usage)
        #expect(await s.run("channels", "list", "--team-id", "short") == .usage)
        #expect(await s.run("channels", "list", "--environment", "staging") == .usage)
        #expect(await s.run("channels", "list", "--manage-url", "http://127.0.0.1:1") == .usage)
    }

    @Test func aHostNobodyListensOnIsUnreachable() async throws {
        let s = try await Self.setup()
        defer { Task { await s.close() } }
        #expect(await s.run("channels", "list") == .unavailable)
        #expect(await s.run("broadcast", "--channel", "Y2hhbm5lbA==", "--payload", Self.payload, "--environment", "sandbox") == .unavailable)
    }

    @Test func everyAPNsOutcomeMapsToADocumentedExitCode() throws {
        let request = try APNsRequest.listChannels(bundleID: "com.example.live")
        func code(_ result: APNsResult, _ error: NetworkError? = nil) -> ExitCode {
            let attempt = APNsAttempt(number: 1, result: result, transportError: error, latency: .zero, startedAt: Date(), requestID: "r")
            return APNsCommandLine.exitCode(for: APNsOutcome(request: request, result: result, attempts: [attempt]))
        }
        func answer(_ status: Int, _ reason: String) -> APNsResult {
            APNsResult(response: APNsResponse(status: status, body: Array(#"{"reason":"\#(reason)"}"#.utf8)), operation: .listChannels)
        }
        #expect(code(APNsResult(response: APNsResponse(status: 200, body: Array(#"{"channels":[]}"#.utf8)), operation: .listChannels)) == .success)
        #expect(code(answer(400, "BadChannelId")) == .failure)
        #expect(code(answer(410, "Unregistered")) == .failure)
        #expect(code(answer(403, "InvalidProviderToken")) == .permissionDenied)
        #expect(code(answer(403, "ExpiredProviderToken")) == .permissionDenied)
        #expect(code(answer(429, "TooManyRequests")) == .temporaryFailure)
        #expect(code(answer(503, "ServiceUnavailable")) == .temporaryFailure)
        #expect(code(APNsResult(transportFailure: .timeout), .timedOut) == .temporaryFailure)
        #expect(code(APNsResult(transportFailure: .io("refused")), .connectFailed("refused")) == .unavailable)
        #expect(code(APNsResult(transportFailure: .io("bad CA")), .certificateRejected("bad CA")) == .unavailable)
        #expect(ExitCode.allCases.filter { APNsCommandLine.discussion.contains("  \($0.rawValue) ") }.count == 8)
    }

    /// `--json` failures carry what a script needs to follow up: status, reason, the request's id, the 410 timestamp.
    @Test func failureDetailsNameTheStatusAndTheRequest() throws {
        let token = try APNsDeviceToken(hex: String(repeating: "ab", count: 32))
        let push = try APNsRequest.devicePush(
            bundleID: "com.example.live", deviceToken: token, payload: Array(Self.payload.utf8), priority: .immediate)
        let apnsID = "6f1c2a3b-0d4e-4f5a-8b6c-7d8e9f0a1b2c"
        let gone = APNsResult(
            response: APNsResponse(
                status: 410, headers: ["apns-id": apnsID], body: Array(#"{"reason":"Unregistered","timestamp":1800000000000}"#.utf8)),
            operation: .devicePush)
        let attempt = APNsAttempt(number: 1, result: gone, transportError: nil, latency: .zero, startedAt: Date(), requestID: apnsID)
        let details = APNsCommandLine.failureDetails(APNsOutcome(request: push, result: gone, attempts: [attempt]))
        #expect(details["status"]?.intValue == 410)
        #expect(details["reason"]?.stringValue == "Unregistered")
        #expect(details["apnsId"]?.stringValue == apnsID && details["requestId"] == nil)
        #expect(details["timestamp"]?.intValue == 1_800_000_000_000)
        #expect(details["attempts"]?.intValue == 1)

        // No answer: no status or reason, but the id the request went with and every attempt.
        let list = try APNsRequest.listChannels(bundleID: "com.example.live")
        let timedOut = APNsResult(transportFailure: .timeout)
        let attempts = (1...3).map {
            APNsAttempt(number: $0, result: timedOut, transportError: .timedOut, latency: .zero, startedAt: Date(), requestID: "r\($0)")
        }
        let unanswered = APNsCommandLine.failureDetails(APNsOutcome(request: list, result: timedOut, attempts: attempts))
        #expect(unanswered["status"] == nil && unanswered["reason"] == nil && unanswered["timestamp"] == nil)
        #expect(unanswered["requestId"]?.stringValue == "r3" && unanswered["attempts"]?.intValue == 3)
    }
}

/// Runs blocking file work on a thread of its own, off Swift's cooperative pool.
func onOwnThread(_ body: @escaping @Sendable () throws -> Void) async throws {
    try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
        Thread.detachNewThread { done.resume(with: Result { try body() }) }
    }
}
