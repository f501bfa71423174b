@testable import APNs
@testable import APNsSimulator
import Crypto
import Foundation
import MarqueeCore
import Network
import Testing

/// One way to make the simulator reject a request, and the reason it must give.
struct SimulatorRejectionCase: Sendable, CustomTestStringConvertible {
    var name: String
    var reason: APNsReason
    var operation: APNsOperation
    /// Sends the request; gets a fixture with two channels: `stored` (policy 1) and `unstored` (policy 0).
    var send: @Sendable (_ fixture: SimulatorFixture, _ stored: APNsChannelID, _ unstored: APNsChannelID) throws -> SimulatorReply
    var configure: @Sendable (inout SimulatorConfiguration) -> Void = { _ in }

    var testDescription: String { "\(reason.text): \(name)" }

    init(_ name: String, _ reason: APNsReason, _ operation: APNsOperation,
         configure: @escaping @Sendable (inout SimulatorConfiguration) -> Void = { _ in },
         send: @escaping @Sendable (SimulatorFixture, APNsChannelID, APNsChannelID) throws -> SimulatorReply) {
        self.name = name
        self.reason = reason
        self.operation = operation
        self.send = send
        self.configure = configure
    }
}

private typealias F = SimulatorFixture

/// A raw request whose headers are given as pairs (so duplicates and odd values can be sent).
private func raw(_ method: String, _ path: String, _ headers: [(String, String)] = [], body: [UInt8] = []) -> HTTPRequest {
    HTTPRequest(method: method, path: path, headers: HTTPHeaders(headers.map { HTTPField(name: $0.0, value: $0.1) }), body: body)
}

