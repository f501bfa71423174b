// Scripts/bench fanout: the start fan-out and mirroring, measured through `marquee serve` against the APNs
// simulator (device tracking off), from one run.
//   1. A manual start run to every follower of one event (imported by the script): the start rate, its ratio
//      to h2load sending the same push-to-starts with distinct tokens to the same simulator (the script's
//      `--reference-rate`; target >= 0.4), the time for the audience (target: under 60 s for a million), CPU
//      per start of PostgreSQL, serve and the simulator, and serve's RSS (second and last thirds within 10 %,
//      under 200 MB).
//   2. Mirroring sized from part 1's push rate R: T = 10 s x R / 5 token activities on a second event, an
//      update every 2 s for 60 s, and each update's lag from its 202 until every token has its broadcast's
//      state or a newer one, as p50 and p99 (target: p99 under 2 x T / R + 1 s).
//
//   ServiceBench fanout --port P --admin-key K --ingest-key K --database-url URL --event ID --mirror-event ID
//                       --serve-pid PID --postgres-pid PID --simulator-pid PID --reference-rate R
//                       [--mirror-seconds 60] [--mirror-interval 2] [--token-activities T] [--report-interval 1]
//   ServiceBench installations-file --count N --event EXTERNAL_ID --out FILE
//       writes N installations following EXTERNAL_ID as an import CSV: distinct tokens, an OS mix of 60 % iOS 18
//       and later, 30 % 17.2 to 17.6, 7 % 17.0 and 17.1, 3 % 16.x; and, with --urls FILE, h2load's URI list
//       (one device path per token) for --push-url.
import BenchSupport
import Foundation
import Postgres
import Synchronization

struct FanOutBench {
    let port: UInt16
    let adminKey: String
    let ingestKey: String
    let databaseURL: String
    let event: Int
    let mirrorEvent: Int
    let servePID: Int32
    let postgresPID: Int32
    let simulatorPID: Int32
    let referenceRate: Double
    let mirrorSeconds: Int
    let mirrorInterval: Int
    let tokenActivities: Int?
    let reportInterval: Double

    init(_ flags: Flags) throws {
        port = UInt16(try flags.int("port", default: 8080))
        adminKey = try flags.required("admin-key")
        ingestKey = try flags.required("ingest-key")
        databaseURL = try flags.required("database-url")
        event = try flags.int("event", default: 0)
        mirrorEvent = try flags.int("mirror-event", default: 0)
        servePID = Int32(try flags.int("serve-pid", default: 1))
        postgresPID = Int32(try flags.int("postgres-pid", default: 1))
        simulatorPID = Int32(try flags.int("simulator-pid", default: 1))
        guard let reference = Double(try flags.required("reference-rate")) else { throw BenchError("--reference-rate takes a number") }
        referenceRate = reference
        mirrorSeconds = try flags.int("mirror-seconds", default: 60)
        mirrorInterval = try flags.int("mirror-interval", default: 2)
        tokenActivities = try flags.optionalInt("token-activities")
        guard let interval = Double(flags.value("report-interval") ?? "1"), interval > 0 else {
            throw BenchError("--report-interval takes seconds")
        }
        reportInterval = interval
    }

    private var adminHeaders: [(String, String)] { [("Authorization", "Bearer \(adminKey)"), ("Content-Type", "application/json")] }

    func cpu() -> CPUTimes {
        CPUTimes.read(groups: [
            "postgres": (postgresPID, true), "serve": (servePID, false), "simulator": (simulatorPID, false),
        ])
    }

    /// Runs both parts; returns whether every target was met.
    func run() async throws -> Bool {
        let (rate, startsMet) = try await startRun()
        let mirrorMet = try await mirroring(pushRate: rate)
        return startsMet && mirrorMet
    }

    // MARK: 1. The start run

