@testable import APNs
@testable import APNsSimulator
import Crypto
import Foundation
import MarqueeCore
import Network
import Testing

private typealias F = SimulatorFixture

@Suite struct SimulatorBehaviourTests {
    @Test func channelLifecycleAsAppleDocumentsIt() throws {
        let f = try SimulatorFixture()
        let requestID = APNsRequestID.random()

        // Create: 201, empty body, the id in apns-channel-id, our request id echoed.
        let (created, createReply) = f.send(try .createChannel(bundleID: F.bundleID, storagePolicy: .mostRecentMessageStored, requestID: requestID))
        #expect(createReply.response.status == 201)
        #expect(createReply.response.body.isEmpty)
        let acceptance = try #require(created.acceptedAnswer)
        #expect(acceptance.requestID == requestID.value)
        let channel = try #require(acceptance.channelID)
        #expect(Data(base64Encoded: channel.value)?.count == 16)

        // Read: 200 with policy and push type.
        let (read, _) = f.send(try .readChannel(bundleID: F.bundleID, channelID: channel))
        #expect(read.acceptedAnswer?.channel == APNsChannelConfiguration(storagePolicy: .mostRecentMessageStored, pushType: "LiveActivity"))
        #expect(try APNsRequestID(#require(read.acceptedAnswer?.requestID)).value == read.acceptedAnswer?.requestID)

        // List: {"channels": [...]}.
        let second = try f.createChannel(.noMessageStored)
        let (list, listReply) = f.send(try .listChannels(bundleID: F.bundleID))
        #expect(list.acceptedAnswer?.channels == [channel, second])
        #expect(try JSONValue(parsing: listReply.response.body) == ["channels": [.string(channel.value), .string(second.value)]])
        #expect(f.send(try .listChannels(bundleID: "com.example.other")).0.acceptedAnswer?.channels == [])

        // Broadcast: 200, request id echoed, a unique id; recorded with its headers and payload.
        let broadcastID = APNsRequestID.random()
        let payload = F.payload(timestamp: 1_800_000_123)
        let expiration = Int(f.clock.now.timeIntervalSince1970) + 3_600
        let (sent, sentReply) = f.send(try .broadcast(
            bundleID: F.bundleID, channelID: channel, payload: payload, expiration: expiration, priority: .immediate, requestID: broadcastID))
        #expect(sentReply.response.status == 200 && sentReply.response.body.isEmpty)
        #expect(sent.acceptedAnswer?.requestID == broadcastID.value)
        let uniqueID = try #require(sent.acceptedAnswer?.uniqueID)
        let received = try #require(f.engine.broadcasts(for: channel).first)
        #expect(f.engine.broadcasts(for: channel).count == 1 && f.engine.broadcasts(for: second).isEmpty)
        #expect(received.payload == payload && received.priority == 10 && received.expiration == expiration)
        #expect(received.uniqueID == uniqueID && received.requestID == broadcastID.value && received.bundleID == F.bundleID)
        #expect(received.headers["authorization"] == nil && received.headers["apns-priority"] == "10")
        #expect(received.json["aps"]?["timestamp"] == .int(1_800_000_123))

        // Priorities 10, 5 and 1 are all accepted on broadcasts.
        for priority in APNsPriority.allCases {
            #expect(f.send(try f.broadcast(second, priority: priority)).0.acceptedAnswer != nil)
        }

        // Delete: 204; afterwards the channel is unknown everywhere.
        let (deleted, deleteReply) = f.send(try .deleteChannel(bundleID: F.bundleID, channelID: channel))
        #expect(deleteReply.response.status == 204 && deleted.acceptedAnswer != nil)
        #expect(f.send(try .listChannels(bundleID: F.bundleID)).0.acceptedAnswer?.channels == [second])
        #expect(f.send(try f.broadcast(channel)).0.failedAnswer?.reason == .channelNotRegistered)
        #expect(f.engine.channelOperations.map(\.kind) == [.create, .read, .create, .list, .list, .delete, .list])
    }

