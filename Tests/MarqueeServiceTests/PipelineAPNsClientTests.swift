import APNs
import Crypto
import Foundation
import MarqueeCore
import MarqueeService
import Network
import Synchronization
import Testing

/// `APNsClientGateway` turns each pipeline operation into the APNs request and reports every attempt.
@Suite struct PipelineAPNsClientTests {
    static let app = PipelineApp(id: 1, bundleID: "com.example.scores", environment: "development")

    /// Answers from a list (the last one repeating) and records the requests.
    final class ListTransport: APNsTransport {
        let answers: [HTTPResponse]
        let sent = Mutex<[HTTPRequest]>([])

        init(_ answers: [HTTPResponse]) { self.answers = answers }

        func send(_ request: HTTPRequest, to endpoint: APNsEndpoint, key: String, timeout: Duration) async throws(NetworkError) -> HTTPResponse {
            let index = sent.withLock { sent in
                sent.append(request)
                return sent.count - 1
            }
            return answers[min(index, answers.count - 1)]
        }
    }

    func apns(_ transport: ListTransport) throws -> APNsClientGateway {
        let key = try APNsSigningKey(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", key: P256.SigningKey.generate())
        let endpoints = APNsEndpoints(push: APNsEndpoint(host: "127.0.0.1", port: 4431), management: APNsEndpoint(host: "127.0.0.1", port: 4432))
        let client = APNsClient(
            signingKey: key, endpoints: endpoints, transport: transport,
            configuration: .init(retryPolicy: RetryPolicy(maxAttempts: 3, baseDelay: .milliseconds(1), maxDelay: .milliseconds(2))))
        return APNsClientGateway { _ in client }
    }

    @Test func aBroadcastCarriesTheChannelPriorityAndExpirationAndReportsEveryAttempt() async throws {
        let transport = ListTransport([
            HTTPResponse(status: 503, body: Array(#"{"reason":"ServiceUnavailable"}"#.utf8)),
            HTTPResponse(status: 200, headers: ["apns-unique-id": "6c2b8bd0-2c47-4d8c-9e5b-1f7a2b3c4d5e"]),
        ])
        let channelID = "dHN0LXNyY2gtY2hubA=="
        let outcome = try await apns(transport).broadcast(
            app: Self.app, channelID: channelID, payload: Array(#"{"aps":{}}"#.utf8),
            expiration: 0, priority: .low)
        #expect(outcome.acceptance != nil)
        #expect(outcome.attempts.map(\.status) == [503, 200])
        #expect(outcome.attempts.first?.reasonText == "ServiceUnavailable")
        #expect(outcome.attempts.last?.uniqueID == "6c2b8bd0-2c47-4d8c-9e5b-1f7a2b3c4d5e")
        let request = try #require(transport.sent.withLock { $0.last })
        #expect(request.method == "POST")
        #expect(request.path == "/4/broadcasts/apps/com.example.scores")
        #expect(request.headers["apns-channel-id"] == channelID)
        #expect(request.headers["apns-priority"] == "5")
        #expect(request.headers["apns-expiration"] == "0")
        #expect(request.headers["apns-request-id"] != nil)
    }

    @Test func aCreateSendsTheStoragePolicyAndReturnsTheChannelID() async throws {
        let transport = ListTransport([HTTPResponse(status: 201, headers: ["apns-channel-id": "bmV3LWNoYW5uZWw="])])
        let outcome = try await apns(transport).createChannel(app: Self.app, storagePolicy: .notStored)
        #expect(outcome.acceptance?.channelID?.value == "bmV3LWNoYW5uZWw=")
        let request = try #require(transport.sent.withLock { $0.first })
        #expect(request.path == "/1/apps/com.example.scores/channels")
        let body = try JSONValue(parsing: String(decoding: request.body, as: UTF8.self))
        #expect(body["message-storage-policy"] == 0)
    }

    @Test func aListAndADeleteAreManagementRequests() async throws {
        let transport = ListTransport([
            HTTPResponse(status: 200, body: Array(#"{"channels":["YQ==","Yg=="]}"#.utf8)),
            HTTPResponse(status: 400, body: Array(#"{"reason":"ChannelNotRegistered"}"#.utf8)),
        ])
        let apns = try apns(transport)
        #expect(try await apns.listChannels(app: Self.app).acceptance?.channels?.map(\.value) == ["YQ==", "Yg=="])
        let deleted = try await apns.deleteChannel(app: Self.app, channelID: "YQ==")
        #expect(deleted.reason == .channelNotRegistered)
        #expect(transport.sent.withLock { $0.map(\.method) } == ["GET", "DELETE"])
    }
}
