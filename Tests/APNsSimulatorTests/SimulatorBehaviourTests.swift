import Crypto
import Foundation
import MarqueeCore
import Network
import Testing

@testable import APNsSimulator

private typealias F = SimulatorFixture

@Suite struct SimulatorBehaviourTests {
    @Test func channelLifecycleAsAppleDocumentsIt() throws {
        let f = try SimulatorFixture()
        let requestID = F.uuid()

        // Create: 201, empty body, the id in apns-channel-id, our request id echoed.
        let (created, _) = f.send(.create(.mostRecentMessageStored, requestID: requestID))
        #expect(created.status == 201)
        #expect(created.body.isEmpty)
        #expect(created.requestID == requestID)
        let channel = try #require(created.channelID)
        #expect(Data(base64Encoded: channel)?.count == 16)

        // Read: 200 with policy and push type.
        let (read, _) = f.send(.read(channel))
        #expect(read.status == 200 && read.json == ["message-storage-policy": 1, "push-type": "LiveActivity"])
        #expect(F.isCanonicalUUID(read.requestID))

        // List: {"channels": [...]}.
        let second = try f.createChannel(.noMessageStored)
        let (list, _) = f.send(.list())
        #expect(list.channels == [channel, second])
        #expect(list.json == ["channels": [.string(channel), .string(second)]])
        #expect(f.send(.list(bundleID: "com.example.other")).0.channels == [])

        // Broadcast: 200, request id echoed, a unique id; recorded with its headers and payload.
        let broadcastID = F.uuid()
        let payload = F.payload(timestamp: 1_800_000_123)
        let expiration = Int(f.clock.now.timeIntervalSince1970) + 3_600
        let (sent, _) = f.send(.broadcast(channel, payload: payload, expiration: expiration, priority: 10, requestID: broadcastID))
        #expect(sent.status == 200 && sent.body.isEmpty)
        #expect(sent.requestID == broadcastID)
        let uniqueID = try #require(sent.uniqueID)
        #expect(F.isCanonicalUUID(uniqueID))
        let received = try #require(f.engine.broadcasts(for: channel).first)
        #expect(f.engine.broadcasts(for: channel).count == 1 && f.engine.broadcasts(for: second).isEmpty)
        #expect(received.payload == payload && received.priority == 10 && received.expiration == expiration)
        #expect(received.uniqueID == uniqueID && received.requestID == broadcastID && received.bundleID == F.bundleID)
        #expect(received.headers["authorization"] == nil && received.headers["apns-priority"] == "10")
        #expect(received.json["aps"]?["timestamp"] == .int(1_800_000_123))

        // Priorities 10, 5 and 1 are all accepted on broadcasts.
        for priority in [10, 5, 1] {
            #expect(f.send(.broadcast(second, priority: priority)).0.accepted)
        }

        // Delete: 204; afterwards the channel is unknown everywhere.
        let (deleted, _) = f.send(.delete(channel))
        #expect(deleted.status == 204)
        #expect(f.send(.list()).0.channels == [second])
        #expect(f.send(.broadcast(channel)).0.reason == "ChannelNotRegistered")
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
        for environment in SimulatorEnvironment.allCases {
            let f = try SimulatorFixture { $0.environment = environment }
            // Apple echoes "the same value found in the apns-id field of the request's header".
            let apnsID = UUID().uuidString
            let (answer, _) = f.send(
                .devicePush(
                    token: F.deviceToken.uppercased(), payload: F.payload("start"), priority: 5,
                    extra: [("apns-expiration", "0"), ("apns-id", apnsID), ("apns-collapse-id", "score")]))
            #expect(answer.status == 200)
            #expect(answer.apnsID == apnsID)
            #expect(answer.requestID == nil)
            #expect((answer.uniqueID != nil) == (environment == .development))
            let push = try #require(f.engine.devicePushes(to: F.deviceToken).first)
            #expect(push.priority == 5 && push.expiration == 0 && push.collapseID == "score" && push.apnsID == apnsID)
            #expect(push.topic == F.bundleID + ".push-type.liveactivity" && push.json["aps"]?["event"] == "start")

            // Without apns-id, one is generated; without apns-priority, 10 is assumed.
            let bare = f.sendRaw(
                HTTPRequest(
                    method: "POST", path: "/3/device/\(F.deviceToken)",
                    headers: [
                        "apns-topic": F.bundleID + ".push-type.liveactivity", "apns-push-type": "liveactivity",
                    ], body: F.payload()), on: .push)
            #expect(bare.response.status == 200)
            #expect(F.isCanonicalUUID(bare.response.headers["apns-id"]))
            #expect(f.engine.devicePushes.last?.priority == 10)
        }
    }

