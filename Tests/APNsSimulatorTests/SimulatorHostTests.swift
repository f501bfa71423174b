import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Testing

@testable import APNsSimulator

/// The simulator host end to end over loopback, driven by curl and nghttp as a user would.
@Suite struct SimulatorHostTests {
    static let bundleID = "com.example.live"

    /// A fresh state folder under the system temporary directory.
    static func stateFolder() -> String {
        let path = NSTemporaryDirectory() + "marquee-simulator-test-\(UUID().uuidString.prefix(8))"
        return path
    }

    /// A provider token of the simulator's trusted key.
    static func token(_ files: SimulatorFiles) throws -> SimulatorTestToken {
        try SimulatorTestToken(key: files.signingKey(), keyID: files.keyID, teamID: files.teamID, issuedAt: Date())
    }

    static func configuration(_ folder: String, _ configure: (inout SimulatorConfiguration) -> Void = { _ in }) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration(stateDirectory: folder)
        configuration.bundleIDs = [bundleID]
        configure(&configuration)
        return configuration
    }

    /// The full path of a tool found on PATH (curl, nghttp and h2load come from Scripts/bootstrap).
    static func tool(_ name: String) -> String? {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
        return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs a tool from PATH to completion on a thread outside the cooperative pool; returns its standard output.
    static func run(_ name: String, _ arguments: [String], input: [UInt8] = []) async throws -> String {
        let path = try #require(tool(name), "\(name) is not on PATH: run Scripts/bootstrap")
        return try await ChildProcess.run(path, arguments, input: .bytes(input), stderr: .discarded).stdout
    }

    struct CurlAnswer {
        var status: Int
        var headers: [String: String]
        var body: String
        var json: JSONValue? { try? JSONValue(parsing: body) }
    }

    /// One HTTP/2 request with curl, trusting the simulator's CA.
    static func curl(
        _ simulator: APNsSimulator, _ method: String, _ url: String, headers: [String: String] = [:], body: String? = nil,
        token: SimulatorTestToken?
    ) async throws -> CurlAnswer {
        var arguments = ["--http2", "--silent", "--show-error", "--include", "--cacert", simulator.files.caCertificateFile!, "-X", method]
        var allHeaders = headers
        if let token { allHeaders["authorization"] = token.authorization }
        for (name, value) in allHeaders.sorted(by: { $0.key < $1.key }) { arguments += ["-H", "\(name): \(value)"] }
        if body != nil { arguments += ["--data-binary", "@-"] }
        arguments.append(url)
        let output = try await run("curl", arguments, input: Array((body ?? "").utf8))
        let parts = output.components(separatedBy: "\r\n\r\n")
        let head = parts[0].components(separatedBy: "\r\n")
        var answer = CurlAnswer(
            status: Int(head[0].split(separator: " ").dropFirst().first ?? "") ?? 0, headers: [:],
            body: parts.dropFirst().joined(separator: "\r\n\r\n"))
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            answer.headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return answer
    }

    @Test func curlDrivesChannelsAndBroadcastsAndChannelsSurviveARestart() async throws {
        let folder = Self.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(configuration: Self.configuration(folder))
        let files = simulator.files
        #expect(simulator.pushPort > 0 && simulator.managementPort > 0 && simulator.pushPort != simulator.managementPort)
        for file in [files.caCertificateFile!, files.certificateFile, files.certificateKeyFile, files.signingKeyFile] {
            #expect(FileManager.default.fileExists(atPath: file), "\(file)")
        }
        #expect(simulator.summary.contains(files.keyID) && simulator.summary.contains(simulator.pushURL))
        #expect(simulator.summary.contains(simulator.controlURL))
        #expect(
            simulator.environmentVariables == [
                "MARQUEE_APNS_PUSH_URL": "https://127.0.0.1:\(simulator.pushPort)",
                "MARQUEE_APNS_MANAGE_URL": "https://127.0.0.1:\(simulator.managementPort)", "MARQUEE_APNS_CA_FILE": files.caCertificateFile!,
            ])
        let token = try Self.token(files)
        let manage = simulator.managementURL + "/1/apps/\(Self.bundleID)"

        let created = try await Self.curl(
            simulator, "POST", manage + "/channels",
            body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#, token: token)
        #expect(created.status == 201)
        let channelID = try #require(created.headers["apns-channel-id"])
        #expect(created.headers["apns-request-id"] != nil)

        // The certificate names localhost as well as 127.0.0.1.
        let localhostList = try await Self.curl(
            simulator, "GET", "https://localhost:\(simulator.managementPort)/1/apps/\(Self.bundleID)/all-channels", token: token)
        #expect(localhostList.json == ["channels": [.string(channelID)]])

        let read = try await Self.curl(simulator, "GET", manage + "/channels", headers: ["apns-channel-id": channelID], token: token)
        #expect(read.status == 200 && read.json?["message-storage-policy"] == .int(1))

        let requestID = UUID().uuidString.lowercased()
        let broadcast = try await Self.curl(
            simulator, "POST", simulator.pushURL + "/4/broadcasts/apps/\(Self.bundleID)",
            headers: [
                "apns-channel-id": channelID, "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "5",
                "apns-request-id": requestID,
            ],
            body: #"{"aps":{"timestamp":1800000000,"event":"update","content-state":{"score":"2-1"}}}"#, token: token)
        #expect(broadcast.status == 200 && broadcast.headers["apns-request-id"] == requestID && broadcast.headers["apns-unique-id"] != nil)
        let received = simulator.engine.broadcasts(for: channelID)
        #expect(received.first?.json["aps"]?["content-state"]?["score"] == "2-1")

        let unauthorized = try await Self.curl(simulator, "GET", manage + "/all-channels", token: nil)
        #expect(unauthorized.status == 403 && unauthorized.json?["reason"] == "MissingProviderToken")

        let tooLarge = try await Self.curl(
            simulator, "POST", simulator.pushURL + "/4/broadcasts/apps/\(Self.bundleID)", headers: ["apns-channel-id": channelID],
            body: String(repeating: "x", count: 100_000), token: token)
        #expect(tooLarge.status == 413 && tooLarge.json?["reason"] == "PayloadTooLarge")
        await simulator.shutdown()

        // A restart on the same folder keeps the identity and the channels.
        let restarted = try await APNsSimulator.start(configuration: Self.configuration(folder))
        #expect(restarted.files == files)
        #expect(restarted.engine.channels().map(\.id) == [channelID])
        let list = try await Self.curl(restarted, "GET", restarted.managementURL + "/1/apps/\(Self.bundleID)/all-channels", token: token)
        #expect(list.json == ["channels": [.string(channelID)]])
        let deleted = try await Self.curl(
            restarted, "DELETE", restarted.managementURL + "/1/apps/\(Self.bundleID)/channels",
            headers: ["apns-channel-id": channelID], token: token)
        #expect(deleted.status == 204)
        await restarted.shutdown()
        #expect(try files.loadChannels().isEmpty)
    }

    /// Control routes answer on the control port only; the push and management ports answer them as Apple would.
    @Test func controlRoutesLiveOnTheirOwnPort() async throws {
        let folder = Self.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(configuration: Self.configuration(folder))
        #expect(Set([simulator.pushPort, simulator.managementPort, simulator.controlPort]).count == 3)
        let token = try Self.token(simulator.files)
        func control(_ method: String, _ path: String, body: String? = nil) async throws -> (status: Int, body: String) {
            var arguments = ["--silent", "--show-error", "-X", method, "-o", "-", "-w", "\n%{http_code}"]
            if body != nil { arguments += ["-H", "content-type: application/json", "--data-binary", "@-"] }
            let output = try await Self.run("curl", arguments + [simulator.controlURL + path], input: Array((body ?? "").utf8))
            let lines = output.components(separatedBy: "\n")
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }

        // Apple's ports know nothing of them: 404 BadPath.
        for url in [simulator.pushURL + "/status", simulator.managementURL + "/status", simulator.pushURL + "/rejections"] {
            let answer = try await Self.curl(simulator, "POST", url, body: "{}", token: token)
            #expect(answer.status == 404 && answer.json?["reason"] == "BadPath", "\(url)")
        }

        // A scripted rejection answers the next request of its API once, spelled as that API's page spells it.
        #expect(try await control("POST", "/rejections", body: #"{"api":"channelManagement","reason":"Service Unavailable"}"#).status == 204)
        #expect(try await control("POST", "/rejections", body: #"{"api":"channelManagement","reason":"ServiceUnavailable"}"#).status == 400)
        #expect(try await control("POST", "/rejections", body: #"{"api":"devicePush","reason":"Shutdown"}"#).status == 204)
        let list = simulator.managementURL + "/1/apps/\(Self.bundleID)/all-channels"
        let refused = try await Self.curl(simulator, "GET", list, token: token)
        #expect(refused.status == 503 && refused.json?["reason"] == "Service Unavailable")
        #expect(try await Self.curl(simulator, "GET", list, token: token).status == 200)

        // Invalid tokens, status and records.
        let device = String(repeating: "ab", count: 32)
        #expect(try await control("POST", "/invalid-tokens/\(device)").status == 204)
        #expect(try await control("POST", "/invalid-tokens/xyz").status == 400)
        let push = try await Self.curl(
            simulator, "POST", simulator.pushURL + "/3/device/\(device)",
            headers: ["apns-topic": Self.bundleID + ".push-type.liveactivity", "apns-push-type": "liveactivity"],
            body: #"{"aps":{"event":"update"}}"#, token: token)
        #expect(push.status == 503 && push.json?["reason"] == "Shutdown", "the scripted device-push rejection comes first")
        let gone = try await Self.curl(
            simulator, "POST", simulator.pushURL + "/3/device/\(device)",
            headers: ["apns-topic": Self.bundleID + ".push-type.liveactivity", "apns-push-type": "liveactivity"],
            body: #"{"aps":{"event":"update"}}"#, token: token)
        #expect(gone.status == 410 && gone.json?["reason"] == "Unregistered" && gone.json?["timestamp"]?.intValue != nil)
        let status = try await control("GET", "/status")
        #expect(status.status == 200)
        let counts = try JSONValue(parsing: status.body)
        #expect(counts["statuses"] == ["200": 1, "404": 3, "410": 1, "503": 2], "\(status.body)")
        #expect(counts["accepted"]?["channelOperations"] == 1 && counts["channels"] == 0)
        #expect(try await control("DELETE", "/records").status == 204)
        #expect(simulator.engine.received.isEmpty)
        #expect(try await control("GET", "/nothing").status == 404)
        #expect(try await control("PUT", "/status").status == 405)
        await simulator.shutdown()
    }

    @Test func nghttpSeesOneStreamUntilAuthenticatedThenTheLimitAndGoAway() async throws {
        let folder = Self.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(
            configuration: Self.configuration(folder) {
                $0.streamLimit = 700
                $0.faults.goAwayAfterStreams = 1
            })
        let token = try SimulatorHostTests.token(simulator.files)
        let output = try await Self.run(
            "nghttp",
            [
                "-v", "-H", "authorization: \(token.authorization)",
                simulator.managementURL + "/1/apps/\(Self.bundleID)/all-channels",
            ])
        await simulator.shutdown()
        // The MAX_CONCURRENT_STREAMS values of the SETTINGS frames nghttp received, in order.
        var received: [String] = []
        var inReceivedSettings = false
        for line in output.components(separatedBy: "\n") {
            if line.hasPrefix("[") { inReceivedSettings = line.contains("recv SETTINGS frame") }
            if inReceivedSettings, let range = line.range(of: "SETTINGS_MAX_CONCURRENT_STREAMS(0x03):") {
                received.append(String(line[range.upperBound...].dropLast()))
            }
        }
        #expect(received == ["1", "700"], "\(output)")
        #expect(output.contains("recv GOAWAY frame"))
        #expect(output.contains(#"{"reason":"Shutdown"}"#))
        #expect(output.contains(#"{"channels":[]}"#))
    }

    @Test func answersWithAddedLatencyAndInjectedFaultsStillArrive() async throws {
        let folder = Self.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(
            configuration: Self.configuration(folder) {
                $0.latency = .milliseconds(20) ... .milliseconds(40)
                $0.faults.serviceUnavailable = 1
            })
        let token = try SimulatorHostTests.token(simulator.files)
        let answer = try await Self.curl(simulator, "GET", simulator.managementURL + "/1/apps/\(Self.bundleID)/all-channels", token: token)
        await simulator.shutdown()
        // The channel-management API spells it with a space (handling-error-responses-from-apns).
        #expect(answer.status == 503 && answer.json?["reason"] == "Service Unavailable")
        #expect(answer.headers["apns-request-id"] != nil)
    }

    @Test func aTakenPortFailsTheStartAndReleasesTheOtherListener() async throws {
        let folder = Self.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let first = try await APNsSimulator.start(configuration: Self.configuration(folder))
        let taken = first.managementPort
        // A port that was free a moment ago, for the listener that does bind.
        let probe = try await APNsSimulator.start(configuration: Self.configuration(folder))
        let free = probe.pushPort
        await probe.shutdown()
        await #expect(throws: NetworkError.self) {
            _ = try await APNsSimulator.start(
                configuration: Self.configuration(folder) {
                    $0.pushPort = free
                    $0.managementPort = taken
                })
        }
        // The failed start let go of the port it had bound.
        let second = try await APNsSimulator.start(configuration: Self.configuration(folder) { $0.pushPort = free })
        #expect(second.pushPort == free)
        await second.shutdown()
        await first.shutdown()
    }

    @Test func flagsParseIntoAConfiguration() throws {
        let configuration = try #require(
            try SimulatorConfiguration.parse(arguments: [
                "--state", "sim", "--push-port", "2197", "--management-port", "2195", "--control-port", "2198", "--environment", "production",
                "--bundle-id", "a.b", "--bundle-id", "c.d", "--quota", "5", "--relaxed", "--fail-429", "0.1", "--fail-503", "0.05",
                "--goaway-after", "100", "--latency-ms", "5-20", "--seed", "42", "--invalid-token", "ABCD", "--stream-limit", "500",
            ]))
        #expect(configuration.stateDirectory == "sim" && configuration.pushPort == 2197 && configuration.managementPort == 2195)
        #expect(configuration.controlPort == 2198)
        #expect(configuration.environment == .production && configuration.bundleIDs == ["a.b", "c.d"] && configuration.channelQuota == 5)
        #expect(configuration.relaxed && configuration.faults.tooManyRequests == 0.1 && configuration.faults.serviceUnavailable == 0.05)
        #expect(configuration.faults.goAwayAfterStreams == 100 && configuration.latency == .milliseconds(5) ... .milliseconds(20))
        #expect(configuration.seed == 42 && configuration.invalidDeviceTokens == ["abcd"] && configuration.streamLimit == 500)
        #expect(try SimulatorConfiguration.parse(arguments: ["--help"]) == nil)
        #expect(SimulatorConfiguration.helpText.contains("--fail-429"))
        for bad in [
            ["--quota"], ["--fail-500", "2"], ["--bogus"], ["--cert", "x.pem"], ["--p8", "k.p8"], ["--latency-ms", "9-3"],
            ["--fail-429", "0.6", "--fail-503", "0.6"], ["--environment", "staging"], ["--push-port", "2197", "--management-port", "2197"],
            ["--management-port", "2195", "--control-port", "2195"], ["--control-port", "70000"],
            ["--goaway-after", "0"], ["--seed", "-1"], ["--host"],
        ] {
            #expect(throws: SimulatorConfigurationError.self, "\(bad)") { try SimulatorConfiguration.parse(arguments: bad) }
        }
    }
}

/// Throughput of the simulator under h2load; runs only with MARQUEE_SIMULATOR_BENCH=1 and prints h2load's summary.
@Suite struct SimulatorLoadTests {
    @Test(.enabled(if: ProcessInfo.processInfo.environment["MARQUEE_SIMULATOR_BENCH"] == "1"))
    func h2loadBroadcasts() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await APNsSimulator.start(
            configuration: SimulatorHostTests.configuration(folder) {
                $0.relaxed = true
                $0.recordLimit = 10_000
                $0.loopCount = 2
            })
        let token = try SimulatorHostTests.token(simulator.files)
        let channel = try await SimulatorHostTests.curl(
            simulator, "POST", simulator.managementURL + "/1/apps/\(SimulatorHostTests.bundleID)/channels",
            body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#, token: token
        ).headers["apns-channel-id"]
        let payloadFile = folder + "/payload.json"
        let payload = #"{"aps":{"timestamp":1800000000,"event":"update","content-state":{"home":2,"away":1,"clock":"63:12","period":"2H"}}}"#
        try payload.write(toFile: payloadFile, atomically: true, encoding: .utf8)
        let requests = ProcessInfo.processInfo.environment["MARQUEE_SIMULATOR_BENCH_REQUESTS"] ?? "100000"
        let output = try await SimulatorHostTests.run(
            "h2load",
            [
                "-n", requests, "-c", "4", "-m", "100", "-t", "1", "-d", payloadFile,
                "-H", "authorization: \(token.authorization)", "-H", "apns-channel-id: \(try #require(channel))",
                "-H", "apns-push-type: liveactivity", "-H", "apns-expiration: 0", "-H", "apns-priority: 5",
                simulator.pushURL + "/4/broadcasts/apps/\(SimulatorHostTests.bundleID)",
            ])
        await simulator.shutdown()
        print(
            output.components(separatedBy: "\n").filter { $0.hasPrefix("finished") || $0.hasPrefix("requests:") || $0.hasPrefix("status codes:") }
                .joined(separator: "\n"))
        #expect(simulator.engine.statusCounts[200] == Int(requests))
    }
}