    func startRun() async throws -> (rate: Double, met: Bool) {
        let connection = BlockingHTTPConnection(port: port)
        let sampler = RSSSampler(processID: servePID)
        let before = cpu()
        let wallStart = wallNanoseconds()
        sampler.start()
        let created = try connection.send(method: "POST", path: "/v1/events/\(event)/starts", headers: adminHeaders, body: Array("{}".utf8))
        guard created.status == 201 || created.status == 202, let run = firstID(in: created.body) else {
            throw BenchError("POST /v1/events/\(event)/starts answered \(created.status): \(String(decoding: created.body, as: UTF8.self))")
        }
        log("start run \(run) created")
        var report: [String: Any] = [:]
        var lastLog = wallNanoseconds()
        while true {
            // Once a second by default, as `marquee event starts --follow` does: the run's report is a count over
            // its starts, and the rate is taken from the run's own times, not from this loop.
            usleep(UInt32(reportInterval * 1_000_000))
            let answer = try connection.send(method: "GET", path: "/v1/events/\(event)/starts", headers: adminHeaders)
            guard answer.status == 200,
                let object = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
                let runs = object["runs"] as? [[String: Any]],
                let found = runs.first(where: { ($0["id"] as? Int) == run })
            else { throw BenchError("GET /v1/events/\(event)/starts answered \(answer.status)") }
            report = found
            let state = found["state"] as? String ?? "?"
            if wallNanoseconds() - lastLog > 5_000_000_000 {
                let counts = found["counts"] as? [String: Any] ?? [:]
                log("run \(run): \(state), accepted \(counts["accepted"] ?? 0) of \(counts["audience"] ?? 0)")
                lastLog = wallNanoseconds()
            }
            if state != "running" || found["firstPassDoneAt"] as? String != nil { break }
        }
        let samples = sampler.stop()
        let after = cpu()
        let wall = Double(wallNanoseconds() - wallStart) / 1e9
        let counts = report["counts"] as? [String: Any] ?? [:]
        let accepted = counts["accepted"] as? Int ?? 0
        let audience = counts["audience"] as? Int ?? 0
        let notStartable = counts["notStartable"] as? Int ?? 0
        // The run's own times from its row: the API shows them in whole seconds, which would step the rate.
        let database = try await PostgresConnection.connect(url: databaseURL)
        guard
            let seconds = try await database.query(
                "SELECT extract(epoch FROM coalesce(first_pass_done_at, finished_at) - started_at)::float8 AS s FROM start_runs WHERE id = \(run)"
            ).first?.decode(Double?.self, column: "s")
        else { throw BenchError("the run has no start or end time: \(report)") }
        let rate = Double(accepted) / max(seconds, 0.001)
        let ratio = rate / max(referenceRate, 1)
        let ticks = Double(CPUTimes.ticksPerSecond)
        func perStart(_ group: String) -> String {
            let used = Double((after.groups[group] ?? 0) - (before.groups[group] ?? 0)) / ticks
            return String(format: "%.1f µs", used / Double(max(accepted, 1)) * 1e6)
        }
        let busy = Double(after.machineBusy - before.machineBusy) / ticks / Double(max(ProcessInfo.processInfo.activeProcessorCount, 1))
        let rss = rssMaxima(samples)
        let rssFlat = abs(rss.lastThird - rss.secondThird) <= rss.secondThird / 10
        let rssSmall = (samples.max() ?? 0) < 200 * 1024
        let timeMet = audience < 1_000_000 || seconds < 60
        print("fanout 1: manual start run \(run) to \(audience) followers (\(notStartable) below iOS 17.2 left out), state \(report["state"] ?? "?")")
        print("  counts: \(counts)")
        print(String(format: "  start rate: %.0f/s accepted (%d in %.1f s, the run's own start and end times)", rate, accepted, seconds))
        print(String(format: "  h2load, same push-to-starts with distinct tokens, same simulator: %.0f/s", referenceRate))
        print(String(format: "  ratio: %.2f", ratio) + " (target >= 0.4: \(verdict(ratio >= 0.4)))")
        print(
            String(format: "  time for the audience: %.1f s", seconds)
                + " (target for a million: under 60 s: \(audience >= 1_000_000 ? verdict(timeMet) : "n/a"))")
        print("  CPU per accepted start: PostgreSQL \(perStart("postgres")), serve \(perStart("serve")), simulator \(perStart("simulator"))")
        print(String(format: "  machine busy while the run was watched (%.1f s): %.0f %% of all cores", wall, 100 * busy / max(wall, 0.001)))
        print(
            "  serve RSS: max \((samples.max() ?? 0) / 1024) MB; second third \(rss.secondThird / 1024) MB, last third \(rss.lastThird / 1024) MB "
                + "(within 10 %: \(verdict(rssFlat)); under 200 MB: \(verdict(rssSmall)))")
        return (rate, ratio >= 0.4 && timeMet && rssFlat && rssSmall)
    }

