import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Testing

@testable import APNs
@testable import APNsSimulator

/// The simulator against Marquee's own HTTP/2 client: stream limits as the client sees them, GOAWAY, answers read by APNsResult.
@Suite struct SimulatorClientTests {
    static func send(_ connection: HTTP2ClientConnection, _ request: APNsRequest, token: ProviderToken, port: Int) async throws -> APNsResult {
        let headers = HTTPHeaders(request.headers(authorizedBy: token).sorted { $0.key < $1.key }.map { HTTPField(name: $0.key, value: $0.value) })
        let response = try await connection.send(
            HTTPRequest(method: request.method.rawValue, path: request.path, authority: "127.0.0.1:\(port)", headers: headers, body: request.body),
            timeout: .seconds(10))
        var answerHeaders: [String: String] = [:]
        for field in response.headers { answerHeaders[field.name] = field.value }
        return APNsResult(response: APNsResponse(status: response.status, headers: answerHeaders, body: response.body), operation: request.operation)
    }

    @Test func networkClientCreatesBroadcastsAndSeesTheStreamLimit() async throws {
        let folder = SimulatorTestHost.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(configuration: SimulatorTestHost.configuration(folder) { $0.streamLimit = 300 })
        let token = try ProviderToken(signingKey: simulator.files.apnsSigningKey(), issuedAt: Date())
        let loop = EventLoop(name: "simulator-client-test")
        let tls = try TLSClientContext(
            configuration: TLSClientConfiguration(
                trustsSystemCAs: false, extraCAFile: simulator.files.caCertificateFile))
        let management = HTTP2ClientConnection(origin: HTTP2Origin(host: "127.0.0.1", port: simulator.managementPort), tls: tls, loop: loop)
        let push = HTTP2ClientConnection(origin: HTTP2Origin(host: "127.0.0.1", port: simulator.pushPort), tls: tls, loop: loop)

        let created = try await Self.send(
            management, try .createChannel(bundleID: SimulatorTestHost.bundleID, storagePolicy: .noMessageStored),
            token: token, port: simulator.managementPort)
        guard case .accepted(let acceptance) = created, let channel = acceptance.channelID else {
            Issue.record("create: \(created)")
            return
        }
        #expect(await management.maxConcurrentStreams == 300)

        let results = try await withThrowingTaskGroup(of: APNsResult.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let payload = Array(#"{"aps":{"timestamp":\#(1_800_000_000 + index),"event":"update","content-state":{}}}"#.utf8)
                    return try await Self.send(
                        push,
                        try .broadcast(
                            bundleID: SimulatorTestHost.bundleID, channelID: channel, payload: payload, expiration: 0, priority: .powerConsidered),
                        token: token, port: simulator.pushPort)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.allSatisfy { if case .accepted = $0 { true } else { false } })
        #expect(simulator.engine.broadcasts(for: channel.value).count == 200)
        #expect(await push.maxConcurrentStreams == 300)

        // A rejection drops the client's view of the limit to 1.
        let rejected = try await Self.send(
            push,
            try .broadcast(
                bundleID: SimulatorTestHost.bundleID, channelID: channel, payload: Array(#"{"aps":{}}"#.utf8), expiration: 60, priority: .immediate),
            token: token, port: simulator.pushPort)
        #expect(rejected.failure?.reason == .badExpirationDate)
        // The SETTINGS frame follows the answer on the wire; give the client a moment to read it.
        #expect(try await eventually { await push.maxConcurrentStreams == 1 }, "the limit never fell to 1")
        // The next accepted broadcast restores it.
        let accepted = try await Self.send(
            push,
            try .broadcast(
                bundleID: SimulatorTestHost.bundleID, channelID: channel, payload: Array(#"{"aps":{}}"#.utf8), expiration: 0, priority: .immediate),
            token: token, port: simulator.pushPort)
        #expect(accepted.acceptance != nil)
        #expect(try await eventually { await push.maxConcurrentStreams == 300 }, "the limit never rose back to 300")

        await management.close()
        await push.close()
        await simulator.shutdown()
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                loop.shutdown()
                continuation.resume()
            }
        }
    }

    @Test func goAwayAfterNStreamsMakesThePoolReconnect() async throws {
        let folder = SimulatorTestHost.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(configuration: SimulatorTestHost.configuration(folder) { $0.faults.goAwayAfterStreams = 3 })
        let token = try ProviderToken(signingKey: simulator.files.apnsSigningKey(), issuedAt: Date())
        let group = EventLoopGroup(loopCount: 1, name: "simulator-pool-test")
        let tls = try TLSClientContext(configuration: TLSClientConfiguration(trustsSystemCAs: false, extraCAFile: simulator.files.caCertificateFile))
        let pool = HTTP2ConnectionPool(group: group, tls: tls, configuration: .init(connectionsPerKey: 1))
        let origin = HTTP2Origin(host: "127.0.0.1", port: simulator.managementPort)
        let list = try APNsRequest.listChannels(bundleID: SimulatorTestHost.bundleID)
        let headers = HTTPHeaders(list.headers(authorizedBy: token).map { HTTPField(name: $0.key, value: $0.value) })
        for _ in 0..<9 {
            var answered = false
            for _ in 0..<3 where !answered {
                do {
                    let response = try await pool.send(
                        HTTPRequest(method: "GET", path: list.path, headers: headers), to: origin, key: "k", timeout: .seconds(10))
                    #expect(response.status == 200)
                    answered = true
                } catch {
                    // A request that met the GOAWAY was not processed: retrying it is what a client must do.
                    #expect(error.isRetryable, "\(error)")
                }
            }
            #expect(answered)
        }
        #expect(simulator.engine.statusCounts == [200: 9])
        await pool.shutdown()
        await simulator.shutdown()
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                group.shutdown()
                continuation.resume()
            }
        }
    }
}
