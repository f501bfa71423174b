import Crypto
import Foundation
import MarqueeCore
import Network
import Testing

@testable import APNsSimulator

/// One way to make the simulator reject a request, and the answer Apple's page for the request's API gives for it.
struct SimulatorRejectionCase: Sendable, CustomTestStringConvertible {
    var name: String
    /// The `reason` as Apple's page for `api` spells it.
    var reason: String
    var api: SimulatorAPI
    /// Sends the request; gets a fixture with two channels: `stored` (policy 1) and `unstored` (policy 0).
    var send: @Sendable (_ fixture: SimulatorFixture, _ stored: String, _ unstored: String) throws -> SimulatorReply
    var configure: @Sendable (inout SimulatorConfiguration) -> Void = { _ in }

    var testDescription: String { "\(reason): \(name)" }

    init(
        _ name: String, _ reason: String, _ api: SimulatorAPI,
        configure: @escaping @Sendable (inout SimulatorConfiguration) -> Void = { _ in },
        send: @escaping @Sendable (SimulatorFixture, String, String) throws -> SimulatorReply
    ) {
        self.name = name
        self.reason = reason
        self.api = api
        self.send = send
        self.configure = configure
    }
}

private typealias F = SimulatorFixture

/// A raw request whose headers are given as pairs (so duplicates and odd values can be sent).
private func raw(_ method: String, _ path: String, _ headers: [(String, String)] = [], body: [UInt8] = []) -> HTTPRequest {
    HTTPRequest(method: method, path: path, headers: HTTPHeaders(headers.map { HTTPField(name: $0.0, value: $0.1) }), body: body)
}