private func broadcastHeaders(_ channel: APNsChannelID, dropping: String? = nil, overriding: [String: String] = [:]) -> [(String, String)] {
    var headers = ["apns-channel-id": channel.value, "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "5"]
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
        .init("unknown path on the push listener", .badPath, .broadcast) { f, _, _ in f.sendRaw(raw("POST", "/5/nothing"), on: .push) },
        .init("management path on the push listener", .badPath, .createChannel) { f, _, _ in f.sendRaw(raw("POST", channelsPath), on: .push) },
        .init("broadcast path on the management listener", .badPath, .broadcast) { f, _, _ in f.sendRaw(raw("POST", broadcastPath), on: .management) },
        .init("empty bundle id", .badPath, .broadcast) { f, _, _ in f.sendRaw(raw("POST", "/4/broadcasts/apps/"), on: .push) },
        .init("path with a query", .badPath, .listChannels) { f, _, _ in f.sendRaw(raw("GET", "/1/apps/\(F.bundleID)/all-channels?x=1"), on: .management) },
        .init("GET on a device path", .methodNotAllowed, .devicePush) { f, _, _ in f.sendRaw(raw("GET", devicePath), on: .push) },
        .init("PUT on channels", .methodNotAllowed, .createChannel) { f, _, _ in f.sendRaw(raw("PUT", channelsPath), on: .management) },
        .init("POST on all-channels", .methodNotAllowed, .listChannels) { f, _, _ in f.sendRaw(raw("POST", "/1/apps/\(F.bundleID)/all-channels"), on: .management) },
        .init("GET on broadcasts", .methodNotAllowed, .broadcast) { f, _, _ in f.sendRaw(raw("GET", broadcastPath), on: .push) },

        // Provider tokens.
        .init("no authorization", .missingProviderToken, .listChannels) { f, _, _ in
            f.send(try .listChannels(bundleID: F.bundleID), authorization: .absent).1
        },
        .init("not a bearer token", .invalidProviderToken, .listChannels) { f, _, _ in
            f.send(try .listChannels(bundleID: F.bundleID), authorization: "Basic dXNlcjpwYXNz").1
        },
        .init("malformed JWT", .invalidProviderToken, .listChannels) { f, _, _ in
            f.send(try .listChannels(bundleID: F.bundleID), authorization: "bearer a.b.c").1
        },
        .init("signed by another key with the same ids", .invalidProviderToken, .broadcast) { f, stored, _ in
            let other = try APNsSigningKey(keyID: F.keyID, teamID: F.teamID, key: P256.SigningKey.generate())
            return f.send(try f.broadcast(stored), authorization: .value(try ProviderToken(signingKey: other, issuedAt: f.clock.now).authorization)).1
        },
        .init("unknown key id", .invalidProviderToken, .broadcast) { f, stored, _ in
            let other = try APNsSigningKey(keyID: "OTHERKEY12", teamID: F.teamID, key: f.signingKey.key)
            return f.send(try f.broadcast(stored), authorization: .value(try ProviderToken(signingKey: other, issuedAt: f.clock.now).authorization)).1
        },
        .init("wrong team for the key", .invalidProviderToken, .devicePush) { f, _, _ in
            let other = try APNsSigningKey(keyID: F.keyID, teamID: "OTHERTEAM1", key: f.signingKey.key)
            return f.send(try f.devicePush(), authorization: .value(try ProviderToken(signingKey: other, issuedAt: f.clock.now).authorization)).1
        },
        .init("alg HS256", .invalidProviderToken, .listChannels) { f, _, _ in
            let header = Base64URL.encode(#"{"alg":"HS256","kid":"\#(F.keyID)"}"#.utf8)
            let claims = Base64URL.encode(#"{"iss":"\#(F.teamID)","iat":\#(Int(f.clock.now.timeIntervalSince1970))}"#.utf8)
            let signature = Base64URL.encode(try f.signingKey.key.signature(for: "\(header).\(claims)".utf8))
            return f.send(try .listChannels(bundleID: F.bundleID), authorization: "bearer \(header).\(claims).\(signature)").1
        },
        .init("iat more than an hour old", .expiredProviderToken, .broadcast) { f, stored, _ in
            let old = try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now - 3_601)
            return f.send(try f.broadcast(stored), authorization: .value(old.authorization)).1
        },
        .init("iat far in the future", .invalidProviderToken, .broadcast) { f, stored, _ in
            let future = try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now + 3_600)
            return f.send(try f.broadcast(stored), authorization: .value(future.authorization)).1
        },
        .init("a second token within 20 minutes", .tooManyProviderTokenUpdates, .broadcast) { f, stored, _ in
            f.clock.advance(by: 19 * 60)
            return f.send(try f.broadcast(stored), authorization: .value(try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now).authorization)).1
        },

        // Headers shared by every API.
        .init("apns-priority twice", .duplicateHeaders, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored) + [("apns-priority", "10")], body: F.payload()), on: .push)
        },
        .init("an apns- header the simulator does not read, twice", .duplicateHeaders, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders() + [("apns-custom", "1"), ("apns-custom", "1")], body: F.payload()), on: .push)
        },
        .init("authorization twice", .duplicateHeaders, .devicePush) { f, _, _ in
            let authorization = f.token.authorization
            return f.sendRaw(raw("POST", devicePath, [("authorization", authorization)] + deviceHeaders() + [("authorization", authorization)],
                                 body: F.payload()), on: .push)
        },
        .init("apns-request-id not a UUID", .badMessageId, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-request-id": "nope"]), body: F.payload()), on: .push)
        },
        .init("apns-id not a UUID", .badMessageId, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-id": "123"]), body: F.payload()), on: .push)
        },
        .init("bundle id with the push-type suffix on a broadcast", .topicDisallowed, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath + ".push-type.liveactivity", broadcastHeaders(stored), body: F.payload()), on: .push)
        },
        .init("bundle id with the push-type suffix on create", .topicDisallowed, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", "/1/apps/\(F.bundleID).push-type.liveactivity/channels", body: Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("bundle id the key may not use", .topicMismatch, .listChannels) { f, _, _ in
            f.send(try .listChannels(bundleID: "com.stranger.app")).1
        },

        // Channel management.
        .init("create without a body", .payloadEmpty, .createChannel) { f, _, _ in f.sendRaw(raw("POST", channelsPath), on: .management) },
        .init("create with unparseable JSON", .badRequestPayload, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"#.utf8)), on: .management)
        },
        .init("create with a JSON array", .badRequestPayload, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array("[1]".utf8)), on: .management)
        },
        .init("create with an unknown key", .badRequestParams, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"push-type":"LiveActivity","ttl":5}"#.utf8)), on: .management)
        },
        .init("create with storage policy 2", .badRequestParams, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("create without a storage policy", .badRequestParams, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"push-type":"LiveActivity"}"#.utf8)), on: .management)
        },
        .init("create without push-type", .missingPushType, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1}"#.utf8)), on: .management)
        },
        .init("create with push-type alert", .invalidPushType, .createChannel) { f, _, _ in
            f.sendRaw(raw("POST", channelsPath, body: Array(#"{"message-storage-policy":1,"push-type":"alert"}"#.utf8)), on: .management)
        },
        .init("create beyond the quota", .cannotCreateChannelConfig, .createChannel, configure: { $0.channelQuota = 2 }) { f, _, _ in
            f.send(try .createChannel(bundleID: F.bundleID, storagePolicy: .noMessageStored)).1
        },
        .init("read without a channel id", .missingChannelId, .readChannel) { f, _, _ in f.sendRaw(raw("GET", channelsPath), on: .management) },
        .init("delete with a non-base64 channel id", .badChannelId, .deleteChannel) { f, _, _ in
            f.sendRaw(raw("DELETE", channelsPath, [("apns-channel-id", "not base64!")]), on: .management)
        },
        .init("read with an overlong channel id", .badChannelId, .readChannel) { f, _, _ in
            f.sendRaw(raw("GET", channelsPath, [("apns-channel-id", String(repeating: "QUFB", count: 40))]), on: .management)
        },
        .init("read an unknown channel", .channelNotRegistered, .readChannel) { f, _, _ in
            f.send(try .readChannel(bundleID: F.bundleID, channelID: APNsChannelID("dHN0LXNyY2gtY2hubA=="))).1
        },
        .init("read a channel of another bundle id", .channelNotRegistered, .readChannel) { f, stored, _ in
            f.send(try .readChannel(bundleID: "com.example.other", channelID: stored)).1
        },
        .init("delete a deleted channel", .channelNotRegistered, .deleteChannel) { f, stored, _ in
            f.send(try .deleteChannel(bundleID: F.bundleID, channelID: stored))
            return f.send(try .deleteChannel(bundleID: F.bundleID, channelID: stored)).1
        },

        // Broadcasts.
        .init("broadcast without a channel id", .missingChannelId, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-channel-id"), body: F.payload()), on: .push)
        },
        .init("broadcast with a bad channel id", .badChannelId, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-channel-id": "%%%"]), body: F.payload()), on: .push)
        },
        .init("broadcast without a push type", .missingPushType, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-push-type"), body: F.payload()), on: .push)
        },
        .init("broadcast with push type alert", .invalidPushType, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-push-type": "alert"]), body: F.payload()), on: .push)
        },
        .init("broadcast without an expiration", .badExpirationDate, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-expiration"), body: F.payload()), on: .push)
        },
        .init("broadcast with expiration -1", .badExpirationDate, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-expiration": "-1"]), body: F.payload()), on: .push)
        },
        .init("nonzero expiration on a no-storage channel", .badExpirationDate, .broadcast) { f, _, unstored in
            f.send(try f.broadcast(unstored, expiration: Int(f.clock.now.timeIntervalSince1970) + 600)).1
        },
        .init("broadcast without a priority", .badPriority, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, dropping: "apns-priority"), body: F.payload()), on: .push)
        },
        .init("broadcast with priority 7", .badPriority, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored, overriding: ["apns-priority": "7"]), body: F.payload()), on: .push)
        },
        .init("broadcast to an unknown channel", .channelNotRegistered, .broadcast) { f, _, _ in
            f.send(try f.broadcast(APNsChannelID("dHN0LXNyY2gtY2hubA=="))).1
        },
        .init("broadcast to a deleted channel", .channelNotRegistered, .broadcast) { f, stored, _ in
            f.send(try .deleteChannel(bundleID: F.bundleID, channelID: stored))
            return f.send(try f.broadcast(stored)).1
        },
        .init("broadcast without a body", .payloadEmpty, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored)), on: .push)
        },
        .init("broadcast of 5,121 bytes", .payloadTooLarge, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: F.payload(padTo: 5_121)), on: .push)
        },
        .init("push whose aps key is written twice, once escaped (the parser decides)", .badRequestPayload, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(), body: Array(#"{"aps":{},"\u0061ps":{}}"#.utf8)), on: .push)
        },
        .init("broadcast with a number too large for a double (the parser decides)", .badRequestPayload, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array(#"{"aps":{"n":1e400}}"#.utf8)), on: .push)
        },
        .init("broadcast that is not JSON", .badRequestPayload, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array("hello".utf8)), on: .push)
        },
        .init("broadcast without aps", .badRequestPayload, .broadcast) { f, stored, _ in
            f.sendRaw(raw("POST", broadcastPath, broadcastHeaders(stored), body: Array(#"{"aps":1}"#.utf8)), on: .push)
        },

        // Device pushes.
        .init("device push without a token", .missingDeviceToken, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token not hex", .badDeviceToken, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/xyz", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token of odd length", .badDeviceToken, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/\(F.deviceToken)a", deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device token of 201 bytes", .badDeviceToken, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", "/3/device/" + String(repeating: "ab", count: 201), deviceHeaders(), body: F.payload()), on: .push)
        },
        .init("device push without a topic", .missingTopic, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(dropping: "apns-topic"), body: F.payload()), on: .push)
        },
        .init("topic with a space", .badTopic, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": "com.example live"]), body: F.payload()), on: .push)
        },
        .init("plain bundle id as a Live Activity topic", .deviceTokenNotForTopic, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": F.bundleID]), body: F.payload()), on: .push)
        },
        .init("topic of a bundle id the key may not use", .topicMismatch, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-topic": "com.stranger.push-type.liveactivity"]), body: F.payload()), on: .push)
        },
        .init("device push with push type alert", .invalidPushType, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-push-type": "alert"]), body: F.payload()), on: .push)
        },
        .init("device push with priority 1", .badPriority, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-priority": "1"]), body: F.payload()), on: .push)
        },
        .init("device push with expiration soon", .badExpirationDate, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-expiration": "soon"]), body: F.payload()), on: .push)
        },
        .init("collapse id of 65 bytes", .badCollapseId, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(overriding: ["apns-collapse-id": String(repeating: "c", count: 65)]), body: F.payload()), on: .push)
        },
        .init("device push of 4,097 bytes", .payloadTooLarge, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders(), body: F.payload(padTo: 4_097)), on: .push)
        },
        .init("device push without a body", .payloadEmpty, .devicePush) { f, _, _ in
            f.sendRaw(raw("POST", devicePath, deviceHeaders()), on: .push)
        },
        .init("token listed invalid at start", .unregistered, .devicePush, configure: { $0.invalidDeviceTokens = [F.deviceToken.uppercased()] }) { f, _, _ in
            f.send(try f.devicePush()).1
        },
        .init("token marked invalid at run time", .unregistered, .devicePush) { f, _, _ in
            f.engine.markDeviceTokenInvalid(F.deviceToken)
            return f.send(try f.devicePush()).1
        },

        // Faults.
        .init("injected 429", .tooManyRequests, .broadcast, configure: { $0.faults.tooManyRequests = 1 }) { f, stored, _ in
            f.send(try f.broadcast(stored)).1
        },
        .init("injected 500", .internalServerError, .createChannel, configure: { $0.faults.internalServerError = 1 }) { f, _, _ in
            f.send(try .createChannel(bundleID: F.bundleID, storagePolicy: .noMessageStored)).1
        },
        .init("injected 503", .serviceUnavailable, .devicePush, configure: { $0.faults.serviceUnavailable = 1 }) { f, _, _ in
            f.send(try f.devicePush()).1
        },
        .init("injected 410", .unregistered, .devicePush, configure: { $0.faults.unregistered = 1 }) { f, _, _ in
            f.send(try f.devicePush()).1
        },
    ]

    @Test(arguments: rejections)
    func rejection(_ rejection: SimulatorRejectionCase) throws {
        let fixture = try SimulatorFixture(configure: rejection.configure)
        // With faults on, creating the channels through requests would draw faults too: they are restored instead.
        let stored: APNsChannelID
        let unstored: APNsChannelID
        if fixture.engine.configuration.faults == SimulatorFaults() {
            stored = try fixture.createChannel(.mostRecentMessageStored)
            unstored = try fixture.createChannel(.noMessageStored)
        } else {
            stored = try APNsChannelID("c3RvcmVkLWNoYW5uZWw=")
            unstored = try APNsChannelID("dW5zdG9yZWQtY2hhbm4=")
            fixture.engine.restoreChannels([
                SimulatorChannel(bundleID: F.bundleID, id: stored.value, storagePolicy: .mostRecentMessageStored, createdAt: fixture.clock.now),
                SimulatorChannel(bundleID: F.bundleID, id: unstored.value, storagePolicy: .noMessageStored, createdAt: fixture.clock.now),
            ])
        }
        let reply = try rejection.send(fixture, stored, unstored)

        #expect(reply.response.status == rejection.reason.status)
        #expect(reply.response.headers["content-type"] == "application/json")
        let body = try #require(APNsErrorBody(json: reply.response.body))
        #expect(body.reason == rejection.reason)
        let result = SimulatorFixture.result(reply, operation: rejection.operation)
        let failure = try #require(result.failedAnswer)
        #expect(failure.reason == rejection.reason)
        #expect(failure.status == rejection.reason.status)
        // Every answer names its request: apns-id on device pushes, apns-request-id elsewhere.
        let idHeader = rejection.operation == .devicePush && reply.response.headers["apns-id"] != nil ? "apns-id" : "apns-request-id"
        #expect(try APNsRequestID(#require(reply.response.headers[idHeader])).value == reply.response.headers[idHeader])
        if rejection.reason == .unregistered {
            #expect(failure.timestamp == Int64(fixture.clock.now.timeIntervalSince1970 * 1000))
        } else {
            #expect(body.timestamp == nil)
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
        for payload in [#"{"\u0061ps":{"alert":"hi"}}"#, #"{"aps":{"relevance-score":1.5e-1}}"#, #"{"é":1,"aps":{}}"#] {
            let reply = f.sendRaw(raw("POST", devicePath, deviceHeaders(), body: Array(payload.utf8)), on: .push)
            #expect(reply.response.status == 200, "\(payload)")
        }
        #expect(f.engine.devicePushes.count == 3)
    }

    @Test func everyReasonTheSimulatorWritesIsDocumentedWithItsStatus() {
        for rejection in Self.rejections {
            #expect(APNsReason.documented.contains { $0.reason == rejection.reason }, "\(rejection.reason)")
        }
        // The reasons the brief asks for are all covered by at least one case.
        let covered = Set(Self.rejections.map(\.reason.text))
        let expected: Set = [
            "MissingProviderToken", "InvalidProviderToken", "ExpiredProviderToken", "TooManyProviderTokenUpdates",
            "BadPath", "MethodNotAllowed", "MissingChannelId", "BadChannelId", "MissingPushType", "InvalidPushType",
            "BadPriority", "BadExpirationDate", "BadRequestParams", "BadRequestPayload", "PayloadEmpty", "BadDeviceToken",
            "MissingTopic", "BadTopic", "DeviceTokenNotForTopic", "TopicDisallowed", "TopicMismatch", "BadMessageId",
            "BadCollapseId", "DuplicateHeaders", "CannotCreateChannelConfig", "ChannelNotRegistered", "Unregistered",
            "PayloadTooLarge", "TooManyRequests", "InternalServerError", "ServiceUnavailable", "MissingDeviceToken",
        ]
        #expect(expected.subtracting(covered).isEmpty, "not covered: \(expected.subtracting(covered))")
    }
}
