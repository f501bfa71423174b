import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// Faults of a running serve (issue 16): a kill -9 must not freeze the channels it was sending, and an
/// operator's request must not wait on an APNs that cannot be reached beyond its bound.
// One test at a time: each starts serve processes and a simulator, and the whole suite runs in parallel.
@Suite(.serialized, .enabled(if: MarqueeProcess.available))
struct FaultTests {
    /// The claim lease is 120 s; the heartbeat's TTL 5 s. A serve started after the kill of the one that held
    /// every event's claim (APNs takes 20 s to answer the broadcasts, so the claims are held when it dies) sends
    /// each channel's newest state long before the lease would have let it.
    @Test func aServeStartedAfterAKillSendsTheChannelsItsPredecessorHeld() async throws {
        try await BroadcastHarness.run { h in
            var channels: [Int: String] = [:]
            for index in 0..<4 {
                let event = try await h.createEvent("held-\(index)", startsAt: Date().addingTimeInterval(-60))
                channels[event] = try await h.openChannel(of: event)
            }
            // Slow answers hold the claims for longer than a loaded machine takes to claim all four (below the
            // client's 30 s timeout); the restarted serve gets prompt ones.
            h.simulator.engine.latency = .seconds(20) ... .seconds(20)
            // Posted together, so the four claims are taken close together: posted one after another beside CPU
            // hogs, the first claim's 20 s ran out before the fourth was taken and the kill came.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for event in channels.keys {
                    group.addTask {
                        let posted = try await h.update(event, MatchState(homeScore: 1, period: .firstHalf, minute: 10))
                        #expect(posted.status == 202, "\(posted.text)")
                    }
                }
                try await group.waitForAll()
            }
            func claimsHeld() async throws -> Int {
                try await h.count("SELECT count(*)::bigint AS n FROM outbox WHERE claimed_by IS NOT NULL")
            }
            try await h.waitUntil("the first serve holds every event's claim") { try await claimsHeld() == channels.count }
            let holder = try await h.pool.query("SELECT claimed_by FROM outbox WHERE claimed_by IS NOT NULL LIMIT 1")[0]
                .decode(String.self, column: "claimed_by")

