// APNsBench: drivers for Scripts/bench.d/apns. Each subcommand prints key=value lines for the script.
//   APNsBench simulator --state DIR [--relaxed] [--stream-limit N] [--loops N] [--devices FILE]
//       runs the APNs simulator until stdin closes; prints push_port, key_file, key_id, team_id, ca_file first;
//       with --devices, it tracks those simulated devices (and prints devices= and activities= at the end)
//   APNsBench token --key-file FILE --key-id ID --team-id ID
//       prints a provider token (JWT) for h2load's authorization header
//   APNsBench client --push-url URL --ca-file FILE --key-file FILE --key-id ID --team-id ID --bundle ID
//       [--seconds 30] [--connections 4] [--concurrency 400] [--loops 1]
//       push-to-start device pushes of about 300 bytes through APNsClient; prints the rate and RSS maxima
import APNs
import APNsSimulator
import BenchSupport
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

func signingKey(_ flags: Flags) throws -> APNsSigningKey {
    let pem = try String(contentsOfFile: try flags.required("key-file"), encoding: .utf8)
    return try APNsSigningKey(
        keyID: try flags.required("key-id"), teamID: try flags.required("team-id"),
        key: P256.SigningKey(pemRepresentation: pem))
}

/// A push-to-start payload of about 300 bytes.
func pushToStartPayload(_ n: Int) -> [UInt8] {
    let text =
        #"{"aps":{"timestamp":\#(1_800_000_000 + n % 1_000),"event":"start","content-state":{"home":"Lyon","away":"Porto","score":"1-0","minute":"\#(n % 90)"},"#
        + #""attributes-type":"MatchAttributes","attributes":{"matchID":"m-\#(n % 10_000)","league":"Ligue 1"},"#
        + #""alert":{"title":"Kick-off","body":"Lyon v Porto has started","sound":"default"},"input-push-channel":"Y2hhbm5lbA=="}}"#
    return Array(text.utf8)
}

func runSimulator(_ flags: Flags) async throws {
    var configuration = SimulatorConfiguration(stateDirectory: try flags.required("state"))
    configuration.relaxed = flags.isSet("relaxed")
    configuration.streamLimit = UInt32(try flags.int("stream-limit", default: 1_000))
    configuration.loopCount = try flags.int("loops", default: 1)
    configuration.recordLimit = 1_000
    configuration.devicesFile = flags.value("devices")
    let simulator = try await APNsSimulator.start(configuration: configuration)
    let files = simulator.files
    // Written unbuffered: the script waits for this line.
    let ready =
        "push_port=\(simulator.pushPort) management_port=\(simulator.managementPort) key_file=\(files.signingKeyFile) key_id=\(files.keyID) team_id=\(files.teamID) ca_file=\(files.caCertificateFile ?? "")\n"
    FileHandle.standardOutput.write(Data(ready.utf8))
    // Runs until the script closes our standard input.
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            _ = FileHandle.standardInput.readDataToEndOfFile()
            done.resume()
        }
    }
    // The device line first: the script waits for the statuses line, which comes last.
    if configuration.devicesFile != nil {
        let report = simulator.deviceReport
        let ignored = report["startsOverBudget"]?.intValue ?? 0
        FileHandle.standardOutput.write(
            Data(
                "devices=\(report["devices"]?.intValue ?? 0) activities=\(report["activities"]?.intValue ?? 0) over_budget=\(ignored)\n".utf8))
    }
    let statuses = simulator.engine.statusCounts.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
    FileHandle.standardOutput.write(Data("statuses=\(statuses)\n".utf8))
    await simulator.shutdown()
}

func runClient(_ flags: Flags) async throws {
    let push = try APNsEndpoint(url: try flags.required("push-url"))
    let endpoints = APNsEndpoints(push: push, management: push, extraTrustedCAFile: try flags.required("ca-file"))
    let bundle = try flags.required("bundle")
    let seconds = try flags.int("seconds", default: 30)
    let connections = try flags.int("connections", default: 4)
    let concurrency = try flags.int("concurrency", default: 400)
    let client = try APNsClient(
        signingKey: try signingKey(flags), endpoints: endpoints,
        configuration: .init(maxInFlight: concurrency, attemptTimeout: .seconds(10)),
        pool: .init(connectionsPerKey: connections, maxQueuedPerConnection: concurrency), loopCount: try flags.int("loops", default: 1))
    let token = try APNsDeviceToken(hex: String(repeating: "5a", count: 32))
    let requests = try (0..<1_000).map { n in
        try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: pushToStartPayload(n), priority: .immediate)
    }

    let sampler = RSSSampler()
    sampler.start()
    let started = ContinuousClock.now
    let running = RunningFlag()
    let stopper = Task {
        try? await Task.sleep(until: started + .seconds(seconds))
        running.value.store(false, ordering: .relaxed)
    }
    let (accepted, failed, retried, lastFailure) = await withTaskGroup(of: (Int, Int, Int, String?).self) { tasks in
        for worker in 0..<concurrency {
            tasks.addTask {
                var accepted = 0
                var failed = 0
                var retried = 0
                var lastFailure: String?
                var n = worker
                while running.value.load(ordering: .relaxed) {
                    do {
                        let outcome = try await client.send(requests[n % requests.count])
                        if outcome.acceptance != nil {
                            accepted += 1
                        } else {
                            failed += 1
                            lastFailure = "\(outcome.result.failure.map { "\($0)" } ?? "")"
                        }
                        retried += outcome.attempts.count - 1
                    } catch {
                        failed += 1
                        lastFailure = "\(error)"
                    }
                    n += concurrency
                }
                return (accepted, failed, retried, lastFailure)
            }
        }
        var total = (0, 0, 0, String?.none)
        for await (accepted, failed, retried, failure) in tasks {
            total.0 += accepted
            total.1 += failed
            total.2 += retried
            total.3 = total.3 ?? failure
        }
        return total
    }
    let elapsed = ContinuousClock.now - started
    await stopper.value
    let samples = sampler.stop()
    await client.shutdown()

    let (elapsedSeconds, rss) = loadFigures(elapsed: elapsed, rssSamples: samples)
    var line = "requests=\(accepted) failed=\(failed) retries=\(retried) seconds=\(String(format: "%.2f", elapsedSeconds))"
    line += " rate=\(String(format: "%.0f", Double(accepted) / elapsedSeconds)) payload_bytes=\(pushToStartPayload(0).count)"
    line += " " + rss
    if let lastFailure { line += " last_failure=\"\(lastFailure)\"" }
    print(line)
}

let arguments = CommandLine.arguments
do {
    switch arguments.dropFirst().first {
    case "simulator":
        try await runSimulator(Flags(arguments.dropFirst(2), switches: ["relaxed"]))
    case "token":
        print(try ProviderToken(signingKey: signingKey(Flags(arguments.dropFirst(2))), issuedAt: Date()).jwt)
    case "payload":
        FileHandle.standardOutput.write(Data(pushToStartPayload(0)))
    case "client":
        try await runClient(Flags(arguments.dropFirst(2)))
    default:
        throw BenchError(
            "usage: APNsBench simulator|token|payload|client ... (see the comment at the top of Benchmarks/Sources/APNsBench/main.swift)")
    }
} catch {
    FileHandle.standardError.write(Data("APNsBench: \(error)\n".utf8))
    exit(1)
}