    @Test func createReadsTheLenientFormsOfOtherClients() throws {
        let f = try SimulatorFixture()
        for body in [#"{"message-storage-policy":"1","push-type":"liveactivity"}"#, #"{"push-type":"LIVEACTIVITY","message-storage-policy":0}"#] {
            let reply = f.sendRaw(HTTPRequest(method: "POST", path: "/1/apps/\(F.bundleID)/channels", body: Array(body.utf8)), on: .management)
            #expect(reply.response.status == 201, "\(body)")
        }
        #expect(f.engine.channels().map(\.storagePolicy) == [.mostRecentMessageStored, .noMessageStored])
        #expect(f.engine.channels().allSatisfy { $0.pushType == "LiveActivity" })
    }

    @Test func devicePushAnswersWithApnsIDAndUniqueIDInDevelopmentOnly() throws {
        for environment in APNsEnvironment.allCases {
            let f = try SimulatorFixture { $0.environment = environment }
            let apnsID = APNsRequestID.random()
            let request = try APNsRequest.devicePush(
                bundleID: F.bundleID, deviceToken: APNsDeviceToken(hex: F.deviceToken.uppercased()), payload: F.payload("start"),
                priority: .powerConsidered, expiration: 0, apnsID: apnsID, collapseID: "score")
            let (result, reply) = f.send(request)
            #expect(reply.response.status == 200)
            #expect(result.acceptedAnswer?.apnsID == apnsID.value)
            #expect(reply.response.headers["apns-request-id"] == nil)
            #expect((result.acceptedAnswer?.uniqueID != nil) == (environment == .development))
            let push = try #require(f.engine.devicePushes(to: F.deviceToken).first)
            #expect(push.priority == 5 && push.expiration == 0 && push.collapseID == "score" && push.apnsID == apnsID.value)
            #expect(push.topic == F.bundleID + ".push-type.liveactivity" && push.json["aps"]?["event"] == "start")

            // Without apns-id, one is generated; without apns-priority, 10 is assumed.
            let bare = f.sendRaw(HTTPRequest(method: "POST", path: "/3/device/\(F.deviceToken)", headers: [
                "apns-topic": F.bundleID + ".push-type.liveactivity", "apns-push-type": "liveactivity",
            ], body: F.payload()), on: .push)
            #expect(bare.response.status == 200)
            #expect(try APNsRequestID(#require(bare.response.headers["apns-id"])).value == bare.response.headers["apns-id"])
            #expect(f.engine.devicePushes.last?.priority == 10)
        }
    }

