import Foundation
import MarqueeCore
import MarqueeTestSupport
import Network
import Synchronization
import Testing

@testable import APNsSimulator

/// The device model end to end: requests go to the simulator's APNs ports over HTTP/2 and TLS (curl, as a
/// provider would send them), and what the devices show is read from the simulator. No Marquee in between.
@Suite struct SimulatorDeviceHostTests {
    static let bundleID = SimulatorHostTests.bundleID
    static let topic = bundleID + ".push-type.liveactivity"

    /// A token of the given byte (`"a1"` → a1a1...), 32 bytes.
    static func token(_ byte: String) -> String { String(repeating: byte, count: 32) }

    static func devices(_ list: [(token: String, version: String, installation: String?)]) -> String {
        let items = list.map { device in
            var object: JSONObject = ["pushToStartToken": .string(device.token), "osVersion": .string(device.version)]
            if let installation = device.installation { object["installationId"] = .string(installation) }
            return JSONValue.object(object)
        }
        return JSONValue.object(["devices": .array(items)]).jsonString
    }

    /// Starts a simulator with the given devices (written to a devices file in its state folder).
    static func start(
        _ folder: String, devices: [(token: String, version: String, installation: String?)], clock: any WallClock = SystemWallClock(),
        _ configure: (inout SimulatorConfiguration) -> Void = { _ in }
    ) async throws -> APNsSimulator {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let file = folder + "/devices.json"
        try Self.devices(devices).write(toFile: file, atomically: true, encoding: .utf8)
        return try await APNsSimulator.start(
            configuration: SimulatorHostTests.configuration(folder) {
                $0.devicesFile = file
                $0.eventKeys = ["MatchAttributes": "matchId"]
                configure(&$0)
            }, clock: clock)
    }

    static func startPayload(timestamp: Int, match: String, channel: String? = nil, inputToken: Bool = false, alert: Bool = true) -> String {
        var aps: JSONObject = [
            "timestamp": .int(Int64(timestamp)), "event": "start", "content-state": ["home": 0, "away": 0],
            "attributes-type": "MatchAttributes", "attributes": ["matchId": .string(match), "homeTeam": "Lyon", "awayTeam": "Porto"],
        ]
        if alert { aps["alert"] = ["title": "Kick-off", "body": "Lyon v Porto", "sound": "default"] }
        if let channel { aps["input-push-channel"] = .string(channel) }
        if inputToken { aps["input-push-token"] = 1 }
        return JSONValue.object(["aps": .object(aps)]).jsonString
    }

    static func updatePayload(timestamp: Int, home: Int, event: String = "update") -> String {
        #"{"aps":{"timestamp":\#(timestamp),"event":"\#(event)","content-state":{"home":\#(home),"away":0}}}"#
    }

    /// A device push (start, update or end) over HTTP/2.
    static func push(_ simulator: APNsSimulator, to token: String, _ payload: String) async throws -> SimulatorHostTests.CurlAnswer {
        try await SimulatorHostTests.curl(
            simulator, "POST", simulator.pushURL + "/3/device/\(token)",
            headers: ["apns-topic": topic, "apns-push-type": "liveactivity", "apns-priority": "10"], body: payload,
            token: try SimulatorHostTests.token(simulator.files))
    }