private func broadcastHeaders(_ channel: String, dropping: String? = nil, overriding: [String: String] = [:]) -> [(String, String)] {
    var headers = ["apns-channel-id": channel, "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "5"]
    headers[dropping ?? ""] = nil
    headers.merge(overriding) { _, new in new }
    return headers.sorted { $0.key < $1.key }
}

private func deviceHeaders(dropping: String? = nil, overriding: [String: String] = [:]) -> [(String, String)] {
    var headers = ["apns-topic": F.bundleID + ".push-type.liveactivity", "apns-push-type": "liveactivity", "apns-priority": "10"]
    headers[dropping ?? ""] = nil
    headers.merge(overriding) { _, new in new }
    return headers.sorted { $0.key < $1.key }
}

private let broadcastPath = "/4/broadcasts/apps/\(F.bundleID)"
private let devicePath = "/3/device/\(F.deviceToken)"
private let channelsPath = "/1/apps/\(F.bundleID)/channels"

@Suite struct SimulatorEngineTests {
    static let rejections: [SimulatorRejectionCase] = [
        // Paths and methods.
        .init("a control route on the push listener", "BadPath", .devicePush) { f, _, _ in f.sendRaw(raw("GET", "/status"), on: .push) },
        .init("a control route on the management listener", "BadPath", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", "/rejections", body: Array(#"{"api":"broadcast","reason":"Shutdown"}"#.utf8)), on: .management)
        },
        .init("unknown path on the push listener", "BadPath", .devicePush) { f, _, _ in f.sendRaw(raw("POST", "/5/nothing"), on: .push) },
        .init("management path on the push listener", "BadPath", .channelManagement) { f, _, _ in f.sendRaw(raw("POST", channelsPath), on: .push) },
        .init("broadcast path on the management listener", "BadPath", .broadcast) { f, _, _ in f.sendRaw(raw("POST", broadcastPath), on: .management)
        },
        .init("empty bundle id", "BadPath", .broadcast) { f, _, _ in f.sendRaw(raw("POST", "/4/broadcasts/apps/"), on: .push) },
        .init("path with a query", "BadPath", .channelManagement) { f, _, _ in
            f.sendRaw(raw("GET", "/1/apps/\(F.bundleID)/all-channels?x=1"), on: .management)
        },
        .init("GET on a device path", "MethodNotAllowed", .devicePush) { f, _, _ in f.sendRaw(raw("GET", devicePath), on: .push) },
        .init("PUT on channels", "MethodNotAllowed", .channelManagement) { f, _, _ in f.sendRaw(raw("PUT", channelsPath), on: .management) },
        .init("POST on all-channels", "MethodNotAllowed", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", "/1/apps/\(F.bundleID)/all-channels"), on: .management)
        },
        .init("GET on broadcasts", "MethodNotAllowed", .broadcast) { f, _, _ in f.sendRaw(raw("GET", broadcastPath), on: .push) },

        // Provider tokens.
        .init("no authorization", "MissingProviderToken", .channelManagement) { f, _, _ in
            f.send(.list(), authorization: .absent).1
        },
        .init("not a bearer token", "InvalidProviderToken", .channelManagement) { f, _, _ in
            f.send(.list(), authorization: "Basic dXNlcjpwYXNz").1
        },
        .init("malformed JWT", "InvalidProviderToken", .channelManagement) { f, _, _ in
            f.send(.list(), authorization: "bearer a.b.c").1
        },
        .init("signed by another key with the same ids", "InvalidProviderToken", .broadcast) { f, stored, _ in
            let other = try SimulatorTestToken(key: P256.SigningKey.generate(), keyID: F.keyID, teamID: F.teamID, issuedAt: f.clock.now)
            return f.send(.broadcast(stored), authorization: .value(other.authorization)).1
        },
        .init("unknown key id", "InvalidProviderToken", .broadcast) { f, stored, _ in
            let other = try SimulatorTestToken(key: f.signingKey, keyID: "OTHERKEY12", teamID: F.teamID, issuedAt: f.clock.now)
            return f.send(.broadcast(stored), authorization: .value(other.authorization)).1
        },
        .init("wrong team for the key", "InvalidProviderToken", .devicePush) { f, _, _ in
            let other = try SimulatorTestToken(key: f.signingKey, keyID: F.keyID, teamID: "OTHERTEAM1", issuedAt: f.clock.now)
            return f.send(.devicePush(), authorization: .value(other.authorization)).1
        },
        .init("alg HS256", "InvalidProviderToken", .channelManagement) { f, _, _ in
            let token = try SimulatorTestToken(key: f.signingKey, keyID: F.keyID, teamID: F.teamID, issuedAt: f.clock.now, alg: "HS256")
            return f.send(.list(), authorization: .value(token.authorization)).1
        },
        .init("iat more than an hour old", "ExpiredProviderToken", .broadcast) { f, stored, _ in
            let old = try f.sign(issuedAt: f.clock.now - 3_601)
            return f.send(.broadcast(stored), authorization: .value(old.authorization)).1
        },
        .init("iat far in the future", "InvalidProviderToken", .broadcast) { f, stored, _ in
            let future = try f.sign(issuedAt: f.clock.now + 3_600)
            return f.send(.broadcast(stored), authorization: .value(future.authorization)).1
        },
        .init("a second token within 20 minutes", "TooManyProviderTokenUpdates", .broadcast) { f, stored, _ in
            f.clock.advance(by: 19 * 60)
            return f.send(.broadcast(stored), authorization: .value(try f.sign().authorization)).1
        },

        // Headers shared by every API.
        .init("apns-priority twice on a broadcast (its table has no DuplicateHeaders)", "BadPriority", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored) + [("apns-priority", "10")], body: F.payload()), on: .push)
        },
        .init("an apns- header the simulator does not read, twice", "DuplicateHeaders", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders() + [("apns-custom", "1"), ("apns-custom", "1")], body: F.payload()), on: .push)
        },
        .init("authorization twice", "DuplicateHeaders", .devicePush) { f, _, _ in
            let authorization = f.token.authorization
            return f.sendRaw(
                raw(
                    "POST", devicePath, [("authorization", authorization)] + deviceHeaders() + [("authorization", authorization)],
                    body: F.payload()), on: .push)
        },
        .init("apns-channel-id twice on a broadcast", "BadChannelId", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored) + [("apns-channel-id", stored)], body: F.payload()), on: .push)
        },
        .init("apns-request-id twice on a channel read", "BadMessageId", .channelManagement) { f, stored, _ in
            let id = F.uuid()
            return f.sendRaw(
                raw("GET", channelsPath, [("apns-channel-id", stored), ("apns-request-id", id), ("apns-request-id", id)]), on: .management)
        },
        .init("authorization twice on a list", "InvalidProviderToken", .channelManagement) { f, _, _ in
            let authorization = f.token.authorization
            return f.sendRaw(
                raw("GET", "/1/apps/\(F.bundleID)/all-channels", [("authorization", authorization), ("authorization", authorization)]),
                on: .management)
        },
        .init("apns-request-id not a UUID", "BadMessageId", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-request-id": "nope"]), body: F.payload()), on: .push)
        },
        .init("apns-id not a UUID", "BadMessageId", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-id": "123"]), body: F.payload()), on: .push)
        },
        .init("bundle id with the push-type suffix on a broadcast", "TopicDisallowed", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath + ".push-type.liveactivity", broadcastHeaders(stored), body: F.payload()), on: .push)
        },
        .init("bundle id with the push-type suffix on create", "TopicDisallowed", .channelManagement) { f, _, _ in
            f.sendRaw(
                raw(
                    "POST", "/1/apps/\(F.bundleID).push-type.liveactivity/channels",
                    body: Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("bundle id the key may not use", "TopicMismatch", .channelManagement) { f, _, _ in
            f.send(.list(bundleID: "com.stranger.app")).1
        },

        // Channel management.
        .init("create without a body", "PayloadEmpty", .channelManagement) { f, _, _ in f.sendRaw(raw("POST", channelsPath), on: .management) },
        .init("create with unparseable JSON", "BadRequestPayload", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"#.utf8)), on: .management)
        },
        .init("create with a JSON array", "BadRequestPayload", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array("[1]".utf8)), on: .management)
        },
        .init("create with an unknown key", "BadRequestParams", .channelManagement) { f, _, _ in
            f.sendRaw(
                raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"push-type":"LiveActivity","ttl":5}"#.utf8)), on: .management)
        },
        .init("create with storage policy 2", "BadRequestParams", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("create without a storage policy", "BadRequestParams", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("create without push-type", "MissingPushType", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1}"#.utf8)), on: .management)
        },
        .init("create with push-type alert", "InvalidPushType", .channelManagement) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"push-type":"alert"}"#.utf8)), on: .management)
        },
        .init("create beyond the quota", "CannotCreateChannelConfig", .channelManagement, configure: { $0.channelQuota = 2 }) { f, _, _ in
            f.send(.create(.noMessageStored)).1
        },
        .init("read without a channel id", "MissingChannelId", .channelManagement) { f, _, _ in f.sendRaw(raw("GET", channelsPath), on: .management)
        },
        .init("delete with a non-base64 channel id", "BadChannelId", .channelManagement) { f, _, _ in
            f.sendRaw(raw("DELETE", channelsPath, [("apns-channel-id", "not base64!")]), on: .management)
        },
        .init("read with an overlong channel id", "BadChannelId", .channelManagement) { f, _, _ in
            f.sendRaw(raw("GET", channelsPath, [("apns-channel-id", String(repeating: "QUFB", count: 40))]), on: .management)
        },
        .init("read an unknown channel", "ChannelNotRegistered", .channelManagement) { f, _, _ in
            f.send(.read("dHN0LXNyY2gtY2hubA==")).1
        },
        .init("read a channel of another bundle id", "ChannelNotRegistered", .channelManagement) { f, stored, _ in
            f.send(.read(stored, bundleID: "com.example.other")).1
        },
        .init("delete a deleted channel", "ChannelNotRegistered", .channelManagement) { f, stored, _ in
            f.send(.delete(stored))
            return f.send(.delete(stored)).1
        },

        // Broadcasts.
        .init("broadcast without a channel id", "MissingChannelId", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-channel-id"), body: F.payload()), on: .push)
        },
        .init("broadcast with a bad channel id", "BadChannelId", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-channel-id": "%%%"]), body: F.payload()), on: .push)
        },
        .init("broadcast without a push type", "MissingPushType", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-push-type"), body: F.payload()), on: .push)
        },
        .init("broadcast with push type alert", "InvalidPushType", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-push-type": "alert"]), body: F.payload()), on: .push)
        },
        .init("broadcast without an expiration", "BadExpirationDate", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-expiration"), body: F.payload()), on: .push)
        },
        .init("broadcast with expiration -1", "BadExpirationDate", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-expiration": "-1"]), body: F.payload()), on: .push)
        },
        .init("nonzero expiration on a no-storage channel", "BadExpirationDate", .broadcast) { f, _, unstored in
            f.send(.broadcast(unstored, expiration: Int(f.clock.now.timeIntervalSince1970) + 600)).1
        },
        .init("broadcast without a priority", "BadPriority", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-priority"), body: F.payload()), on: .push)
        },
        .init("broadcast with priority 7", "BadPriority", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-priority": "7"]), body: F.payload()), on: .push)
        },
        .init("broadcast to an unknown channel", "ChannelNotRegistered", .broadcast) { f, _, _ in
            f.send(.broadcast("dHN0LXNyY2gtY2hubA==")).1
        },
        .init("broadcast to a deleted channel", "ChannelNotRegistered", .broadcast) { f, stored, _ in
            f.send(.delete(stored))
            return f.send(.broadcast(stored)).1
        },
        .init("broadcast without a body", "PayloadEmpty", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored)), on: .push)
        },
        .init("broadcast of 5,121 bytes", "PayloadTooLarge", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: F.payload(padTo: 5_121)), on: .push)
        },
        .init("broadcast whose aps key is written twice, once escaped (the parser decides)", "BadRequestPayload", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array(#"{"aps":{},"\u0061ps":{}}"#.utf8)), on: .push)
        },
        .init("broadcast with a number too large for a double (the parser decides)", "BadRequestPayload", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array(#"{"aps":{"n":1e400}}"#.utf8)), on: .push)
        },
        .init("broadcast that is not JSON", "BadRequestPayload", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array("hello".utf8)), on: .push)
        },
        .init("broadcast without aps", "BadRequestPayload", .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array(#"{"aps":1}"#.utf8)), on: .push)
        },

        // Device pushes.
        .init("device push without a token", "MissingDeviceToken", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token not hex", "BadDeviceToken", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/xyz", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token of odd length", "BadDeviceToken", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/\(F.deviceToken)a", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token of 201 bytes", "BadDeviceToken", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/" + String(repeating: "ab", count: 201), deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device push without a topic", "MissingTopic", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(dropping: "apns-topic"), body: F.payload()), on: .push)
        },
        .init("topic with a space", "BadTopic", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": "com.example live"]), body: F.payload()), on: .push)
        },
        .init("plain bundle id as a Live Activity topic", "DeviceTokenNotForTopic", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": F.bundleID]), body: F.payload()), on: .push)
        },
        .init("topic of a bundle id the key may not use (the device table has no TopicMismatch)", "TopicDisallowed", .devicePush) { f, _, _ in
            f.sendRaw(
                raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": "com.stranger.push-type.liveactivity"]), body: F.payload()),
                on: .push)
        },
        .init("device push with push type alert", "InvalidPushType", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-push-type": "alert"]), body: F.payload()), on: .push)
        },
        .init("device push with priority 7", "BadPriority", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-priority": "7"]), body: F.payload()), on: .push)
        },
        .init("device push with expiration soon", "BadExpirationDate", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-expiration": "soon"]), body: F.payload()), on: .push)
        },
        .init("collapse id of 65 bytes", "BadCollapseId", .devicePush) { f, _, _ in
            f.sendRaw(
                raw("POST", devicePath, deviceHeaders(overriding: ["apns-collapse-id": String(repeating: "c", count: 65)]), body: F.payload()),
                on: .push)
        },
        .init("device push of 4,097 bytes", "PayloadTooLarge", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(), body: F.payload(padTo: 4_097)), on: .push)
        },
        .init("device push without a body", "PayloadEmpty", .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders()), on: .push)
        },
        .init("token listed invalid at start", "Unregistered", .devicePush, configure: { $0.invalidDeviceTokens = [F.deviceToken.uppercased()] }) {
            f, _, _ in
            f.send(.devicePush()).1
        },
        .init("token marked invalid at run time", "Unregistered", .devicePush) { f, _, _ in
            f.engine.markDeviceTokenInvalid(F.deviceToken)
            return f.send(.devicePush()).1
        },

        // Faults.
        .init("injected 429", "TooManyRequests", .broadcast, configure: { $0.faults.tooManyRequests = 1 }) { f, stored, _ in
            f.send(.broadcast(stored)).1
        },
        .init("injected 500", "InternalServerError", .channelManagement, configure: { $0.faults.internalServerError = 1 }) { f, _, _ in
            f.send(.create(.noMessageStored)).1
        },
        .init("injected 503 on a broadcast", "Service Unavailable", .broadcast, configure: { $0.faults.serviceUnavailable = 1 }) { f, stored, _ in
            f.send(.broadcast(stored)).1
        },
        .init("injected 503 on a list", "Service Unavailable", .channelManagement, configure: { $0.faults.serviceUnavailable = 1 }) { f, _, _ in
            f.send(.list()).1
        },
        .init("injected 503", "ServiceUnavailable", .devicePush, configure: { $0.faults.serviceUnavailable = 1 }) { f, _, _ in
            f.send(.devicePush()).1
        },
        .init("injected 410", "Unregistered", .devicePush, configure: { $0.faults.unregistered = 1 }) { f, _, _ in
            f.send(.devicePush()).1
        },
    ]

    @Test(arguments: rejections)
    func rejection(_ rejection: SimulatorRejectionCase) throws {
        let fixture = try SimulatorFixture(configure: rejection.configure)
        // With faults on, creating the channels through requests would draw faults too: they are restored instead.
        let stored: String
        let unstored: String
        if fixture.engine.configuration.faults == SimulatorFaults() {
            stored = try fixture.createChannel(.mostRecentMessageStored)
            unstored = try fixture.createChannel(.noMessageStored)
        } else {
            stored = "c3RvcmVkLWNoYW5uZWw="
            unstored = "dW5zdG9yZWQtY2hhbm4="
            fixture.engine.restoreChannels([
                SimulatorChannel(bundleID: F.bundleID, id: stored, storagePolicy: .mostRecentMessageStored, createdAt: fixture.clock.now),
                SimulatorChannel(bundleID: F.bundleID, id: unstored, storagePolicy: .noMessageStored, createdAt: fixture.clock.now),
            ])
        }
        let answer = SimulatorTestAnswer(try rejection.send(fixture, stored, unstored))

        // The status and spelling of Apple's page for this API, transcribed in SimulatorReasonTableTests.
        let documented = try #require(
            AppleErrorTables.table(rejection.api)[rejection.reason], "\(rejection.reason) is not in Apple's \(rejection.api) table")
        #expect(answer.status == documented)
        #expect(answer.reason == rejection.reason)
        #expect(answer.headers["content-type"] == "application/json")
        // Every answer names its request: apns-id on device pushes, apns-request-id elsewhere.
        let idHeader = rejection.api == .devicePush && answer.apnsID != nil ? "apns-id" : "apns-request-id"
        #expect(F.isCanonicalUUID(answer.headers[idHeader]))
        if answer.status == 410 {
            #expect(answer.timestamp == Int64(fixture.clock.now.timeIntervalSince1970 * 1000))
        } else {
            #expect(answer.timestamp == nil)
        }
        let accepted = fixture.engine.statusCounts.filter { (200..<300).contains($0.key) }.values.reduce(0, +)
        #expect(fixture.engine.received.count == accepted, "only accepted requests are recorded")
    }

    /// Apple takes device tokens in either case; the simulator records and lists them in lowercase.
    @Test func anUppercaseDeviceTokenIsAcceptedAndRecordedInLowercase() throws {
        let f = try SimulatorFixture()
        let longest = String(repeating: "AB", count: 200)
        for token in [F.deviceToken.uppercased(), "Ab", longest] {
            let reply = f.sendRaw(raw("POST", "/3/device/\(token)", deviceHeaders(), body: F.payload()), on: .push)
            #expect(reply.response.status == 200, "\(token)")
        }
        #expect(f.engine.devicePushes.map(\.deviceToken) == [F.deviceToken, "ab", longest.lowercased()])
    }

    /// Payloads the scanner leaves to the parser are still accepted when the parser accepts them.
    @Test func payloadsTheParserDecidesAreAccepted() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        for payload in [#"{"\u0061ps":{"alert":"hi"}}"#, #"{"aps":{"relevance-score":1.5e-1}}"#, #"{"é":1,"aps":{}}"#] {
            let reply = f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(channel), body: Array(payload.utf8)), on: .push)
            #expect(reply.response.status == 200, "\(payload)")
        }
        #expect(f.engine.broadcasts.count == 3)
    }

    /// Apple's device-push table has no reason for a payload that is not JSON: the simulator accepts it (and records it,
    /// so a test can still see what was sent); broadcasts answer it BadRequestPayload, as their table says.
    @Test func aDevicePushWhosePayloadIsNotJSONIsAccepted() throws {
        let f = try SimulatorFixture()
        let reply = f.sendRaw(raw("POST", devicePath, deviceHeaders(), body: Array("hello".utf8)), on: .push)
        #expect(reply.response.status == 200)
        #expect(f.engine.devicePushes.first?.payload == Array("hello".utf8) && f.engine.devicePushes.first?.json == .null)
    }

    /// Apple documents priorities 10, 5 and 1 on both push APIs (ActivityKit's "5 or 10" is a rule for the sender).
    @Test func priorityOneIsAcceptedOnBothPushAPIs() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        #expect(f.send(.broadcast(channel, priority: 1)).0.status == 200)
        #expect(f.send(.devicePush(priority: 1)).0.status == 200)
        #expect(f.engine.devicePushes.last?.priority == 1 && f.engine.broadcasts.last?.priority == 1)
    }

    /// A repeated header a broadcast or management request does not read is ignored there (only device pushes
    /// document DuplicateHeaders).
    @Test func aRepeatedHeaderTheAPIDoesNotReadIsIgnoredOutsideDevicePushes() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        let reply = f.sendRaw(
            raw("POST", broadcastPath, broadcastHeaders(channel) + [("apns-custom", "1"), ("apns-custom", "1")], body: F.payload()), on: .push)
        #expect(reply.response.status == 200)
        let list = f.sendRaw(raw("GET", "/1/apps/\(F.bundleID)/all-channels", [("apns-priority", "5"), ("apns-priority", "5")]), on: .management)
        #expect(list.response.status == 200)
    }

    @Test func everyReasonOfTheCasesIsInItsAPIsTable() {
        for rejection in Self.rejections {
            #expect(AppleErrorTables.table(rejection.api)[rejection.reason] != nil, "\(rejection.api): \(rejection.reason)")
        }
        // Every reason the engine gives of its own accord has at least one case.
        let covered = Set(Self.rejections.map(\.reason))
        let expected: Set = [
            "MissingProviderToken", "InvalidProviderToken", "ExpiredProviderToken", "TooManyProviderTokenUpdates",
            "BadPath", "MethodNotAllowed", "MissingChannelId", "BadChannelId", "MissingPushType", "InvalidPushType",
            "BadPriority", "BadExpirationDate", "BadRequestParams", "BadRequestPayload", "PayloadEmpty", "BadDeviceToken",
            "MissingTopic", "BadTopic", "DeviceTokenNotForTopic", "TopicDisallowed", "TopicMismatch", "BadMessageId",
            "BadCollapseId", "DuplicateHeaders", "CannotCreateChannelConfig", "ChannelNotRegistered", "Unregistered",
            "PayloadTooLarge", "TooManyRequests", "InternalServerError", "ServiceUnavailable", "Service Unavailable",
            "MissingDeviceToken",
        ]
        #expect(expected.subtracting(covered).isEmpty, "not covered: \(expected.subtracting(covered))")
    }
}
