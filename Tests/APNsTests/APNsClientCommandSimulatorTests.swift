import Crypto
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeTestSupport
import Testing

@testable import APNs
@testable import APNsSimulator
@testable import MarqueeCommands

/// `marquee apns ...` against the simulator: exit codes in process, and the printed result through the built binary.
@Suite struct APNsClientCommandSimulatorTests {
    static let bundle = "com.example.live"
    static let root = Command("marquee", summary: "test root", subcommands: [apnsCommand])

    /// A simulator and the environment that points `marquee apns` at it with its key.
    struct Setup {
        let simulator: APNsSimulator
        let folder: String
        var environment: [String: String]

        func run(_ arguments: String...) async -> ExitCode {
            await CommandRunner.run(APNsClientCommandSimulatorTests.root, arguments: ["apns"] + arguments, environment: environment)
        }

        func close() async {
            await simulator.shutdown()
            let folder = self.folder
            try? await onOwnThread { try? FileManager.default.removeItem(atPath: folder) }
        }
    }

    static func setup(_ configure: (inout SimulatorConfiguration) -> Void = { _ in }) async throws -> Setup {
        let folder = NSTemporaryDirectory() + "marquee-apns-cli-test-\(UUID().uuidString.prefix(8))"
        var configuration = SimulatorConfiguration(stateDirectory: folder)
        configuration.bundleIDs = [bundle]
        configure(&configuration)
        let simulator = try await APNsSimulator.start(configuration: configuration)
        var environment = simulator.environmentVariables
        environment["MARQUEE_APNS_TEAM_ID"] = simulator.files.teamID
        environment["MARQUEE_APNS_KEY_ID"] = simulator.files.keyID
        environment["MARQUEE_APNS_KEY_FILE"] = simulator.files.signingKeyFile
        environment["MARQUEE_APNS_BUNDLE"] = bundle
        return Setup(simulator: simulator, folder: folder, environment: environment)
    }

    static let payload = #"{"aps":{"timestamp":1800000000,"event":"update","content-state":{"score":"1-0"}}}"#

    @Test func channelsBroadcastAndPushSucceedAndRejectionsExitOne() async throws {
        let s = try await Self.setup { $0.invalidDeviceTokens = [String(repeating: "cd", count: 32)] }
        defer { Task { await s.close() } }
        #expect(await s.run("channels", "create", "--storage-policy", "none") == .success)
        let channel = try #require(s.simulator.engine.channels(bundleID: Self.bundle).first)
        #expect(channel.storagePolicy == .noMessageStored)
        #expect(await s.run("channels", "read", "--channel", channel.id) == .success)
        #expect(await s.run("channels", "list", "--json") == .success)
        #expect(await s.run("broadcast", "--channel", channel.id, "--priority", "5", "--payload", Self.payload) == .success)
        #expect(s.simulator.engine.broadcasts.map(\.priority) == [5])
        #expect(await s.run("push", "--token", String(repeating: "ab", count: 32), "--payload", Self.payload, "--environment", "sandbox") == .success)
        #expect(s.simulator.engine.devicePushes.count == 1)

        // Rejections: exit 1, sent once.
        let before = s.simulator.engine.statusCounts.values.reduce(0, +)
        #expect(await s.run("broadcast", "--channel", channel.id, "--expiration", "1900000000", "--payload", Self.payload) == .failure)
        #expect(await s.run("push", "--token", String(repeating: "cd", count: 32), "--payload", Self.payload) == .failure)
        #expect(await s.run("channels", "read", "--channel", "dW5rbm93bg==") == .failure)
        #expect(s.simulator.engine.statusCounts.values.reduce(0, +) - before == 3)

        #expect(await s.run("channels", "delete", "--channel", channel.id) == .success)
        #expect(s.simulator.engine.channels(bundleID: Self.bundle).isEmpty)
    }

    @Test func aKeyAPNsDoesNotTrustExitsSeventySeven() async throws {
        let s = try await Self.setup()
        defer { Task { await s.close() } }
        let keyFile = s.folder + "/stranger.p8"
        let pem = try P256.SigningKey.generate().pemRepresentation
        try await onOwnThread { try pem.write(toFile: keyFile, atomically: true, encoding: .utf8) }
        #expect(await s.run("channels", "list", "--key-file", keyFile) == .permissionDenied)
        #expect(s.simulator.engine.statusCounts == [403: 1])
    }

    @Test func unreachableUntrustedAndOverloadedHostsHaveTheirOwnCodes() async throws {
        let s = try await Self.setup { $0.faults.serviceUnavailable = 1 }
        defer { Task { await s.close() } }
        // Nobody listens on port 1.
        #expect(await s.run("channels", "list", "--manage-url", "https://127.0.0.1:1") == .unavailable)
        // Without the simulator's CA, its certificate is refused (an empty CA variable counts as absent).
        var untrusted = s
        untrusted.environment[APNsEndpoints.caFileVariable] = ""
        #expect(await untrusted.run("channels", "list") == .unavailable)
        #expect(s.simulator.engine.statusCounts.isEmpty)
        // Every answer 503: retried, then a temporary failure.
        #expect(await s.run("channels", "list") == .temporaryFailure)
        #expect(s.simulator.engine.statusCounts == [503: RetryPolicy().maxAttempts])
    }

    /// The built binary, when `apns` is wired into its root command: prints JSON a script can read.
    @Test(.enabled(if: Self.binaryHasAPNs)) func theBinaryPrintsJSON() async throws {
        let s = try await Self.setup()
        defer { Task { await s.close() } }
        let created = try await Self.runBinary(
            ["apns", "channels", "create", "--storage-policy", "mostRecent", "--json"], environment: s.environment)
        #expect(created.status == 0)
        let json = try JSONValue(parsing: created.output)
        let id = try #require(json["channelId"]?.stringValue)
        #expect(json["status"]?.intValue == 201)
        #expect(json["requestId"]?.stringValue?.count == 36)
        #expect(s.simulator.engine.channel(id: id) != nil)

        let sent = try await Self.runBinary(["apns", "broadcast", "--channel", id, "--payload", Self.payload, "--json"], environment: s.environment)
        let broadcast = try JSONValue(parsing: sent.output)
        #expect(broadcast["uniqueId"]?.stringValue == s.simulator.engine.broadcasts.first?.uniqueID)

        let rejected = try await Self.runBinary(["apns", "channels", "read", "--channel", "dW5rbm93bg==", "--json"], environment: s.environment)
        #expect(rejected.status == 1)
        let error = try JSONValue(parsing: rejected.output)["error"]
        #expect(error?["code"]?.stringValue == "ChannelNotRegistered")
        #expect(error?["status"]?.intValue == 400 && error?["reason"]?.stringValue == "ChannelNotRegistered")
        #expect(error?["requestId"]?.stringValue?.count == 36 && error?["attempts"]?.intValue == 1)
    }

    static let binary = BuiltProducts.path(of: "marquee")

    /// True when the built binary's root help lists `apns` (the command is wired into the root).
    static let binaryHasAPNs: Bool = {
        guard FileManager.default.isExecutableFile(atPath: binary) else { return false }
        guard let help = try? ChildProcess.runBlocking(binary, ["--help"], stderr: .discarded) else { return false }
        return help.status == 0 && help.stdout.contains("Send one request to APNs")
    }()

    static func runBinary(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String) {
        let outcome = try await ChildProcess.run(
            binary, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, stderr: .discarded)
        return (outcome.status, outcome.stdout)
    }
}