    @Test func payloadsExactlyAtTheLimitsAreAccepted() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        #expect(f.send(try f.broadcast(channel, payload: F.payload(padTo: 5_120))).0.acceptedAnswer != nil)
        #expect(f.send(try f.devicePush(payload: F.payload(padTo: 4_096))).0.acceptedAnswer != nil)
    }

    @Test func unregisteredTokensCarryTheTimeTheyBecameInvalid() throws {
        let f = try SimulatorFixture()
        #expect(f.send(try f.devicePush()).0.acceptedAnswer != nil)
        let invalidSince = f.clock.now - 86_400
        f.engine.markDeviceTokenInvalid(F.deviceToken.uppercased(), at: invalidSince)
        f.clock.advance(by: 60)
        let (result, reply) = f.send(try f.devicePush())
        #expect(reply.response.status == 410)
        guard case .rejected(let failure) = result else { Issue.record("410 must be permanent: \(result)"); return }
        #expect(failure.reason == .unregistered)
        #expect(failure.timestampDate == invalidSince)
        // Another token is unaffected.
        #expect(f.send(try f.devicePush(token: String(repeating: "cd", count: 32))).0.acceptedAnswer != nil)
    }

    // MARK: - Stream limits

    @Test func streamLimitStartsAtOneRisesOnSuccessAndFallsAfterARejection() throws {
        let f = try SimulatorFixture { $0.streamLimit = 500 }
        #expect(f.engine.initialStreamLimit == 1 && f.connection.streamLimit == 1)

        // A rejected first request (no token) keeps the limit at 1: no action.
        #expect(f.send(try .listChannels(bundleID: F.bundleID), authorization: .absent).1.actions == [])
        // The first accepted request raises it.
        #expect(f.send(try .listChannels(bundleID: F.bundleID)).1.actions == [.setMaxConcurrentStreams(500)])
        #expect(f.send(try .listChannels(bundleID: F.bundleID)).1.actions == [])
        // A rejection drops it to 1; the next accepted request restores it.
        #expect(f.send(try f.devicePush(), authorization: .absent).1.actions == [.setMaxConcurrentStreams(1)])
        let rejected = f.sendRaw(HTTPRequest(method: "POST", path: "/3/device/zz"), on: .push)
        #expect(rejected.response.status == 400 && rejected.actions == [])
        #expect(f.send(try .listChannels(bundleID: F.bundleID)).1.actions == [.setMaxConcurrentStreams(500)])
        #expect(f.connection.streamLimit == 500)
    }

    @Test func serverErrorsLeaveTheStreamLimitAlone() throws {
        let f = try SimulatorFixture { $0.faults.internalServerError = 1 }
        f.connection.streamLimit = 1_000
        let reply = f.send(try .listChannels(bundleID: F.bundleID)).1
        #expect(reply.response.status == 500 && reply.actions == [])
    }

    @Test func relaxedConnectionsStartAtTheFullLimitAndKeepIt() throws {
        let f = try SimulatorFixture { $0.relaxed = true; $0.streamLimit = 64 }
        #expect(f.engine.initialStreamLimit == 64 && f.connection.streamLimit == 64)
        #expect(f.sendRaw(HTTPRequest(method: "GET", path: "/nowhere"), on: .push).actions == [])
        #expect(f.send(try .listChannels(bundleID: F.bundleID)).1.actions == [])
    }

    // MARK: - Provider tokens over time

    @Test func tokenRulesOverSimulatedHours() throws {
        let f = try SimulatorFixture()
        let list = try APNsRequest.listChannels(bundleID: F.bundleID)
        #expect(f.send(list).0.acceptedAnswer != nil)
        // The same token serves for an hour, verified once.
        for _ in 0..<50 {
            f.clock.advance(by: 70)
            #expect(f.send(list).0.acceptedAnswer != nil)
        }
        #expect(f.connection.tokenVerifications == 1)
        f.clock.advance(by: 3_600 - 50 * 70 + 1)
        guard case .refreshTokenAndRetry(let expired) = f.send(list).0 else { Issue.record("expected ExpiredProviderToken"); return }
        #expect(expired.reason == .expiredProviderToken)

        // A fresh token issued more than 20 minutes after the last one is accepted and verified once more.
        f.token = try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now)
        #expect(f.send(list).0.acceptedAnswer != nil)
        #expect(f.connection.tokenVerifications == 2)

        // A token issued 19 minutes after the current one is too soon; the current token keeps working.
        f.clock.advance(by: 19 * 60)
        let current = f.token
        f.token = try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now)
        guard case .tokenUpdatesTooFrequent(let failure) = f.send(list).0 else { Issue.record("expected TooManyProviderTokenUpdates"); return }
        #expect(failure.status == 429)
        #expect(f.send(list, authorization: .value(current.authorization)).0.acceptedAnswer != nil)
        // One issued 20 minutes after the current one is taken.
        f.clock.advance(by: 60)
        f.token = try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now)
        #expect(f.send(list).0.acceptedAnswer != nil)

        // A new connection may adopt a shared token near the end of its life, then take the next one the
        // process signs, minutes later: what counts is the tokens' issue times.
        var fresh = f.engine.makeConnectionState()
        func sendFresh(_ token: ProviderToken) -> Int {
            var request = HTTPRequest(method: "GET", path: list.path)
            request.headers.add("authorization", token.authorization)
            return f.engine.handle(request, on: .management, connection: &fresh).response.status
        }
        #expect(sendFresh(try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now - 50 * 60)) == 200)
        f.clock.advance(by: 60)
        #expect(sendFresh(try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now)) == 200)
        // An older token than the current one is a change too soon.
        #expect(sendFresh(try ProviderToken(signingKey: f.signingKey, issuedAt: f.clock.now - 30 * 60)) == 429)
    }

    @Test func aConnectionStaysBoundToTheTeamOfItsFirstToken() throws {
        let other = try APNsSigningKey(keyID: "KEYB234567", teamID: "TEAMB23456", key: P256.SigningKey.generate())
        let clock = ManualWallClock()
        var configuration = SimulatorConfiguration()
        configuration.bundleIDs = [F.bundleID]
        let first = try APNsSigningKey(keyID: F.keyID, teamID: F.teamID, key: P256.SigningKey.generate())
        let engine = SimulatorEngine(configuration: configuration, trustedKeys: [
            SimulatorTrustedKey(keyID: first.identity.keyID, teamID: first.identity.teamID, key: first.key.publicKey),
            SimulatorTrustedKey(keyID: other.identity.keyID, teamID: other.identity.teamID, key: other.key.publicKey),
        ], clock: clock)
        func list(_ key: APNsSigningKey, _ connection: inout SimulatorConnectionState) throws -> APNsResult {
            let request = try APNsRequest.listChannels(bundleID: F.bundleID)
            var headers = HTTPHeaders()
            headers.add("authorization", try ProviderToken(signingKey: key, issuedAt: clock.now).authorization)
            let reply = engine.handle(HTTPRequest(method: "GET", path: request.path, headers: headers), on: .management, connection: &connection)
            return SimulatorFixture.result(reply, operation: .listChannels)
        }
        var connection = engine.makeConnectionState()
        #expect(try list(first, &connection).acceptedAnswer != nil)
        clock.advance(by: 30 * 60)
        #expect(try list(other, &connection).failedAnswer?.reason == .unrelatedKeyIdInToken)
        var second = engine.makeConnectionState()
        #expect(try list(other, &second).acceptedAnswer != nil)
        #expect(second.boundTeamID == "TEAMB23456")
    }

    // MARK: - Quota

    @Test func channelQuotaIsPerBundleIDAndSettable() throws {
        let f = try SimulatorFixture { $0.channelQuota = 2 }
        let first = try f.createChannel()
        _ = try f.createChannel()
        #expect(f.send(try .createChannel(bundleID: F.bundleID, storagePolicy: .noMessageStored)).0.failedAnswer?.reason == .cannotCreateChannelConfig)
        // Another bundle id has its own quota.
        _ = try f.createChannel(bundleID: "com.example.other")
        // Deleting frees a place; raising the quota frees more.
        f.send(try .deleteChannel(bundleID: F.bundleID, channelID: first))
        _ = try f.createChannel()
        #expect(f.send(try .createChannel(bundleID: F.bundleID, storagePolicy: .noMessageStored)).0.failedAnswer?.reason == .cannotCreateChannelConfig)
        f.engine.channelQuota = 3
        _ = try f.createChannel()
        #expect(f.engine.channels(bundleID: F.bundleID).count == 3)
        #expect(try SimulatorFixture().engine.channelQuota == 10_000)
    }

    // MARK: - Faults, latency, GOAWAY

    @Test func faultsFollowTheSeedAndTheirShares() throws {
        func statuses(seed: UInt64) throws -> [Int] {
            let f = try SimulatorFixture {
                $0.seed = seed
                $0.faults.tooManyRequests = 0.1
                $0.faults.internalServerError = 0.1
                $0.faults.serviceUnavailable = 0.1
            }
            return try (0..<1_000).map { _ in f.send(try .listChannels(bundleID: F.bundleID)).1.response.status }
        }
        let run = try statuses(seed: 7)
        #expect(try statuses(seed: 7) == run)
        #expect(try statuses(seed: 8) != run)
        for status in [429, 500, 503] {
            #expect((50...150).contains(run.count { $0 == status }), "\(status): \(run.count { $0 == status })")
        }
        #expect((600...800).contains(run.count { $0 == 200 }))
    }

    @Test func goAwayAfterNStreamsOnAConnection() throws {
        let f = try SimulatorFixture { $0.faults.goAwayAfterStreams = 3 }
        let list = try APNsRequest.listChannels(bundleID: F.bundleID)
        #expect(!f.send(list).1.actions.contains { if case .goAway = $0 { true } else { false } })
        #expect(!f.send(list).1.actions.contains { if case .goAway = $0 { true } else { false } })
        let third = f.send(list).1
        #expect(third.response.status == 200, "the request that reaches N is still answered")
        #expect(third.actions.last == .goAway(errorCode: 0, debugData: Array(#"{"reason":"Shutdown"}"#.utf8)))
        #expect(APNsErrorBody(json: SimulatorEngine.goAwayDebugData)?.reason == .shutdown)
        #expect(f.send(list).1.actions == [], "GOAWAY is sent once")
    }

    @Test func latencyIsDrawnFromTheConfiguredRange() throws {
        let fixed = try SimulatorFixture { $0.latency = .milliseconds(25) ... .milliseconds(25) }
        #expect(fixed.send(try .listChannels(bundleID: F.bundleID)).1.delay == .milliseconds(25))
        let ranged = try SimulatorFixture { $0.latency = .milliseconds(5) ... .milliseconds(50) }
        let delays = try (0..<200).map { _ in ranged.send(try .listChannels(bundleID: F.bundleID)).1.delay }
        #expect(delays.allSatisfy { (.milliseconds(5) ... .milliseconds(50)).contains($0) })
        #expect(Set(delays).count > 100)
        #expect(try SimulatorFixture().send(try .listChannels(bundleID: F.bundleID)).1.delay == .zero)
    }

    // MARK: - Logs and records

    @Test func everyRequestIsOneJSONLineWithoutSecrets() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        f.send(try f.broadcast(channel))
        f.send(try f.devicePush())
        f.send(try .readChannel(bundleID: F.bundleID, channelID: APNsChannelID("dHN0LXNyY2gtY2hubA==")))
        let lines = f.log.all
        #expect(lines.count == 4)
        for line in lines {
            #expect(!line.contains(f.token.jwt) && !line.contains(F.deviceToken) && !line.contains("\n"))
            let object = try JSONValue(parsing: line)
            for key in ["method", "path", "status", "reason", "channel_id", "request_id", "latency_ms", "listener"] {
                #expect(object[key] != nil, "\(key) in \(line)")
            }
        }
        let broadcast = try JSONValue(parsing: lines[1])
        #expect(broadcast["status"] == .int(200) && broadcast["channel_id"] == .string(channel.value))
        #expect(broadcast["path"] == .string("/4/broadcasts/apps/\(F.bundleID)"))
        #expect(try JSONValue(parsing: lines[2])["path"] == .string("/3/device/abababab…"))
        let rejected = try JSONValue(parsing: lines[3])
        #expect(rejected["status"] == .int(400) && rejected["reason"] == .string("ChannelNotRegistered"))
    }

    @Test func recordsKeepTheLastRecordLimitOldestFirst() throws {
        let f = try SimulatorFixture { $0.recordLimit = 8 }
        // Pushes of growing sizes and list calls, so reused slots take records larger and smaller than their last.
        for n in 0..<21 {
            if n % 5 == 4 {
                f.send(try .listChannels(bundleID: F.bundleID))
            } else {
                f.send(try f.devicePush(payload: F.payload(timestamp: 1_800_000_000 + n, padTo: 100 + (n % 3) * 200)))
            }
        }
        let kept = f.engine.received
        #expect(kept.count == 8)
        let order: [Int?] = kept.map { record in
            guard case .devicePush(let push) = record else { return nil }
            #expect(push.headers["authorization"] == nil && push.headers["apns-topic"] == push.topic && push.deviceToken == F.deviceToken)
            let timestamp = push.json["aps"]?["timestamp"]?.intValue ?? 0
            let n = Int(timestamp) - 1_800_000_000
            #expect(push.payload.count == 100 + (n % 3) * 200)
            return n
        }
        #expect(order == [13, nil, 15, 16, 17, 18, nil, 20])
        f.engine.clearRecords()
        #expect(f.engine.received.isEmpty)
        let none = try SimulatorFixture { $0.recordLimit = 0 }
        none.send(try .listChannels(bundleID: F.bundleID))
        #expect(none.engine.received.isEmpty && none.engine.statusCounts == [200: 1])
    }
}
