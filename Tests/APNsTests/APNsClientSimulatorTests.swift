import Crypto
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Synchronization
import Testing

@testable import APNs
@testable import APNsSimulator

/// APNsClient against the APNs simulator over real TLS on loopback: what the client sends, how it reads every answer,
/// and what the simulator saw (accepted requests, statuses, open streams).
@Suite struct APNsClientSimulatorTests {
    static let bundle = "com.example.live"
    static let retries = RetryPolicy(maxAttempts: 12, baseDelay: .milliseconds(2), maxDelay: .milliseconds(20))

    /// A running simulator and a client for its key; both are shut down and the state folder removed by `close()`.
    struct Harness {
        let simulator: APNsSimulator
        let client: APNsClient
        let pool: HTTP2ConnectionPool
        let group: EventLoopGroup
        let folder: String

        func close() async {
            await pool.shutdown()
            await simulator.shutdown()
            let group = self.group
            let folder = self.folder
            try? await onOwnThread {
                group.shutdown()
                try? FileManager.default.removeItem(atPath: folder)
            }
        }
    }

    static func harness(
        clock: ManualWallClock? = nil, signerClock: ManualWallClock? = nil, trustSimulatorCA: Bool = true, maxInFlight: Int = 1_000,
        connections: Int = 1, configure: (inout SimulatorConfiguration) -> Void = { _ in }
    ) async throws -> Harness {
        let folder = NSTemporaryDirectory() + "marquee-apnsclient-test-\(UUID().uuidString.prefix(8))"
        var configuration = SimulatorConfiguration(stateDirectory: folder)
        configuration.bundleIDs = [bundle]
        configure(&configuration)
        let simulator = try await APNsSimulator.start(configuration: configuration, clock: clock ?? SystemWallClock())
        let key = try simulator.files.apnsSigningKey()
        var endpoints = simulator.endpoints
        if !trustSimulatorCA { endpoints.extraTrustedCAFile = nil }
        let tls = try TLSClientContext(configuration: TLSClientConfiguration(extraCAFile: endpoints.extraTrustedCAFile))
        let group = EventLoopGroup(loopCount: 1, name: "apnsclient-test")
        let pool = HTTP2ConnectionPool(group: group, tls: tls, configuration: .init(connectionsPerKey: connections))
        let signer = ProviderTokenSigner(clock: (signerClock ?? clock).map { $0 as any WallClock } ?? SystemWallClock())
        let client = APNsClient(
            signingKey: key, endpoints: endpoints, transport: pool, signer: signer,
            // Generous: the simulator is on loopback, but a busy 2-core machine (the suite beside other work) starved
            // bursts past 10 s, and a timed-out attempt is sent again, which these tests count as a repeat.
            configuration: .init(maxInFlight: maxInFlight, attemptTimeout: .seconds(60), retryPolicy: retries))
        return Harness(simulator: simulator, client: client, pool: pool, group: group, folder: folder)
    }