    static func broadcast(_ simulator: APNsSimulator, on channel: String, _ payload: String) async throws -> SimulatorHostTests.CurlAnswer {
        try await SimulatorHostTests.curl(
            simulator, "POST", simulator.pushURL + "/4/broadcasts/apps/\(bundleID)",
            headers: ["apns-channel-id": channel, "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "10"],
            body: payload, token: try SimulatorHostTests.token(simulator.files))
    }

    static func createChannel(_ simulator: APNsSimulator) async throws -> String {
        let created = try await SimulatorHostTests.curl(
            simulator, "POST", simulator.managementURL + "/1/apps/\(bundleID)/channels",
            body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#, token: try SimulatorHostTests.token(simulator.files))
        return try #require(created.headers["apns-channel-id"])
    }

    /// A control-port request (HTTP/1.1).
    static func control(_ simulator: APNsSimulator, _ method: String, _ path: String, body: String? = nil) async throws -> (
        status: Int, json: JSONValue?
    ) {
        var arguments = ["--silent", "--show-error", "-X", method, "-o", "-", "-w", "\n%{http_code}"]
        if body != nil { arguments += ["-H", "content-type: application/json", "--data-binary", "@-"] }
        let output = try await SimulatorHostTests.run("curl", arguments + [simulator.controlURL + path], input: Array((body ?? "").utf8))
        let lines = output.components(separatedBy: "\n")
        return (Int(lines.last ?? "") ?? 0, try? JSONValue(parsing: Array(lines.dropLast().joined(separator: "\n").utf8)))
    }

    static func device(_ simulator: APNsSimulator, _ id: String) throws -> SimulatedDevice {
        try #require(simulator.engine.devices.device(id, at: simulator.engine.clock.now))
    }

    @Test func deviceFlagsParseIntoAConfiguration() throws {
        let configuration = try #require(
            try SimulatorConfiguration.parse(arguments: [
                "--devices", "devices.json", "--device-starts-per-hour", "3", "--activity-max-duration", "90s", "--event-key",
                "MatchAttributes=matchId",
                "--app-backend", "http://127.0.0.1:8080", "--api-key", "mq_1_x", "--app-id", "7", "--drop-answers", "0.25", "--device-report",
                "r.json",
            ]))
        #expect(configuration.devicesFile == "devices.json" && configuration.deviceRules.startsPerHour == 3)
        #expect(configuration.deviceRules.activityMaxDuration == 90 && configuration.eventKeys == ["MatchAttributes": "matchId"])
        #expect(configuration.appBackend == SimulatorAppBackend(url: "http://127.0.0.1:8080", apiKey: "mq_1_x", appID: "7"))
        #expect(configuration.faults.dropAnswers == 0.25 && configuration.deviceReportFile == "r.json")
        let defaults = try #require(try SimulatorConfiguration.parse(arguments: []))
        #expect(defaults.deviceRules.startsPerHour == 8 && defaults.deviceRules.activityMaxDuration == 8 * 3_600 && defaults.appBackend == nil)
        #expect(try SimulatorConfiguration.parse(arguments: ["--activity-max-duration", "8h"])?.deviceRules.activityMaxDuration == 8 * 3_600)
        #expect(try SimulatorConfiguration.parse(arguments: ["--activity-max-duration", "30m"])?.deviceRules.activityMaxDuration == 1_800)
        #expect(SimulatorConfiguration.helpText.contains("--device-starts-per-hour") && SimulatorConfiguration.helpText.contains("--drop-answers"))
        for bad in [
            ["--app-backend", "http://x"], ["--api-key", "k"], ["--app-id", "7"], ["--app-backend", "ftp://x", "--api-key", "k"],
            ["--activity-max-duration", "soon"], ["--activity-max-duration", "0s"], ["--event-key", "Type"], ["--drop-answers", "2"],
            ["--device-starts-per-hour", "-1"], ["--app-id", "seven", "--app-backend", "http://x", "--api-key", "k"],
        ] {
            #expect(throws: SimulatorConfigurationError.self, "\(bad)") { try SimulatorConfiguration.parse(arguments: bad) }
        }
    }

    @Test func startsFollowEachDevicesOSVersion() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let list: [(token: String, version: String, installation: String?)] = [
            (Self.token("16"), "16.4", "old"), (Self.token("17"), "17.1", "older17"), (Self.token("72"), "17.2", "plain"),
            (Self.token("75"), "17.5", "channel17"), (Self.token("18"), "18.0", "channel18"), (Self.token("19"), "18.2", "token18"),
            (Self.token("20"), "18.1", "noalert"),
        ]
        let simulator = try await Self.start(folder, devices: list)
        let channel = try await Self.createChannel(simulator)
        let sends: [(String, String)] = [
            (Self.token("16"), Self.startPayload(timestamp: 10, match: "m1")),
            (Self.token("17"), Self.startPayload(timestamp: 10, match: "m1")),
            (Self.token("72"), Self.startPayload(timestamp: 10, match: "m1")),
            (Self.token("75"), Self.startPayload(timestamp: 10, match: "m1", channel: channel)),
            (Self.token("18"), Self.startPayload(timestamp: 10, match: "m1", channel: channel)),
            (Self.token("19"), Self.startPayload(timestamp: 10, match: "m1", inputToken: true)),
            (Self.token("20"), Self.startPayload(timestamp: 10, match: "m1", channel: channel, alert: false)),
        ]
        for (token, payload) in sends {
            // APNs accepts every one of them: what differs is what the device does.
            let answer = try await Self.push(simulator, to: token, payload)
            #expect(answer.status == 200, "\(token.prefix(2))")
        }
        #expect(try Self.device(simulator, "old").activities.isEmpty)
        #expect(try Self.device(simulator, "old").ignoredStarts == [.belowPushToStart: 1])
        #expect(try Self.device(simulator, "older17").activities.isEmpty)
        let plain = try Self.device(simulator, "plain")
        #expect(plain.activities.count == 1 && plain.activities.first?.updateToken != nil)
        #expect(try Self.device(simulator, "channel17").ignoredStarts == [.channelBelowiOS18: 1])
        let joined = try Self.device(simulator, "channel18")
        #expect(joined.activities.map(\.updatePath) == [.channel(channel)] && joined.activities.first?.state == .active)
        #expect(try Self.device(simulator, "token18").activities.first?.updateToken != nil)
        #expect(try Self.device(simulator, "noalert").ignoredStarts == [.noAlert: 1])

        // A push to the 17.2 device's minted token updates it, then ends it.
        let minted = try #require(plain.activities.first?.updateToken)
        #expect(try await Self.push(simulator, to: minted, Self.updatePayload(timestamp: 11, home: 1)).status == 200)
        #expect(try await Self.push(simulator, to: minted, Self.updatePayload(timestamp: 12, home: 2, event: "end")).status == 200)
        let ended = try #require(try Self.device(simulator, "plain").activities.first)
        #expect(ended.state == .ended && ended.contentState == ["home": 2, "away": 0] && ended.registration == .skipped("no app backend"))

        // The control port reports one device, and all of them.
        let one = try await Self.control(simulator, "GET", "/devices/channel18")
        #expect(one.status == 200 && one.json?["activities"]?.arrayValue?.first?["listensOn"] == ["channel": .string(channel)])
        #expect(one.json?["events"]?.arrayValue?.first?["event"] == "m1")
        let all = try await Self.control(simulator, "GET", "/devices")
        #expect(all.json?["devices"] == 7 && all.json?["activities"] == 3 && all.json?["duplicates"] == 0, "\(String(describing: all.json))")
        #expect(try await Self.control(simulator, "GET", "/devices/nobody").status == 404)
        // Devices added on the control port take starts at once.
        let added = try await Self.control(
            simulator, "POST", "/devices", body: #"{"pushToStartToken":"\#(Self.token("21"))","osVersion":"18.3","installationId":"late"}"#)
        #expect(added.status == 200 && added.json == ["added": 1, "updated": 0])
        #expect(try await Self.control(simulator, "POST", "/devices", body: #"{"pushToStartToken":"xyz","osVersion":"18"}"#).status == 400)
        #expect(try await Self.push(simulator, to: Self.token("21"), Self.startPayload(timestamp: 10, match: "m1", channel: channel)).status == 200)
        #expect(try Self.device(simulator, "late").activities.count == 1)
        await simulator.shutdown()
    }

    @Test func broadcastsUpdateSubscribedActivitiesIgnoreAnEqualTimestampAndEnd() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await Self.start(folder, devices: [(Self.token("a1"), "18.0", "one"), (Self.token("a2"), "18.4", "two")]) {
            $0.deviceReportFile = folder + "/report.json"
        }
        let channel = try await Self.createChannel(simulator)
        for token in [Self.token("a1"), Self.token("a2")] {
            #expect(try await Self.push(simulator, to: token, Self.startPayload(timestamp: 100, match: "m7", channel: channel)).status == 200)
        }
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 101, home: 1)).status == 200)
        // The same timestamp again, with another score: APNs accepts it, the devices keep what they show.
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 101, home: 5)).status == 200)
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 102, home: 2, event: "end")).status == 200)
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 103, home: 3)).status == 200)
        for id in ["one", "two"] {
            let activity = try #require(try Self.device(simulator, id).activities.first)
            #expect(activity.contentState == ["home": 2, "away": 0] && activity.timestamp == 102, "\(id)")
            #expect(activity.state == .ended && activity.endCause == .push)
            #expect(activity.updatesShown == 2 && activity.notNewerIgnored == 1 && activity.receivedAfterEnd == 1)
        }
        let report = try await Self.control(simulator, "GET", "/devices")
        #expect(report.json?["receivedAfterEnd"] == 2 && report.json?["activitiesByState"] == ["ended": 2])
        let event = report.json?["perDevice"]?.arrayValue?.first?["events"]?.arrayValue?.first
        #expect(event?["event"] == "m7" && event?["newestState"] == ["home": 2, "away": 0] && event?["state"] == "ended")
        #expect(event?["receivedAfterEnd"] == 1)
        // The exit report is written at shutdown.
        await simulator.shutdown()
        let written = try JSONValue(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/report.json"))))
        #expect(written["devices"] == 2 && written["receivedAfterEnd"] == 2)
    }

    @Test func startsPastTheBudgetAreAnsweredAndIgnoredAndCounted() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await Self.start(folder, devices: [(Self.token("b1"), "17.4", "busy")]) { $0.deviceRules.startsPerHour = 2 }
        for match in ["m1", "m2", "m3", "m4"] {
            #expect(try await Self.push(simulator, to: Self.token("b1"), Self.startPayload(timestamp: 10, match: match)).status == 200)
        }
        let device = try Self.device(simulator, "busy")
        #expect(device.activities.map { $0.attributes["matchId"] } == ["m1", "m2"])
        #expect(device.ignoredStarts == [.overBudget: 2])
        let report = try await Self.control(simulator, "GET", "/devices")
        #expect(report.json?["startsOverBudget"] == 2)
        #expect(report.json?["perDevice"]?.arrayValue?.first?["startsIgnored"] == ["overBudget": 2])
        await simulator.shutdown()
    }

    @Test func aDroppedAnswerResetsTheStreamAfterTheDeviceActed() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let simulator = try await Self.start(folder, devices: [(Self.token("d1"), "17.6", "dropped")]) { $0.faults.dropAnswers = 1 }
        let answer = try await Self.push(simulator, to: Self.token("d1"), Self.startPayload(timestamp: 10, match: "m1"))
        // No HTTP answer reaches the client: the stream was reset.
        #expect(answer.status == 0, "\(answer)")
        #expect(try Self.device(simulator, "dropped").activities.count == 1)
        #expect(simulator.engine.droppedAnswers == 1 && simulator.engine.statusCounts[200] == nil)
        #expect(simulator.engine.devicePushes.count == 1)
        // A rejection is answered as usual: nothing was done, nothing to drop.
        let rejected = try await SimulatorHostTests.curl(
            simulator, "POST", simulator.pushURL + "/3/device/\(Self.token("d1"))", headers: ["apns-push-type": "liveactivity"],
            body: Self.startPayload(timestamp: 11, match: "m1"), token: try SimulatorHostTests.token(simulator.files))
        #expect(rejected.status == 400 && rejected.json?["reason"] == "MissingTopic")
        let status = try await Self.control(simulator, "GET", "/status")
        #expect(status.json?["droppedAnswers"] == 1)
        await simulator.shutdown()
    }

    @Test func theSystemEndsAnActivityAfterTheMaximumDuration() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let clock = ManualWallClock(Date())
        let simulator = try await Self.start(folder, devices: [(Self.token("e1"), "18.0", "long")], clock: clock) {
            $0.deviceRules.activityMaxDuration = 120
        }
        let channel = try await Self.createChannel(simulator)
        #expect(try await Self.push(simulator, to: Self.token("e1"), Self.startPayload(timestamp: 10, match: "m1", channel: channel)).status == 200)
        let started = clock.now
        clock.advance(by: 60)
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 11, home: 1)).status == 200)
        #expect(try Self.device(simulator, "long").activities.first?.state == .active)
        clock.advance(by: 61)
        #expect(try await Self.broadcast(simulator, on: channel, Self.updatePayload(timestamp: 12, home: 2)).status == 200)
        let activity = try #require(try Self.device(simulator, "long").activities.first)
        #expect(activity.state == .ended && activity.endCause == .maximumDuration)
        #expect(activity.endedAt == started.addingTimeInterval(120))
        #expect(activity.contentState == ["home": 1, "away": 0] && activity.receivedAfterEnd == 1)
        await simulator.shutdown()
    }

    @Test func mintedTokensAreRegisteredWithTheAppBackend() async throws {
        let folder = SimulatorHostTests.stateFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let group = EventLoopGroup(loopCount: 1, name: "stub-backend")
        defer { group.shutdown() }
        let backend = StubAppBackend()
        let server = try HTTP1Server(configuration: HTTP1ServerConfiguration(), group: group, handler: backend)
        let simulator = try await Self.start(folder, devices: [(Self.token("c1"), "17.3", "inst-17"), (Self.token("c2"), "18.1", "inst-18")]) {
            $0.eventKeys = [:]  // read from the backend's attribute type
            $0.appBackend = SimulatorAppBackend(url: "http://127.0.0.1:\(server.port)", apiKey: "mq_1_secret", appID: "7")
        }
        #expect(try await Self.push(simulator, to: Self.token("c1"), Self.startPayload(timestamp: 10, match: "epl-42")).status == 200)
        #expect(
            try await Self.push(simulator, to: Self.token("c2"), Self.startPayload(timestamp: 10, match: "epl-43", inputToken: true)).status == 200)
        // The registrations run off the request path; wait until the devices have the backend's answers.
        for id in ["inst-17", "inst-18"] {
            _ = try await eventually(within: .seconds(180)) { try Self.device(simulator, id).activities.first?.registration != .pending }
        }
        let first = try #require(try Self.device(simulator, "inst-17").activities.first)
        let second = try #require(try Self.device(simulator, "inst-18").activities.first)
        #expect(
            first.registration == .registered(status: 201) && second.registration == .registered(status: 201),
            "\(first.registration), \(second.registration)")
        await simulator.shutdown()
        await server.shutdown()

        let puts = backend.requests.filter { $0.method == "PUT" }
        // The event key is read from the attribute type (once per worker at most: both may ask before one learns it).
        #expect(Set(backend.requests.filter { $0.method == "GET" }.map(\.path)) == ["/v1/attribute-types/MatchAttributes?app=7"])
        // The first PUT was answered 503 and tried again (both end registered with 201, so the 503 was retried).
        // Under a loaded machine a PUT whose answer outlives the client's timeout goes once more: at least 3.
        #expect(puts.count >= 3, "\(puts.map(\.path))")
        #expect(Set(puts.map(\.path)).count == 2, "\(puts.map(\.path))")
        for request in backend.requests { #expect(request.authorization == "Bearer mq_1_secret") }
        let byInstallation = Dictionary(puts.map { ($0.path, $0) }) { _, last in last }
        let expected: [(installation: String, activity: SimulatedActivity, match: String)] = [
            ("inst-17", first, "epl-42"), ("inst-18", second, "epl-43"),
        ]
        for (installation, activity, match) in expected {
            let request = try #require(byInstallation["/v1/installations/\(installation)/activities/\(activity.id)?app=7"], "\(installation)")
            #expect(
                request.body == [
                    "externalId": .string(match), "attributesType": "MatchAttributes", "pushType": "token",
                    "pushToken": .string(activity.updateToken!),
                ])
        }
    }
}