    // MARK: 2. Mirroring

    func mirroring(pushRate: Double) async throws -> Bool {
        let tokens = tokenActivities ?? max(100, Int(10 * pushRate / 5))
        let database = try await PostgresConnection.connect(url: databaseURL)
        let type = try await database.query("SELECT attribute_type_id, app_id FROM events WHERE id = \(mirrorEvent)")[0]
        let typeName = try await database.query(
            "SELECT name FROM attribute_types WHERE id = \(try type.decode(Int.self, column: "attribute_type_id"))")[0].decode(
                String.self, column: "name")
        let app: Int = try type.decode(column: "app_id")
        // Token activities on the mirror event, on the first installations (update tokens of their own).
        try await database.execute(
            """
            INSERT INTO activities (app_id, installation, activity_id, event_id, attribute_type, push_type, push_token, state, token_seen_at,
                                    audience_round)
            SELECT \(app), id, 'bench-mirror-' || id, \(mirrorEvent), \(typeName), 'token',
                   encode(sha256(convert_to('bench-mirror-' || id, 'UTF8')), 'hex'), 'active', now(), 1
            FROM installations WHERE app_id = \(app) ORDER BY id LIMIT \(tokens)
            """)
        try await database.execute("ANALYZE activities")
        let budget = 2 * Double(tokens) / max(pushRate, 1) + 1
        print(
            "fanout 2: mirroring to \(tokens) token activities (10 s x R / 5, R = \(Int(pushRate))/s), an update every \(mirrorInterval) s for \(mirrorSeconds) s"
        )

        struct Posted: Sendable {
            let answeredAt: Int64
            let updateID: Int
        }
        let posted = Mutex<[Posted]>([])
        let posting = Thread.detachNewThreadAndWait { [port, ingestKey, mirrorEvent, mirrorSeconds, mirrorInterval] in
            let connection = BlockingHTTPConnection(port: port)
            let start = wallNanoseconds()
            for sequence in 1...(mirrorSeconds / mirrorInterval) {
                sleep(until: start + Int64(sequence - 1) * Int64(mirrorInterval) * 1_000_000_000)
                let body = #"{"contentState": {"homeScore": \#(sequence), "awayScore": 0, "minute": \#(sequence)}}"#
                guard
                    let answer = try? connection.send(
                        method: "POST", path: "/v1/events/\(mirrorEvent)/updates",
                        headers: [("Authorization", "Bearer \(ingestKey)"), ("Content-Type", "application/json")], body: Array(body.utf8)),
                    answer.status == 202, let id = firstID(in: answer.body)
                else { continue }
                posted.withLock { $0.append(Posted(answeredAt: wallNanoseconds(), updateID: id)) }
            }
        }
        // Each update is done when every token activity has its broadcast's aps.timestamp or a newer one.
        var lags: [Int64] = []
        var next = 0
        let deadline = wallNanoseconds() + Int64(mirrorSeconds + 120) * 1_000_000_000
        while wallNanoseconds() < deadline {
            let known = posted.withLock { $0 }
            if next >= known.count {
                if posting.isFinished && next >= posted.withLock({ $0.count }) { break }
                usleep(50_000)
                continue
            }
            let update = known[next]
            let broadcast = try await database.query(
                """
                SELECT min(aps_timestamp) AS ts FROM deliveries
                WHERE kind = 'broadcast' AND status = 200 AND update_id >= \(update.updateID)
                """)[0].decode(Int?.self, column: "ts")
            guard let timestamp = broadcast else {
                usleep(50_000)
                continue
            }
            let behind = try await database.query(
                """
                SELECT count(*)::bigint AS n FROM activities
                WHERE event_id = \(mirrorEvent) AND push_type = 'token' AND state = 'active'
                  AND coalesce(mirrored_aps_timestamp, 0) < \(timestamp)
                """)[0].decode(Int.self, column: "n")
            if behind == 0 {
                lags.append(wallNanoseconds() - update.answeredAt)
                next += 1
            } else {
                usleep(50_000)
            }
        }
        let updates = posted.withLock { $0.count }
        let lag = Percentiles(lags)
        let met = lags.count == updates && Double(lag.p99) / 1e9 < budget
        print("  updates accepted: \(updates), fully mirrored: \(lags.count)")
        print("  mirroring lag from the 202 until every token has the state: \(lag)")
        print(String(format: "  target p99 < 2 x T / R + 1 s = %.2f s", budget) + ": \(verdict(met))")
        return met
    }
}

