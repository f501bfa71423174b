// NetworkBench: load drivers for Scripts/bench.d/h2. Each subcommand prints one line of key=value
// figures for the script to compare with its reference tool (h2load for the client).
//   NetworkBench client --url https://127.0.0.1:8443/path [--connections 4] [--concurrency 400]
//                       [--seconds 30] [--body-size 300] [--loops CORES] (--ca-file FILE | --insecure)
import BenchSupport
import Foundation
import Network
import Synchronization

/// `client`: POSTs of a fixed body to one URL over a pool, as many in flight as `--concurrency`.
func runClient(_ flags: Flags) async throws {
    guard let text = flags.value("url"), let url = URL(string: text), url.scheme == "https", let host = url.host else {
        throw BenchError("--url https://host:port/path is required")
    }
    let connections = try flags.int("connections", default: 4)
    let concurrency = try flags.int("concurrency", default: 400)
    let seconds = try flags.int("seconds", default: 30)
    let bodySize = try flags.int("body-size", default: 300)
    let loops = try flags.int("loops", default: ProcessInfo.processInfo.activeProcessorCount)
    let verification: TLSClientConfiguration.Verification = flags.isSet("insecure") ? .insecureNoVerification : .full
    guard flags.isSet("insecure") || flags.value("ca-file") != nil else { throw BenchError("give --ca-file FILE or --insecure") }

    let tls = try TLSClientContext(configuration: TLSClientConfiguration(extraCAFile: flags.value("ca-file"), verification: verification))
    let group = EventLoopGroup(loopCount: loops, name: "bench")
    let pool = HTTP2ConnectionPool(
        group: group, tls: tls,
        configuration: .init(
            connectionsPerKey: connections,
            maxQueuedPerConnection: concurrency))
    let origin = HTTP2Origin(host: host, port: url.port ?? 443)
    let request = HTTPRequest(
        method: "POST", path: url.path.isEmpty ? "/" : url.path,
        headers: ["content-type": "application/json"],
        body: [UInt8](repeating: UInt8(ascii: "x"), count: bodySize))

    let sampler = RSSSampler()
    sampler.start()
    let started = ContinuousClock.now
    // One flag instead of a clock read per request: the driver's own cost stays out of the figures.
    let running = RunningFlag()
    let stopper = Task {
        try? await Task.sleep(until: started + .seconds(seconds))
        running.value.store(false, ordering: .relaxed)
    }
    let (succeeded, failed, lastError) = await withTaskGroup(of: (Int, Int, NetworkError?).self) { tasks in
        for _ in 0..<concurrency {
            tasks.addTask {
                var succeeded = 0
                var failed = 0
                var lastError: NetworkError?
                while running.value.load(ordering: .relaxed) {
                    do throws(NetworkError) {
                        let response = try await pool.send(request, to: origin, key: "bench", timeout: .seconds(10))
                        if response.status == 200 { succeeded += 1 } else { failed += 1 }
                    } catch {
                        failed += 1
                        lastError = error
                    }
                }
                return (succeeded, failed, lastError)
            }
        }
        var total = (0, 0, NetworkError?.none)
        for await (succeeded, failed, error) in tasks {
            total.0 += succeeded
            total.1 += failed
            total.2 = total.2 ?? error
        }
        return total
    }
    let elapsed = ContinuousClock.now - started
    await stopper.value
    let samples = sampler.stop()
    await pool.shutdown()
    group.shutdown()

    let (elapsedSeconds, rss) = loadFigures(elapsed: elapsed, rssSamples: samples)
    var line = "requests=\(succeeded) failed=\(failed) seconds=\(String(format: "%.2f", elapsedSeconds))"
    line += " rate=\(String(format: "%.0f", Double(succeeded) / elapsedSeconds))"
    line += " " + rss
    if let lastError { line += " last_error=\"\(lastError)\"" }
    print(line)
}

let arguments = CommandLine.arguments
do {
    switch arguments.dropFirst().first {
    case "client":
        try await runClient(Flags(arguments.dropFirst(2), switches: ["insecure"]))
    default:
        throw BenchError(
            "usage: NetworkBench client --url URL [--connections N] [--concurrency N] [--seconds N] "
                + "[--body-size N] [--loops N] (--ca-file FILE | --insecure)")
    }
} catch {
    FileHandle.standardError.write(Data("NetworkBench: \(error)\n".utf8))
    exit(1)
}