    @Test func payloadsExactlyAtTheLimitsAreAccepted() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        #expect(f.send(.broadcast(channel, payload: F.payload(padTo: 5_120))).0.accepted)
        #expect(f.send(.devicePush(payload: F.payload(padTo: 4_096))).0.accepted)
    }

    @Test func unregisteredTokensCarryTheTimeTheyBecameInvalid() throws {
        let f = try SimulatorFixture()
        #expect(f.send(.devicePush()).0.accepted)
        let invalidSince = f.clock.now - 86_400
        f.engine.markDeviceTokenInvalid(F.deviceToken.uppercased(), at: invalidSince)
        f.clock.advance(by: 60)
        let (answer, _) = f.send(.devicePush())
        #expect(answer.status == 410 && answer.reason == "Unregistered")
        // Milliseconds since 1970 (handling-notification-responses-from-apns).
        #expect(answer.timestamp == Int64(invalidSince.timeIntervalSince1970 * 1000))
        // Another token is unaffected.
        #expect(f.send(.devicePush(token: String(repeating: "cd", count: 32))).0.accepted)
    }

    // MARK: - Stream limits

    @Test func streamLimitStartsAtOneRisesOnSuccessAndFallsAfterARejection() throws {
        let f = try SimulatorFixture { $0.streamLimit = 500 }
        #expect(f.engine.initialStreamLimit == 1 && f.connection.streamLimit == 1)

        // A rejected first request (no token) keeps the limit at 1: no action.
        #expect(f.send(.list(), authorization: .absent).1.actions == [])
        // The first accepted request raises it.
        #expect(f.send(.list()).1.actions == [.setMaxConcurrentStreams(500)])
        #expect(f.send(.list()).1.actions == [])
        // A rejection drops it to 1; the next accepted request restores it.
        #expect(f.send(.devicePush(), authorization: .absent).1.actions == [.setMaxConcurrentStreams(1)])
        let rejected = f.sendRaw(HTTPRequest(method: "POST", path: "/3/device/zz"), on: .push)
        #expect(rejected.response.status == 400 && rejected.actions == [])
        #expect(f.send(.list()).1.actions == [.setMaxConcurrentStreams(500)])
        #expect(f.connection.streamLimit == 500)
    }

    @Test func serverErrorsLeaveTheStreamLimitAlone() throws {
        let f = try SimulatorFixture { $0.faults.internalServerError = 1 }
        f.connection.streamLimit = 1_000
        let reply = f.send(.list()).1
        #expect(reply.response.status == 500 && reply.actions == [])
    }

    @Test func relaxedConnectionsStartAtTheFullLimitAndKeepIt() throws {
        let f = try SimulatorFixture {
            $0.relaxed = true
            $0.streamLimit = 64
        }
        #expect(f.engine.initialStreamLimit == 64 && f.connection.streamLimit == 64)
        #expect(f.sendRaw(HTTPRequest(method: "GET", path: "/nowhere"), on: .push).actions == [])
        #expect(f.send(.list()).1.actions == [])
    }

    // MARK: - Provider tokens over time

    @Test func tokenRulesOverSimulatedHours() throws {
        let f = try SimulatorFixture()
        let list = SimulatorTestRequest.list()
        #expect(f.send(list).0.accepted)
        // The same token serves for an hour, verified once.
        for _ in 0..<50 {
            f.clock.advance(by: 70)
            #expect(f.send(list).0.accepted)
        }
        #expect(f.connection.tokenVerifications == 1)
        f.clock.advance(by: 3_600 - 50 * 70 + 1)
        let expired = f.send(list).0
        #expect(expired.status == 403 && expired.reason == "ExpiredProviderToken")

        // A fresh token issued more than 20 minutes after the last one is accepted and verified once more.
        f.token = try f.sign()
        #expect(f.send(list).0.accepted)
        #expect(f.connection.tokenVerifications == 2)

        // A token issued 19 minutes after the current one is too soon; the current token keeps working.
        f.clock.advance(by: 19 * 60)
        let current = f.token
        f.token = try f.sign()
        let tooSoon = f.send(list).0
        #expect(tooSoon.status == 429 && tooSoon.reason == "TooManyProviderTokenUpdates")
        #expect(f.send(list, authorization: .value(current.authorization)).0.accepted)
        // One issued 20 minutes after the current one is taken.
        f.clock.advance(by: 60)
        f.token = try f.sign()
        #expect(f.send(list).0.accepted)

        // A new connection may adopt a shared token near the end of its life, then take the next one the
        // process signs, minutes later: what counts is the tokens' issue times.
        var fresh = f.engine.makeConnectionState()
        func sendFresh(_ token: SimulatorTestToken) -> Int {
            var request = list.request
            request.headers.add("authorization", token.authorization)
            return f.engine.handle(request, on: .management, connection: &fresh).response.status
        }
        #expect(sendFresh(try f.sign(issuedAt: f.clock.now - 50 * 60)) == 200)
        f.clock.advance(by: 60)
        #expect(sendFresh(try f.sign()) == 200)
        // An older token than the current one is a change too soon.
        #expect(sendFresh(try f.sign(issuedAt: f.clock.now - 30 * 60)) == 429)
    }

    /// Apple binds one team to a connection. Device pushes name the error UnrelatedKeyIdInToken; the broadcast and
    /// channel-management table has no such reason, so there the other team's token is an InvalidProviderToken.
    @Test func aConnectionStaysBoundToTheTeamOfItsFirstToken() throws {
        let first = (key: try P256.SigningKey.generate(), keyID: F.keyID, teamID: F.teamID)
        let other = (key: try P256.SigningKey.generate(), keyID: "KEYB234567", teamID: "TEAMB23456")
        let clock = ManualWallClock()
        var configuration = SimulatorConfiguration()
        configuration.bundleIDs = [F.bundleID]
        let engine = SimulatorEngine(
            configuration: configuration,
            trustedKeys: [
                SimulatorTrustedKey(keyID: first.keyID, teamID: first.teamID, key: first.key.publicKey),
                SimulatorTrustedKey(keyID: other.keyID, teamID: other.teamID, key: other.key.publicKey),
            ], clock: clock)
        func send(
            _ request: SimulatorTestRequest, _ key: (key: P256.SigningKey, keyID: String, teamID: String),
            _ connection: inout SimulatorConnectionState
        ) throws -> SimulatorTestAnswer {
            var http = request.request
            http.headers.add(
                "authorization", try SimulatorTestToken(key: key.key, keyID: key.keyID, teamID: key.teamID, issuedAt: clock.now).authorization)
            return SimulatorTestAnswer(engine.handle(http, on: request.listener, connection: &connection))
        }
        for (request, reason) in [(SimulatorTestRequest.list(), "InvalidProviderToken"), (.devicePush(), "UnrelatedKeyIdInToken")] {
            var connection = engine.makeConnectionState()
            #expect(try send(request, first, &connection).accepted)
            clock.advance(by: 30 * 60)
            let refused = try send(request, other, &connection)
            #expect(refused.status == 403 && refused.reason == reason)
            var second = engine.makeConnectionState()
            #expect(try send(request, other, &second).accepted)
            #expect(second.boundTeamID == "TEAMB23456")
        }
    }

    // MARK: - Quota

    @Test func channelQuotaIsPerBundleIDAndSettable() throws {
        let f = try SimulatorFixture { $0.channelQuota = 2 }
        let first = try f.createChannel()
        _ = try f.createChannel()
        #expect(f.send(.create(.noMessageStored)).0.reason == "CannotCreateChannelConfig")
        // Another bundle id has its own quota.
        _ = try f.createChannel(bundleID: "com.example.other")
        // Deleting frees a place; raising the quota frees more.
        f.send(.delete(first))
        _ = try f.createChannel()
        #expect(f.send(.create(.noMessageStored)).0.reason == "CannotCreateChannelConfig")
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
            return (0..<1_000).map { _ in f.send(.list()).1.response.status }
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
        let list = SimulatorTestRequest.list()
        #expect(!f.send(list).1.actions.contains { if case .goAway = $0 { true } else { false } })
        #expect(!f.send(list).1.actions.contains { if case .goAway = $0 { true } else { false } })
        let third = f.send(list).1
        #expect(third.response.status == 200, "the request that reaches N is still answered")
        #expect(third.actions.last == .goAway(errorCode: 0, debugData: Array(#"{"reason":"Shutdown"}"#.utf8)))
        #expect(try JSONValue(parsing: SimulatorEngine.goAwayDebugData) == ["reason": "Shutdown"])
        #expect(f.send(list).1.actions == [], "GOAWAY is sent once")
    }

    @Test func latencyIsDrawnFromTheConfiguredRange() throws {
        let fixed = try SimulatorFixture { $0.latency = .milliseconds(25) ... .milliseconds(25) }
        #expect(fixed.send(.list()).1.delay == .milliseconds(25))
        let ranged = try SimulatorFixture { $0.latency = .milliseconds(5) ... .milliseconds(50) }
        let delays = (0..<200).map { _ in ranged.send(.list()).1.delay }
        #expect(delays.allSatisfy { (.milliseconds(5) ... .milliseconds(50)).contains($0) })
        #expect(Set(delays).count > 100)
        #expect(try SimulatorFixture().send(.list()).1.delay == .zero)
        // Changed while running, it holds for the answers after the change.
        fixed.engine.latency = .seconds(20) ... .seconds(20)
        #expect(fixed.send(.list()).1.delay == .seconds(20))
        fixed.engine.latency = .zero ... .zero
        #expect(fixed.send(.list()).1.delay == .zero)
    }

    // MARK: - Logs and records

    @Test func everyRequestIsOneJSONLineWithoutSecrets() throws {
        let f = try SimulatorFixture()
        let channel = try f.createChannel()
        f.send(.broadcast(channel))
        f.send(.devicePush())
        f.send(.read("dHN0LXNyY2gtY2hubA=="))
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
        #expect(broadcast["status"] == .int(200) && broadcast["channel_id"] == .string(channel))
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
                f.send(.list())
            } else {
                f.send(.devicePush(payload: F.payload(timestamp: 1_800_000_000 + n, padTo: 100 + (n % 3) * 200)))
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
        none.send(.list())
        #expect(none.engine.received.isEmpty && none.engine.statusCounts == [200: 1])
    }
}
