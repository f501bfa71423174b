// Open-loop load driver for Scripts/bench service: drives `marquee serve` (with the APNs simulator behind
// it) at a fixed rate and reports, from the same run, the ingest rate, the 202 latency, the latency from
// ingest accepted to APNs accepted, and serve's RSS.
//
// Open loop: update i is due at start + i / rate whatever the server does; a pool of sender threads
// (blocking sockets, never the cooperative pool) takes the next due update, waits for its time and sends.
// Every latency is measured from a fixed point (the scheduled send time for the 202, the 202 for
// delivery), so a slow server cannot hide its delays by slowing the sender (no coordinated omission).
//
// Delivery: an update counts as delivered at the first APNs-accepted broadcast of its event that carries
// it or a newer state (deliveries.update_id >= its id, status 200); the time is the simulator's log time of
// that answer (matched by apns-request-id), else deliveries.sent_at (serve's record of it, a little later).
// The driver, the simulator and PostgreSQL read the same machine's wall clock.
//
//   ServiceBench --port P --admin-key K --ingest-key K --app ID --database-url URL --serve-pid PID
//                [--events 1000] [--updates 60] [--rate 1000] [--connections 32] [--simulator-log FILE]
//                [--samples FILE]   (one CSV line per update: when due, sent, answered and delivered)
//   ServiceBench tokens ...              Scripts/bench tokens (TokensBench.swift)
//   ServiceBench fanout ...              Scripts/bench fanout (FanOutBench.swift)
//   ServiceBench installations-file ...  an import file for both (FanOutBench.swift)
import BenchSupport
import Foundation
import Postgres
import Synchronization

/// Runs `ServiceBench NAME ...` when NAME is the first argument, and exits: 0 when its targets were met, 1 when
/// not, 2 on an error.
func subcommand(_ name: String, _ body: (Flags) async throws -> Bool) async {
    guard CommandLine.arguments.dropFirst().first == name else { return }
    do {
        exit(try await body(Flags(CommandLine.arguments.dropFirst(2))) ? 0 : 1)
    } catch {
        FileHandle.standardError.write(Data("ServiceBench \(name): \(error)\n".utf8))
        exit(2)
    }
}
await subcommand("fanout") { try await FanOutBench($0).run() }
await subcommand("installations-file") { flags in
    try InstallationsFile.write(flags)
    return true
}
await subcommand("tokens") { try await TokensBench($0).run() }

do {
    let settings = try ServiceBenchSettings(Flags(CommandLine.arguments.dropFirst()))
    let bench = ServiceBench(settings: settings, database: try await PostgresConnection.connect(url: settings.databaseURL))
    var started = wallNanoseconds()
    let events = try await bench.createEvents()
    log("created \(settings.events) events in \(format(seconds: wallNanoseconds() - started))")
    started = wallNanoseconds()
    try await bench.waitForChannels()
    log("\(settings.events) channels open at the simulator after \(format(seconds: wallNanoseconds() - started))")
    log("sending \(settings.events * settings.updatesPerEvent) updates at \(settings.rate)/s over \(settings.connections) connections (open loop)")
    let load = await bench.sendUpdates(to: events)
    log("load from \(iso8601(load.start)) finished in \(format(seconds: load.end - load.start)); waiting for the dispatcher to drain")
    started = wallNanoseconds()
    let pending = try await bench.drain()
    log("drained after \(format(seconds: wallNanoseconds() - started)) (\(pending) pending)")
    let accepted = try await bench.acceptedBroadcasts()
    let met = report(settings, load: load, accepted: accepted)
    if let path = settings.samplesFile {
        try writeSamples(to: path, load: load, accepted: accepted)
        log("samples written to \(path)")
    }
    exit(met ? 0 : 1)
} catch {
    FileHandle.standardError.write(Data("ServiceBench: \(error)\n".utf8))
    exit(2)
}