/// Marquee's two routes as an app backend meets them: the attribute type (with its event key) and the activity PUT,
/// which answers 503 once, then 201.
final class StubAppBackend: HTTP1RequestHandler {
    struct Received: Sendable {
        var method: String
        var path: String
        var authorization: String?
        var body: JSONValue?
    }

    private let received = Mutex<[Received]>([])
    private let refusedOnce = Atomic<Bool>(false)

    var requests: [Received] { received.withLock { $0 } }

    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse {
        received.withLock {
            $0.append(
                Received(
                    method: request.method, path: request.path, authorization: request.headers["authorization"],
                    body: try? JSONValue(parsing: request.body)))
        }
        if request.method == "GET", request.path.hasPrefix("/v1/attribute-types/MatchAttributes") {
            let body =
                #"{"app":7,"name":"MatchAttributes","attributes":{"matchId":{"type":"string","eventKey":true},"homeTeam":"string","awayTeam":"string"},"contentState":{"home":"int","away":"int"}}"#
            return HTTPResponse(status: 200, headers: ["content-type": "application/json"], body: Array(body.utf8))
        }
        if request.method == "PUT", request.path.hasPrefix("/v1/installations/") {
            if !refusedOnce.exchange(true, ordering: .relaxed) { return HTTPResponse(status: 503) }
            return HTTPResponse(status: 201, headers: ["content-type": "application/json"], body: Array("{}".utf8))
        }
        return HTTPResponse(status: 404)
    }
}