            await h.kill(instance: 0)
            // What the killed serve held when it died: on a slow machine a claim's answer can come and be recorded
            // between the wait above and the kill, and a claim recorded is not there to take over.
            let heldAtKill = try await h.count("SELECT count(*)::bigint AS n FROM outbox WHERE claimed_by = \(holder)")
            #expect(heldAtKill > 0, "the killed serve held no claim")
            try await h.restart()
            h.simulator.engine.latency = .zero ... .zero
            let restarted = Date()
            let newest = MatchState(homeScore: 2, period: .firstHalf, minute: 12)
            for event in channels.keys {
                let posted = try await h.update(event, newest)
                #expect(posted.status == 202, "\(posted.text)")
            }
            try await h.waitUntil("every channel's newest state reaches APNs", timeout: 60) {
                try channels.values.allSatisfy { channel in try h.pushes(on: channel).contains { $0.push.aps.contentState == newest } }
            }
            let waited = Date().timeIntervalSince(restarted)
            #expect(waited < 60, "the held channels waited \(waited) s")
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM outbox WHERE claimed_by = \(holder)") == 0)
            #expect(try await h.metric("marquee_claims_taken_over_total") >= Double(heldAtKill))
            for event in channels.keys {
                let counts = try await h.settledDispositions(of: event)
                #expect(counts["pending", default: 0] == 0, "event \(event): \(counts)")
            }
        }
    }

    /// With two instances, the claims of the one killed (and not restarted) are taken by the other within the
    /// heartbeat's TTL, which then sends those channels' newest states.
    @Test func anotherInstanceTakesTheClaimsOfOneKilled() async throws {
        try await BroadcastHarness.run(instances: 2) { h in
            var channels: [Int: String] = [:]
            for index in 0..<6 {
                let event = try await h.createEvent("shared-\(index)", startsAt: Date().addingTimeInterval(-60))
                channels[event] = try await h.openChannel(of: event)
            }
            h.simulator.engine.latency = .seconds(20) ... .seconds(20)  // the first updates' claims stay held
            // Which process is which instance: serve logs its name as the heartbeat starts.
            let killedName = try #require(
                h.serves[0].stderr.split(separator: "\n").compactMap { try? JSONValue(parsing: String($0)) }
                    .first { $0["msg"] == "heartbeat started" }?["instance"]?.stringValue)
            // Posted to the first instance, whose dispatcher hears of them first and claims them.
            for event in channels.keys {
                #expect(try await h.update(event, MatchState(homeScore: 1, period: .firstHalf, minute: 20), instance: 0).status == 202)
            }
            try await h.waitUntil("the first instance holds claims") {
                try await h.count("SELECT count(*)::bigint AS n FROM outbox WHERE claimed_by = \(killedName)") > 0
            }
            await h.kill(instance: 0)  // the survivor is number 0 now
            h.simulator.engine.latency = .zero ... .zero
            let newest = MatchState(homeScore: 2, period: .firstHalf, minute: 25)
            for event in channels.keys { #expect(try await h.update(event, newest).status == 202) }
            try await h.waitUntil("every channel's newest state reaches APNs", timeout: 60) {
                try channels.values.allSatisfy { channel in try h.pushes(on: channel).contains { $0.push.aps.contentState == newest } }
            }
            #expect(try await h.count("SELECT count(*)::bigint AS n FROM outbox WHERE claimed_by = \(killedName)") == 0)
            #expect(try await h.metric("marquee_claims_taken_over_total") >= 1)
        }
    }

    /// A host that takes the connection and never answers: each APNs attempt would wait its 30 s timeout,
    /// five times. The operator's reconcile answers 504 `apns_timeout` within `--admin-timeout` instead.
    @Test func aReconcileAgainstAnAPNsThatNeverAnswersEndsAt504WithinItsBound() async throws {
        let silent = try SilentListener()
        let url = "https://127.0.0.1:\(silent.port)"
        try await BroadcastHarness.run(serveArguments: [
            "--apns-manage-url", url, "--apns-push-url", url, "--admin-timeout", "2",
            "--grace-period", "3",
        ]) { h in
            for body: JSONValue in [["dryRun": false, "deleteUnknown": true], ["dryRun": true]] {
                let started = Date()
                let answer = try await h.api("POST", "/v1/channels/reconcile", body)
                let took = Date().timeIntervalSince(started)
                #expect(answer.status == 504, "\(answer.text)")
                #expect(answer.json["error"]?["code"] == "apns_timeout", "\(answer.text)")
                #expect(took < 20, "answered after \(took) s")
            }
            // The CLI over the route gets the same answer in the same bound: exit 75 (temporary failure), the error as JSON.
            let started = Date()
            let cli = try await MarqueeProcess.run(
                ["channel", "reconcile", "--delete-unknown", "--json", "--url", "http://127.0.0.1:\(h.ports[0])", "--api-key", h.adminKey],
                databaseURL: nil)
            #expect(Date().timeIntervalSince(started) < 20)
            #expect(cli.status == 75, "\(cli.stdout)\(cli.stderr)")
            // serve's log's errors beside the answer, should it not be the timeout.
            let errors = h.serves[0].stderr.split(separator: "\n").filter { $0.contains(#""level":"error""#) }.suffix(5)
            #expect((try? JSONValue(parsing: cli.stdout))?["error"]?["code"] == "apns_timeout", "\(cli.stdout)\n\(errors.joined(separator: "\n"))")
        }
    }
}

/// A TCP port that takes connections (the kernel completes the handshake) and never reads or answers.
final class SilentListener: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LoopbackHTTP.Failure(description: "socket failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && listen(fd, 64) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw LoopbackHTTP.Failure(description: "bind failed: errno \(errno)")
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