extension Thread {
    /// Runs `body` on a new thread; the returned handle says when it has finished.
    static func detachNewThreadAndWait(_ body: @escaping @Sendable () -> Void) -> FinishedFlag {
        let flag = FinishedFlag()
        Thread.detachNewThread {
            body()
            flag.finish()
        }
        return flag
    }
}

final class FinishedFlag: Sendable {
    private let done = Atomic<Bool>(false)
    var isFinished: Bool { done.load(ordering: .acquiring) }
    func finish() { done.store(true, ordering: .releasing) }
}

/// `ServiceBench installations-file`: an import file of `count` installations following one event, and h2load's URIs.
enum InstallationsFile {
    static func write(_ flags: Flags) throws {
        let count = try flags.int("count", default: 1_000_000)
        let event = try flags.required("event")
        let out = try flags.required("out")
        let urls = flags.value("urls")
        let pushURL = flags.value("push-url") ?? "https://127.0.0.1"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        var uriFile: FileHandle?
        if let urls {
            _ = FileManager.default.createFile(atPath: urls, contents: nil)
            uriFile = try FileHandle(forWritingTo: URL(fileURLWithPath: urls))
        }
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = Array("installationId,pushToStartToken,osVersion,appBuild,locale,events,registeredAt\n".utf8)
        var uris: [UInt8] = []
        let registered = Array(",2026-11-01T10:00:00Z\n".utf8)
        for n in 0..<count {
            let version: String =
                switch n % 100 {
                case 0..<45: "18.\(n % 7)"
                case 45..<60: "26.\(n % 2)"
                case 60..<90: "17.\(2 + n % 5)"
                case 90..<97: "17.\(n % 2)"
                default: "16.\(1 + n % 7)"
                }
            // A 64-character token from the row number: distinct, and not a pattern HPACK could index as one.
            var token: [UInt8] = []
            var value = UInt64(n) &* 0x9E37_79B9_7F4A_7C15 | 1
            for _ in 0..<4 {
                value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                for shift in stride(from: 60, through: 0, by: -4) { token.append(hex[Int((value >> UInt64(shift)) & 15)]) }
            }
            text += Array("bench-\(n),".utf8)
            text += token
            text += Array(",\(version),1200,en_GB,\(event)".utf8)
            text += registered
            if uriFile != nil {
                uris += Array("\(pushURL)/3/device/".utf8)
                uris += token
                uris.append(10)
            }
            if text.count > 1 << 20 {
                file.write(Data(text))
                text.removeAll(keepingCapacity: true)
                if let uriFile {
                    uriFile.write(Data(uris))
                    uris.removeAll(keepingCapacity: true)
                }
            }
        }
        file.write(Data(text))
        try file.close()
        if let uriFile {
            uriFile.write(Data(uris))
            try uriFile.close()
        }
    }
}