    static func payload(_ n: Int = 0) -> [UInt8] {
        Array(#"{"aps":{"timestamp":\#(1_800_000_000 + n),"event":"update","content-state":{"score":"\#(n)"}}}"#.utf8)
    }

    static let deviceToken = try! APNsDeviceToken(hex: String(repeating: "ab", count: 32))

    @Test func everyRequestTypeRoundTrips() async throws {
        let h = try await Self.harness()
        defer { Task { await h.close() } }
        let client = h.client
        let stored = try await client.createChannel(bundleID: Self.bundle, storagePolicy: .mostRecentMessageStored)
        let unstored = try await client.createChannel(bundleID: Self.bundle, storagePolicy: .noMessageStored)
        #expect(h.simulator.engine.channel(id: stored.value)?.storagePolicy == .mostRecentMessageStored)
        #expect(try await client.readChannel(bundleID: Self.bundle, channelID: unstored).storagePolicy == .noMessageStored)
        #expect(Set(try await client.listChannels(bundleID: Self.bundle)) == [stored, unstored])

        let sent = try await client.broadcast(
            bundleID: Self.bundle, channelID: stored, payload: Self.payload(1), expiration: 1_900_000_000,
            priority: .powerConsidered)
        let received = try #require(h.simulator.engine.broadcasts(for: stored.value).first)
        #expect(received.payload == Self.payload(1) && received.priority == 5 && received.expiration == 1_900_000_000)
        #expect(sent.uniqueID == received.uniqueID && sent.requestID == received.requestID)

        let pushed = try await client.push(bundleID: Self.bundle, deviceToken: Self.deviceToken, payload: Self.payload(2))
        let push = try #require(h.simulator.engine.devicePushes.first)
        #expect(push.topic == Self.bundle + ".push-type.liveactivity" && push.payload == Self.payload(2))
        #expect(pushed.apnsID == push.apnsID)

        try await client.deleteChannel(bundleID: Self.bundle, channelID: stored)
        #expect(try await client.listChannels(bundleID: Self.bundle) == [unstored])
        #expect(h.simulator.engine.statusCounts.keys.allSatisfy { (200..<300).contains($0) })
    }

    /// Each rejection the simulator produces, sent through the wire and read back as the right result.
    @Test func everyRejectionReadsBackAsARejectionOnce() async throws {
        let h = try await Self.harness { configuration in
            configuration.invalidDeviceTokens = [String(repeating: "cd", count: 32)]
            configuration.channelQuota = 1
        }
        defer { Task { await h.close() } }
        let channel = try await h.client.createChannel(bundleID: Self.bundle, storagePolicy: .noMessageStored)
        let unknown = try APNsChannelID("dW5rbm93bg==")
        func raw(_ operation: APNsOperation, _ method: APNsRequest.Method, _ path: String, _ headers: [String: String], _ body: String = "")
            -> APNsRequest
        {
            APNsRequest(operation: operation, method: method, path: path, headers: headers, body: Array(body.utf8))
        }
        let broadcastHeaders = ["apns-channel-id": channel.value, "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "10"]
        let cases: [(APNsRequest, APNsReason, Int)] = [
            (try .readChannel(bundleID: Self.bundle, channelID: unknown), .channelNotRegistered, 400),
            (try .deleteChannel(bundleID: Self.bundle, channelID: unknown), .channelNotRegistered, 400),
            (
                try .broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(), expiration: 1_900_000_000, priority: .immediate),
                .badExpirationDate, 400
            ),
            (
                try .broadcast(bundleID: Self.bundle, channelID: unknown, payload: Self.payload(), expiration: 0, priority: .immediate),
                .channelNotRegistered, 400
            ),
            (try .listChannels(bundleID: "com.example.other"), .topicMismatch, 403),
            (
                try .devicePush(
                    bundleID: Self.bundle, deviceToken: APNsDeviceToken(hex: String(repeating: "cd", count: 32)), payload: Self.payload(),
                    priority: .immediate), .unregistered, 410
            ),
            (raw(.readChannel, .get, "/1/apps/\(Self.bundle)/channels", [:]), .missingChannelId, 400),
            (raw(.readChannel, .get, "/1/apps/\(Self.bundle)/channels", ["apns-channel-id": String(repeating: "A", count: 200)]), .badChannelId, 400),
            (
                raw(.createChannel, .post, "/1/apps/\(Self.bundle)/channels", [:], #"{"message-storage-policy":1,"push-type":"LiveActivity","x":1}"#),
                .badRequestParams, 400
            ),
            (raw(.createChannel, .post, "/1/apps/\(Self.bundle)/channels", [:], "{"), .badRequestPayload, 400),
            (
                raw(.createChannel, .post, "/1/apps/\(Self.bundle)/channels", [:], #"{"message-storage-policy":1,"push-type":"Alert"}"#),
                .invalidPushType, 400
            ),
            (
                raw(
                    .broadcast, .post, "/4/broadcasts/apps/\(Self.bundle)", broadcastHeaders.merging(["apns-priority": "7"]) { $1 },
                    String(decoding: Self.payload(), as: UTF8.self)),
                .badPriority, 400
            ),
            (
                raw(
                    .broadcast, .post, "/4/broadcasts/apps/\(Self.bundle)", broadcastHeaders.filter { $0.key != "apns-push-type" },
                    String(decoding: Self.payload(), as: UTF8.self)),
                .missingPushType, 400
            ),
            (raw(.broadcast, .post, "/4/broadcasts/apps/\(Self.bundle)", broadcastHeaders, ""), .payloadEmpty, 400),
            (
                raw(
                    .broadcast, .post, "/4/broadcasts/apps/\(Self.bundle)", broadcastHeaders,
                    #"{"aps":{"x":"\#(String(repeating: "y", count: 6_000))"}}"#),
                .payloadTooLarge, 413
            ),
            (
                raw(
                    .broadcast, .post, "/4/broadcasts/apps/\(Self.bundle).push-type.liveactivity", broadcastHeaders,
                    String(decoding: Self.payload(), as: UTF8.self)),
                .topicDisallowed, 400
            ),
            (
                raw(
                    .devicePush, .post, "/3/device/\(Self.deviceToken.hex)", ["apns-push-type": "liveactivity", "apns-priority": "10"],
                    String(decoding: Self.payload(), as: UTF8.self)), .missingTopic, 400
            ),
            (
                raw(
                    .devicePush, .post, "/3/device/\(Self.deviceToken.hex)", ["apns-push-type": "liveactivity", "apns-topic": Self.bundle],
                    String(decoding: Self.payload(), as: UTF8.self)), .deviceTokenNotForTopic, 400
            ),
            (try .createChannel(bundleID: Self.bundle, storagePolicy: .mostRecentMessageStored), .cannotCreateChannelConfig, 400),
            (raw(.listChannels, .get, "/1/apps/\(Self.bundle)/all-channels", ["apns-request-id": "not-a-uuid"]), .badMessageId, 400),
            (
                raw(
                    .devicePush, .post, "/3/device/zz", ["apns-push-type": "liveactivity", "apns-topic": Self.bundle + ".push-type.liveactivity"],
                    String(decoding: Self.payload(), as: UTF8.self)), .badDeviceToken, 400
            ),
            (
                raw(
                    .devicePush, .post, "/3/device/\(Self.deviceToken.hex)",
                    ["apns-push-type": "alert", "apns-topic": Self.bundle + ".push-type.liveactivity"],
                    String(decoding: Self.payload(), as: UTF8.self)), .invalidPushType, 400
            ),
            (
                raw(
                    .devicePush, .post, "/3/device/\(Self.deviceToken.hex)",
                    [
                        "apns-push-type": "liveactivity", "apns-topic": Self.bundle + ".push-type.liveactivity",
                        "apns-collapse-id": String(repeating: "c", count: 65),
                    ],
                    String(decoding: Self.payload(), as: UTF8.self)), .badCollapseId, 400
            ),
            (raw(.broadcast, .get, "/4/broadcasts/apps/\(Self.bundle)", [:]), .methodNotAllowed, 405),
            (raw(.broadcast, .post, "/5/nowhere", [:]), .badPath, 404),
        ]
        let before = h.simulator.engine.statusCounts.values.reduce(0, +)
        for (request, reason, status) in cases {
            let outcome = try await h.client.send(request)
            let refusal: APNsFailure? =
                switch outcome.result {
                case .rejected(let failure) where status != 403: failure
                case .credentialsFault(let failure) where status == 403: failure
                default: nil
                }
            guard let failure = refusal else {
                Issue.record("\(request): expected \(reason), got \(outcome.result)")
                continue
            }
            #expect(failure.reason == reason, "\(request)")
            #expect(failure.status == status, "\(request)")
            #expect(outcome.attempts.count == 1, "\(request)")
        }
        if case .rejected(let failure) = try await h.client.send(cases[5].0).result {
            #expect(failure.timestamp != nil, "410 carries the time the token became invalid")
        }
        // Never retried: the simulator answered exactly one request per case (plus the 410 sent twice).
        #expect(h.simulator.engine.statusCounts.values.reduce(0, +) - before == cases.count + 1)
    }

    @Test func aTokenFromAnotherKeyIsRejectedAsInvalidAndNotRetried() async throws {
        let h = try await Self.harness()
        defer { Task { await h.close() } }
        let identity = h.client.signingKey.identity
        let stranger = try APNsSigningKey(keyID: identity.keyID, teamID: identity.teamID, key: P256.SigningKey.generate())
        let client = APNsClient(
            signingKey: stranger, endpoints: h.simulator.endpoints, transport: h.pool,
            configuration: .init(retryPolicy: Self.retries))
        let outcome = try await client.send(try .listChannels(bundleID: Self.bundle))
        #expect(outcome.result.failure?.reason == .invalidProviderToken)
        #expect(outcome.attempts.count == 1)
        #expect(h.simulator.engine.statusCounts == [403: 1])
    }

    /// A token replaced sooner than 20 minutes on one connection is refused with 429 TooManyProviderTokenUpdates; the client
    /// backs off with the same token and never refreshes because of it.
    @Test func aTokenChangedTooSoonIsRetriedButNeverRefreshed() async throws {
        let clock = ManualWallClock(Date(timeIntervalSince1970: 1_800_000_000))
        let h = try await Self.harness(clock: clock)
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        _ = try await h.client.broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(0))
        clock.advance(by: 60)
        let first = try h.client.signer.token(for: h.client.signingKey)
        _ = try h.client.signer.tokenAfterExpiry(of: first, for: h.client.signingKey)
        let outcome = try await h.client.send(
            try .broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(1), expiration: 0, priority: .immediate))
        guard case .tokenUpdatesTooFrequent(let failure) = outcome.result else {
            Issue.record("\(outcome.result)")
            return
        }
        #expect(failure.reason == .tooManyProviderTokenUpdates && failure.status == 429)
        #expect(outcome.attempts.count == Self.retries.maxAttempts)
        #expect(h.simulator.engine.statusCounts == [200: 1, 429: Self.retries.maxAttempts])
    }

    /// A burst at connection start waits for the first authenticated answer: the host counts streams open at once,
    /// and nothing is refused or retried.
    @Test func aBurstAtConnectionStartKeepsToOneStreamUntilTheFirstSuccess() async throws {
        let h = try await Self.harness { $0.latency = .milliseconds(5) ... .milliseconds(10) }
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        let watcher = StreamLimitWatcher(h.pool)
        let outcomes = try await Self.burst(h.client, count: 40, channel: channel)
        #expect(outcomes.allSatisfy { $0.acceptance != nil && $0.attempts.count == 1 })
        #expect(h.simulator.engine.broadcasts.count == 40)
        // The simulator's own view: it raised the limit only after answering the first request, and the client never
        // had a second stream open before that raise arrived.
        let limits = await watcher.stop { $0.contains(1000) }
        #expect(limits.contains(1000) && limits.allSatisfy { $0 == 1 || $0 == 1000 }, "\(limits)")
        #expect(h.simulator.engine.statusCounts == [200: 40])
    }

    /// The same rule seen from the server: a host around the simulator's engine counts the streams open on each
    /// connection (from the request reaching it until its answer, delayed 5 ms) before its first 2xx answer.
    @Test func theSimulatorNeverSeesTwoOpenStreamsBeforeTheFirstSuccess() async throws {
        let folder = NSTemporaryDirectory() + "marquee-apnsclient-test-\(UUID().uuidString.prefix(8))"
        var configuration = SimulatorConfiguration(stateDirectory: folder)
        configuration.bundleIDs = [Self.bundle]
        let files = try SimulatorFiles.prepare(configuration)
        let engine = SimulatorEngine(configuration: configuration, trustedKeys: [try files.trustedKey()])
        let counter = OpenStreamCounter()
        var serverConfiguration = HTTP2ServerConfiguration(host: "127.0.0.1", port: 0)
        serverConfiguration.maxConcurrentStreams = engine.initialStreamLimit
        let serverGroup = EventLoopGroup(loopCount: 1, name: "counting-host")
        let server = try HTTP2Server(
            configuration: serverConfiguration,
            tls: try TLSServerContext(certificateChainFile: files.certificateFile, privateKeyFile: files.certificateKeyFile), group: serverGroup,
            handler: CountingSimulatorHost(engine: engine, counter: counter))
        let endpoint = APNsEndpoint(host: "127.0.0.1", port: server.port)
        let endpoints = APNsEndpoints(push: endpoint, management: endpoint, extraTrustedCAFile: files.caCertificateFile)
        let clientGroup = EventLoopGroup(loopCount: 1, name: "apnsclient-test")
        let pool = HTTP2ConnectionPool(
            group: clientGroup, tls: try TLSClientContext(configuration: .init(extraCAFile: files.caCertificateFile)),
            configuration: .init(connectionsPerKey: 2))
        let client = APNsClient(
            signingKey: try files.apnsSigningKey(), endpoints: endpoints, transport: pool,
            // Generous, as in `harness`: a timed-out attempt on a starved machine is resent and counted as a repeat.
            configuration: .init(attemptTimeout: .seconds(60), retryPolicy: Self.retries))
        let channel = try APNsChannelID("Y2hhbm5lbC1mb3ItdGVzdHM=")
        engine.restoreChannels([
            SimulatorChannel(bundleID: Self.bundle, id: channel.value, storagePolicy: .mostRecentMessageStored, createdAt: Date())
        ])

        let outcomes = try await Self.burst(client, count: 40, channel: channel)
        await pool.shutdown()
        await server.shutdown()
        try? await onOwnThread {
            clientGroup.shutdown()
            serverGroup.shutdown()
            try? FileManager.default.removeItem(atPath: folder)
        }
        #expect(outcomes.allSatisfy { $0.acceptance != nil && $0.attempts.count == 1 })
        #expect(engine.broadcasts.count == 40)
        let seen = counter.snapshot
        #expect(seen.connections >= 1)
        #expect(seen.maxOpenBeforeFirstSuccess == 1)
        #expect(seen.maxOpen > 1, "after the first success the client does use more streams")
    }

    /// The simulator counts what a client that went away had in flight: the answers its added latency still held when
    /// the connection closed (`inFlightAtDisconnect` on `GET /status`), which a crash makes `unknown`.
    @Test func theSimulatorCountsTheAnswersInFlightWhenAClientGoesAway() async throws {
        let h = try await Self.harness()
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        // One answer first: the connection's stream limit rises after its first success.
        _ = try await Self.burst(h.client, count: 1, channel: channel)
        h.simulator.engine.latency = .seconds(30) ... .seconds(30)
        let sends = Task { try? await Self.burst(h.client, count: 12, channel: channel) }
        #expect(try await eventually { h.simulator.engine.inFlight == 12 }, "twelve answers held")
        #expect(h.simulator.engine.inFlightAtDisconnect == 0)
        await h.pool.shutdown()
        #expect(try await eventually { h.simulator.engine.inFlightAtDisconnect == 12 })
        sends.cancel()
    }

    @Test func theStreamLimitFallsToOneAfterARejectionAndRecovers() async throws {
        let h = try await Self.harness { $0.latency = .milliseconds(1) ... .milliseconds(3) }
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        let watcher = StreamLimitWatcher(h.pool)
        let unknown = try APNsChannelID("dW5rbm93bg==")
        let outcomes = try await withThrowingTaskGroup(of: APNsOutcome.self) { group in
            for n in 0..<60 {
                let target = n % 20 == 10 ? unknown : channel
                let request = try APNsRequest.broadcast(
                    bundleID: Self.bundle, channelID: target, payload: Self.payload(n), expiration: 0, priority: .immediate)
                group.addTask { try await h.client.send(request) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.filter { $0.acceptance != nil }.count == 57)
        #expect(outcomes.filter { $0.result.failure?.reason == .channelNotRegistered }.count == 3)
        #expect(outcomes.allSatisfy { $0.attempts.count == 1 })
        #expect(h.simulator.engine.broadcasts.count == 57)
        // Once a rejection's drop and the next success's raise have both arrived.
        let limits = await watcher.stop { $0.contains(1) && $0.last == 1000 }
        // Up after the first success, down to 1 after each rejection, up again after the next success.
        let drops = limits.indices.filter { limits[$0] == 1 }
        #expect(!drops.isEmpty)
        #expect(drops.allSatisfy { $0 + 1 < limits.count && limits[$0 + 1] == 1000 })
    }

    @Test func goawayMidBurstLosesNothingAndSendsNothingTwice() async throws {
        // At most 10 in flight, so the burst spans many connections, each closed by GOAWAY after 15 requests.
        let h = try await Self.harness(maxInFlight: 10) { configuration in
            configuration.faults.goAwayAfterStreams = 15
            configuration.latency = .milliseconds(1) ... .milliseconds(4)
        }
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        let watcher = StreamLimitWatcher(h.pool)
        let outcomes = try await Self.burst(h.client, count: 120, channel: channel)
        #expect(outcomes.allSatisfy { $0.acceptance != nil })
        let received = h.simulator.engine.broadcasts
        #expect(Set(received.map(\.requestID)) == Set(outcomes.compactMap { $0.attempts.last?.requestID }), "nothing lost")
        // GOAWAY names the highest stream the server received, so nothing it answered is resent. Only an attempt
        // that timed out (on a loaded machine, past the 60 s attempt timeout) may have reached the server and be
        // sent again, as a broadcast may be: the repeat carries the same aps.timestamp.
        let timedOut = outcomes.flatMap(\.attempts).filter { $0.transportError != nil }
        let resendable = Set(
            outcomes.filter { $0.attempts.count > 1 && $0.attempts.dropLast().allSatisfy { $0.transportError != nil } }
                .compactMap { $0.attempts.last?.requestID })
        let repeated = Dictionary(grouping: received, by: \.requestID).filter { $0.value.count > 1 }.map(\.key)
        #expect(received.count <= 120 + timedOut.count, "every request accepted once, a timed-out one at most twice")
        #expect(repeated.allSatisfy(resendable.contains), "a repeat only after a timed-out attempt: \(repeated)")
        #expect(Set(received.map(\.requestID)).count == 120)
        // The pool resends streams above the GOAWAY's last stream id itself; the connections did go away.
        let events = await watcher.stopEvents { events in
            let goaways = events.filter { if case .goAway = $0 { true } else { false } }.count
            return goaways >= 120 / 25 && events.filter { $0 == .connected }.count >= goaways
        }
        let goaways = events.filter { if case .goAway = $0 { true } else { false } }
        let connects = events.filter { $0 == .connected }
        #expect(goaways.count >= 120 / 25, "\(events)")
        #expect(connects.count >= goaways.count)
    }

    @Test func serverErrorsAndThrottlingAreRetriedUntilAccepted() async throws {
        let h = try await Self.harness { configuration in
            configuration.faults.serviceUnavailable = 0.3
            configuration.faults.tooManyRequests = 0.15
            configuration.faults.internalServerError = 0.05
        }
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        let outcomes = try await Self.burst(h.client, count: 60, channel: channel)
        #expect(outcomes.allSatisfy { $0.acceptance != nil })
        #expect(h.simulator.engine.broadcasts.count == 60)
        let counts = h.simulator.engine.statusCounts
        #expect(counts[200] == 60)
        #expect((counts[503] ?? 0) > 0 && (counts[429] ?? 0) > 0)
        // Every attempt the client recorded is one answer the simulator gave, and the reverse.
        #expect(outcomes.map(\.attempts.count).reduce(0, +) == counts.values.reduce(0, +))
        #expect(outcomes.flatMap(\.attempts).filter { $0.status == 503 }.count == counts[503] ?? 0)
    }

    @Test func anExpiredTokenIsRefreshedOnceAndTheRequestRetried() async throws {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let simulatorClock = ManualWallClock(start)
        let signerClock = ManualWallClock(start)
        let h = try await Self.harness(clock: simulatorClock, signerClock: signerClock)
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        _ = try await h.client.broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(0))
        // The simulator's time runs ahead: the token the signer still finds fresh is over an hour old there.
        simulatorClock.advance(by: 61 * 60)
        signerClock.advance(by: 30 * 60)
        let outcome = try await h.client.send(
            try .broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(1), expiration: 0, priority: .immediate))
        #expect(outcome.acceptance != nil)
        #expect(outcome.attempts.map(\.reason) == [.expiredProviderToken, nil])
        #expect(h.simulator.engine.statusCounts == [200: 2, 403: 1])
    }

    @Test func anUntrustedCertificateIsRefusedWithoutRetrying() async throws {
        let h = try await Self.harness(trustSimulatorCA: false)
        defer { Task { await h.close() } }
        let outcome = try await h.client.send(try .listChannels(bundleID: Self.bundle))
        #expect(outcome.acceptance == nil)
        #expect(outcome.attempts.count == 1)
        guard case .certificateRejected? = outcome.transportError else {
            Issue.record("\(String(describing: outcome.transportError))")
            return
        }
        #expect(h.simulator.engine.statusCounts.isEmpty)
    }

    /// Two hours of simulated time, a request every 30 s on the same connection: the shared token is refreshed on
    /// schedule, never too often and never too late.
    @Test func twoSimulatedHoursNeedNoTokenRetries() async throws {
        let clock = ManualWallClock(Date(timeIntervalSince1970: 1_800_000_000))
        let h = try await Self.harness(clock: clock)
        defer { Task { await h.close() } }
        let channel = try await Self.createDirectly(h)
        var tokens: Set<String> = []
        for n in 0..<240 {
            let outcome = try await h.client.send(
                try .broadcast(bundleID: Self.bundle, channelID: channel, payload: Self.payload(n), expiration: 0, priority: .immediate))
            #expect(outcome.acceptance != nil && outcome.attempts.count == 1, "at \(n * 30) s: \(outcome.result)")
            tokens.insert(try h.client.signer.token(for: h.client.signingKey).jwt)
            clock.advance(by: 30)
        }
        #expect(tokens.count == 3, "one token per 50 minutes")
        #expect(h.simulator.engine.statusCounts == [200: 240])
        #expect(h.pool.connectionIDs(to: HTTP2Origin(host: "127.0.0.1", port: h.simulator.pushPort), key: h.client.poolKey).count == 1)
    }

    // MARK: Helpers

    /// A channel made in the engine directly, so the connection under test starts fresh with the first broadcast.
    static func createDirectly(_ h: Harness) async throws -> APNsChannelID {
        let id = "Y2hhbm5lbC1mb3ItdGVzdHM="
        h.simulator.engine.restoreChannels([
            SimulatorChannel(
                bundleID: bundle, id: id, storagePolicy: .mostRecentMessageStored,
                createdAt: h.simulator.engine.clock.now)
        ])
        return try APNsChannelID(id)
    }

    static func burst(_ client: APNsClient, count: Int, channel: APNsChannelID) async throws -> [APNsOutcome] {
        try await withThrowingTaskGroup(of: APNsOutcome.self) { group in
            for n in 0..<count {
                let request = try APNsRequest.broadcast(
                    bundleID: bundle, channelID: channel, payload: payload(n), expiration: 0, priority: .immediate)
                group.addTask { try await client.send(request) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }
}

/// Collects the events of the pool's connections, in order.
final class StreamLimitWatcher: Sendable {
    private final class Events: Sendable {
        let all = Mutex<[HTTP2ClientConnection.Event]>([])
    }
    private let events = Events()
    private let task: Task<Void, Never>

    init(_ pool: HTTP2ConnectionPool) {
        let events = self.events
        task = Task {
            for await event in pool.events {
                if Task.isCancelled { break }
                events.all.withLock { $0.append(event.event) }
            }
        }
    }

    /// The events once `complete` says they are all there (events trail the answers they follow; the wait is
    /// generous), or all that came if they never are: the test's expectations then say what is missing.
    func stopEvents(when complete: ([HTTP2ClientConnection.Event]) -> Bool) async -> [HTTP2ClientConnection.Event] {
        var seen = events.all.withLock { $0 }
        _ = try? await eventually {
            seen = events.all.withLock { $0 }
            return complete(seen)
        }
        task.cancel()
        return seen
    }

    /// The stream limits reported, once `complete` says they are all there.
    func stop(when complete: ([Int]) -> Bool) async -> [Int] {
        Self.limits(await stopEvents { complete(Self.limits($0)) })
    }

    static func limits(_ events: [HTTP2ClientConnection.Event]) -> [Int] {
        events.compactMap { if case .maxConcurrentStreamsChanged(let limit) = $0 { Int(limit) } else { nil } }
    }
}

/// What a counting host saw: streams open at once, before and after each connection's first success.
final class OpenStreamCounter: Sendable {
    struct Snapshot: Sendable {
        var connections = 0
        var maxOpenBeforeFirstSuccess = 0
        var maxOpen = 0
    }

    final class Connection: Sendable {
        struct State {
            var open = 0
            var succeeded = false
        }
        let state = Mutex(State())
    }

    private let totals = Mutex(Snapshot())

    var snapshot: Snapshot { totals.withLock { $0 } }

    func opened(_ connection: Connection) {
        totals.withLock { $0.connections += 1 }
        _ = connection
    }

    func requestArrived(on connection: Connection) {
        let (open, succeeded) = connection.state.withLock { state in
            state.open += 1
            return (state.open, state.succeeded)
        }
        totals.withLock { totals in
            totals.maxOpen = max(totals.maxOpen, open)
            if !succeeded { totals.maxOpenBeforeFirstSuccess = max(totals.maxOpenBeforeFirstSuccess, open) }
        }
    }

    func answered(on connection: Connection, status: Int) {
        connection.state.withLock { state in
            state.open -= 1
            if (200..<300).contains(status) { state.succeeded = true }
        }
    }
}

/// The simulator engine behind a host of the test's own that counts open streams; answers are delayed 5 ms
/// so concurrent streams overlap.
struct CountingSimulatorHost: HTTP2RequestHandler {
    let engine: SimulatorEngine
    let counter: OpenStreamCounter

    final class Box {
        var state: SimulatorConnectionState
        let counted = OpenStreamCounter.Connection()
        init(_ state: SimulatorConnectionState) { self.state = state }
    }

    func connectionOpened(_ connection: HTTP2ServerConnection) {
        let box = Box(engine.makeConnectionState())
        connection.state = box
        counter.opened(box.counted)
    }

    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply {
        guard let box = connection.state as? Box else { return .response(HTTPResponse(status: 500)) }
        counter.requestArrived(on: box.counted)
        let reply = engine.handle(request, on: request.path.hasPrefix("/1/") ? .management : .push, connection: &box.state)
        let counted = box.counted
        let counter = self.counter
        let response = reply.response
        let actions = reply.actions
        return .deferred {
            // The answer comes a little after the request, as over a network: the delay is the behaviour under test.
            try? await Task.sleep(for: .milliseconds(5))
            counter.answered(on: counted, status: response.status)
            // The limit changes with the answer, as APNs does.
            connection.loop.execute {
                for action in actions {
                    switch action {
                    case .setMaxConcurrentStreams(let limit): connection.setMaxConcurrentStreams(limit)
                    case .goAway(let code, let data): connection.goAway(errorCode: code, debugData: data)
                    }
                }
            }
            return response
        }
    }
}
