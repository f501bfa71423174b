// The run's phases: setup (attributes type, events, their channels open), the open-loop load, the drain,
// then what APNs accepted, read from the deliveries table (see main.swift for what is measured).
import BenchSupport
import Foundation
import Postgres
import Synchronization

/// What one run is told by its flags.
struct ServiceBenchSettings: Sendable {
    var port: UInt16
    var adminKey: String
    var ingestKey: String
    var app: Int
    var databaseURL: String
    var servePID: Int32
    /// PostgreSQL's postmaster and the simulator, for the CPU account (nil: not counted).
    var postgresPID: Int32?
    var simulatorPID: Int32?
    var events: Int
    var updatesPerEvent: Int
    var rate: Int
    var connections: Int
    /// The simulator's JSON request log: when it answered each broadcast (nil: serve's records only).
    var simulatorLog: String?
    /// Where to write one CSV line per update (nil: nowhere).
    var samplesFile: String?
    /// Makes external ids and idempotency keys unique per run.
    var run = String(wallNanoseconds() / 1_000_000_000)

    init(_ flags: Flags) throws {
        port = UInt16(try flags.int("port", default: 8080))
        adminKey = try flags.required("admin-key")
        ingestKey = try flags.required("ingest-key")
        app = try flags.int("app", default: 1)
        databaseURL = try flags.required("database-url")
        servePID = Int32(try flags.int("serve-pid", default: 1))
        postgresPID = try flags.optionalInt("postgres-pid").map(Int32.init)
        simulatorPID = try flags.optionalInt("simulator-pid").map(Int32.init)
        events = try flags.int("events", default: 1_000)
        updatesPerEvent = try flags.int("updates", default: 60)
        rate = try flags.int("rate", default: 1_000)
        connections = try flags.int("connections", default: 32)
        simulatorLog = flags.value("simulator-log")
        samplesFile = flags.value("samples")
    }
}

/// One update the load sent: when it was due, sent and answered, and what it was.
struct SentUpdate: Sendable {
    var due: Int64
    var sentAt: Int64
    var answeredAt: Int64
    /// 0 when no answer came.
    var status: Int
    var updateID: Int?
    var event: Int
    var alert: Bool
}

/// The load's outcome: every update sent, the load's window, and serve's RSS samples during it.
struct LoadOutcome {
    var sent: [SentUpdate]
    var start: Int64
    var end: Int64
    var rssSamples: [Int]
    /// CPU times just before and after the load.
    var cpu: (before: CPUTimes, after: CPUTimes)
}

/// Drives one run against `marquee serve`.
struct ServiceBench {
    let settings: ServiceBenchSettings
    let database: PostgresConnection

    private var adminHeaders: [(String, String)] { [("Authorization", "Bearer \(settings.adminKey)"), ("Content-Type", "application/json")] }

    /// Registers the bench's attributes type and creates the events (starting now); returns their ids in order.
    func createEvents() async throws -> [Int] {
        let type = """
            {"app": \(settings.app), "name": "BenchMatch", "attributes": {"homeTeam": "string", "awayTeam": "string"},
             "contentState": {"homeScore": {"type": "int", "significant": true}, "awayScore": {"type": "int", "significant": true},
                              "minute": "int", "lastEvent": "string?"}}
            """
        let answer = try BlockingHTTPConnection(port: settings.port).send(
            method: "POST", path: "/v1/attribute-types",
            headers: adminHeaders, body: Array(type.utf8))
        guard answer.status == 201 || answer.status == 200 else {
            throw BenchError("POST /v1/attribute-types answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))")
        }
        let startsAt = iso8601(wallNanoseconds())
        let endsAt = iso8601(wallNanoseconds() + 3 * 3_600 * 1_000_000_000)
        let results = await onThreads(min(settings.connections, 8)) { [settings, adminHeaders] thread, threads -> Result<[(Int, Int)], BenchError> in
            let connection = BlockingHTTPConnection(port: settings.port)
            var ids: [(index: Int, id: Int)] = []
            for index in stride(from: thread, to: settings.events, by: threads) {
                let body = """
                    {"app": \(settings.app), "externalId": "bench-\(settings.run)-\(index)", "kind": "match", "attributeType": "BenchMatch",
                     "attributes": {"homeTeam": "Home \(index)", "awayTeam": "Away \(index)"},
                     "contentState": {"homeScore": 0, "awayScore": 0, "minute": 0}, "startsAt": "\(startsAt)", "endsAt": "\(endsAt)"}
                    """
                do throws(BenchHTTPError) {
                    let answer = try connection.send(method: "POST", path: "/v1/events", headers: adminHeaders, body: Array(body.utf8))
                    guard answer.status == 201, let id = firstID(in: answer.body) else {
                        return .failure(BenchError("POST /v1/events answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))"))
                    }
                    ids.append((index, id))
                } catch {
                    return .failure(BenchError("POST /v1/events: \(error)"))
                }
            }
            return .success(ids)
        }
        var events = [Int](repeating: 0, count: settings.events)
        for result in results {
            for (index, id) in try result.get() { events[index] = id }
        }
        return events
    }

    /// Waits until every event's channel is open at the simulator (up to 300 s).
    func waitForChannels() async throws {
        let start = wallNanoseconds()
        while true {
            let open = try await count("SELECT count(*) AS n FROM channels WHERE state = 'open'")
            if open >= settings.events { return }
            if wallNanoseconds() - start > 300 * 1_000_000_000 {
                throw BenchError("only \(open) of \(settings.events) channels opened within 300 s; see serve's log")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// The open-loop load: update i is due at start + i / rate, for event i % events, as that event's
    /// update i / events + 1; every 20th update of an event (10, 30, 50) is a goal with an alert.
    func sendUpdates(to events: [Int]) async -> LoadOutcome {
        let total = settings.events * settings.updatesPerEvent
        let interval = 1_000_000_000 / Int64(settings.rate)
        let start = wallNanoseconds() + 200_000_000
        let next = Atomic<Int>(0)
        let sampler = RSSSampler(processID: settings.servePID)
        sampler.start()
        let cpuBefore = readCPU()
        let perThread = await onThreads(settings.connections) { [settings] _, threads -> [SentUpdate] in
            let connection = BlockingHTTPConnection(port: settings.port)
            var sent: [SentUpdate] = []
            sent.reserveCapacity(total / threads * 2)
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < total else { break }
                let due = start + Int64(index) * interval
                sleep(until: due)
                let event = events[index % settings.events]
                let sequence = index / settings.events + 1
                let alert = sequence % 20 == 10
                let home = (sequence + 10) / 20
                var body =
                    #"{"contentState": {"homeScore": \#(home), "awayScore": 0, "minute": \#(sequence), "lastEvent": "\#(alert ? "GOAL" : "play") \#(sequence)'"}"#
                if alert { body += #", "alert": {"title": "GOAL", "body": "Home \#(home)-0 (\#(sequence)')", "sound": "default"}"# }
                body += "}"
                var record = SentUpdate(due: due, sentAt: wallNanoseconds(), answeredAt: 0, status: 0, updateID: nil, event: event, alert: alert)
                if let answer = try? connection.send(
                    method: "POST", path: "/v1/events/\(event)/updates",
                    headers: [
                        ("Authorization", "Bearer \(settings.ingestKey)"), ("Content-Type", "application/json"),
                        ("Idempotency-Key", "bench-\(settings.run)-\(event)-\(sequence)"),
                    ],
                    body: Array(body.utf8))
                {
                    record.status = answer.status
                    record.updateID = answer.status == 202 ? firstID(in: answer.body) : nil
                }
                record.answeredAt = wallNanoseconds()
                sent.append(record)
            }
            return sent
        }
        let end = wallNanoseconds()
        return LoadOutcome(sent: perThread.flatMap { $0 }, start: start, end: end, rssSamples: sampler.stop(), cpu: (cpuBefore, readCPU()))
    }

    /// The CPU times of the processes taking part (PostgreSQL with its backends, serve, the simulator, this driver).
    private func readCPU() -> CPUTimes {
        var groups: [String: (processID: Int32, withChildren: Bool)] = ["serve": (settings.servePID, false), "driver": (getpid(), false)]
        if let postgres = settings.postgresPID { groups["PostgreSQL"] = (postgres, true) }
        if let simulator = settings.simulatorPID { groups["simulator"] = (simulator, false) }
        return CPUTimes.read(groups: groups)
    }

    /// Waits until no update is pending (up to 120 s); returns how many still are.
    func drain() async throws -> Int {
        let start = wallNanoseconds()
        while true {
            let pending = try await count("SELECT count(*) AS n FROM updates WHERE disposition = 'pending'")
            if pending == 0 || wallNanoseconds() - start > 120 * 1_000_000_000 { return pending }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Every broadcast APNs accepted, as (event, update id, when): by the simulator's log of its answer
    /// (matched on apns-request-id) and by serve's record of it; and counts.
    func acceptedBroadcasts() async throws -> AcceptedBroadcasts {
        let answered = try settings.simulatorLog.map(simulatorAnswerTimes) ?? [:]
        var bySimulator: [(event: Int, updateID: Int, acceptedAt: Int64)] = []
        var byServe: [(event: Int, updateID: Int, acceptedAt: Int64)] = []
        var priorities: [Int: Int] = [:]
        for row in try await database.query(
            """
            SELECT u.event_id, d.update_id, d.priority, d.apns_request_id::text AS request_id,
                   (extract(epoch FROM d.sent_at) * 1000000)::bigint AS sent_us
            FROM deliveries d JOIN updates u ON u.id = d.update_id
            WHERE d.kind = 'broadcast' AND d.status = 200
            """)
        {
            let event = try row.decode(Int.self, column: "event_id")
            let updateID = try row.decode(Int.self, column: "update_id")
            let recorded = try row.decode(Int64.self, column: "sent_us") * 1_000
            byServe.append((event, updateID, recorded))
            if let id = try row.decode(String?.self, column: "request_id"), let at = answered[id.lowercased()] {
                bySimulator.append((event, updateID, at))
            }
            priorities[try row.decode(Int.self, column: "priority"), default: 0] += 1
        }
        var dispositions: [String: Int] = [:]
        for row in try await database.query("SELECT disposition, count(*) AS n FROM updates GROUP BY disposition") {
            dispositions[try row.decode(String.self, column: "disposition")] = try row.decode(Int.self, column: "n")
        }
        let alertsBelowTen = try await count(
            """
            SELECT count(*) AS n FROM updates u JOIN deliveries d ON d.update_id = u.id
            WHERE u.alert IS NOT NULL AND d.kind = 'broadcast' AND d.status = 200 AND d.priority <> 10
            """)
        return AcceptedBroadcasts(
            bySimulator: bySimulator.count == byServe.count ? DeliveryTable(bySimulator) : nil,
            byServe: DeliveryTable(byServe), matched: bySimulator.count, priorities: priorities,
            dispositions: dispositions, alertsBelowTen: alertsBelowTen)
    }

    /// When the simulator answered each accepted broadcast, by request id (its log's `ts`, in milliseconds).
    private func simulatorAnswerTimes(_ path: String) throws -> [String: Int64] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var times: [String: Int64] = [:]
        for line in text.split(separator: "\n") where line.contains("/4/broadcasts/") && line.contains(#""status":200"#) {
            guard let ts = Self.field("ts", in: line), let id = Self.field("request_id", in: line),
                let date = formatter.date(from: ts)
            else { continue }
            times[id.lowercased()] = Int64((date.timeIntervalSince1970 * 1e9).rounded())
        }
        return times
    }

    /// A string field of a JSON log line, without a JSON parser (the simulator writes no escapes in these).
    private static func field(_ name: String, in line: Substring) -> String? {
        guard let start = line.range(of: "\"\(name)\":\"") else { return nil }
        let rest = line[start.upperBound...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<end])
    }

    private func count(_ query: PostgresQuery) async throws -> Int {
        try await database.query(query)[0].decode(Int.self, column: "n")
    }
}

/// What APNs accepted: delivery times by the simulator's log (nil unless every broadcast matched) and by serve.
struct AcceptedBroadcasts {
    var bySimulator: DeliveryTable?
    var byServe: DeliveryTable
    var matched: Int
    var priorities: [Int: Int]
    var dispositions: [String: Int]
    var alertsBelowTen: Int
}

/// When each update was delivered: at the first accepted broadcast of its event carrying it or a newer
/// state (a broadcast of a later update id of the same event).
struct DeliveryTable {
    /// Per event: accepted broadcasts' update ids ascending, and the earliest acceptance at or after each.
    private var byEvent: [Int: (updateIDs: [Int], earliest: [Int64])] = [:]

    init(_ broadcasts: [(event: Int, updateID: Int, acceptedAt: Int64)]) {
        for (event, list) in Dictionary(grouping: broadcasts, by: \.event) {
            let sorted = list.sorted { $0.updateID < $1.updateID }
            var earliest = sorted.map(\.acceptedAt)
            for index in earliest.indices.reversed().dropFirst() { earliest[index] = min(earliest[index], earliest[index + 1]) }
            byEvent[event] = (sorted.map(\.updateID), earliest)
        }
    }

    /// When APNs first accepted this update's state or a newer one of its event; nil if never.
    func deliveredAt(event: Int, updateID: Int) -> Int64? {
        guard let table = byEvent[event], let position = firstIndex(atLeast: updateID, in: table.updateIDs) else { return nil }
        return table.earliest[position]
    }
}

/// Prints the figures next to their targets; returns whether every target was met.
func report(_ settings: ServiceBenchSettings, load: LoadOutcome, accepted broadcasts: AcceptedBroadcasts) -> Bool {
    let (priorities, dispositions, alertsBelowTen) = (broadcasts.priorities, broadcasts.dispositions, broadcasts.alertsBelowTen)
    let deliveries = broadcasts.bySimulator ?? broadcasts.byServe
    let total = settings.events * settings.updatesPerEvent
    let accepted = load.sent.filter { $0.status == 202 && $0.updateID != nil }
    let failures = load.sent.count - accepted.count
    var statuses: [Int: Int] = [:]
    for update in load.sent where update.status != 202 { statuses[update.status, default: 0] += 1 }

    var deliveryAll: [Int64] = []
    var deliveryAlert: [Int64] = []
    var undelivered = 0
    var beforeAnswer = 0
    var recordedByServe: [Int64] = []
    for update in accepted {
        if let recorded = broadcasts.byServe.deliveredAt(event: update.event, updateID: update.updateID!) {
            recordedByServe.append(max(0, recorded - update.answeredAt))
        }
        guard let delivered = deliveries.deliveredAt(event: update.event, updateID: update.updateID!) else {
            undelivered += 1
            continue
        }
        if delivered < update.answeredAt { beforeAnswer += 1 }  // APNs answered before the driver read the 202
        let latency = max(0, delivered - update.answeredAt)
        deliveryAll.append(latency)
        if update.alert { deliveryAlert.append(latency) }
    }
    let ingest = Percentiles(accepted.map { $0.answeredAt - $0.due })
    let service = Percentiles(accepted.map { $0.answeredAt - $0.sentAt })
    let all = Percentiles(deliveryAll)
    let alerts = Percentiles(deliveryAlert)
    let late = load.sent.filter { $0.sentAt - $0.due > 1_000_000 }.count
    let lastAnswer = accepted.map(\.answeredAt).max() ?? load.end
    let sustained = Double(accepted.count) / (Double(lastAnswer - load.start) / 1e9)
    let rss = rssMaxima(load.rssSamples)
    let rssWithin = abs(rss.lastThird - rss.secondThird) <= rss.secondThird / 10
    // A target over no samples (a run too short to carry an alert) is not met.
    let targets = (
        ingest: !accepted.isEmpty && ingest.p99 < 10_000_000, all: !deliveryAll.isEmpty && all.p99 < 1_200_000_000,
        alerts: !deliveryAlert.isEmpty && alerts.p99 < 20_000_000
    )

    print(
        """
        rate:      \(String(format: "%.1f", sustained)) updates/s sustained (\(accepted.count) of \(total) answered 202 in \
        \(format(seconds: lastAnswer - load.start)); scheduled \(settings.rate)/s; \(failures) failed\(statuses.isEmpty ? "" : " \(statuses)"); \
        \(late) sent > 1 ms after due)
        ingest:    202 latency from the scheduled send  \(ingest)   (target p99 < 10 ms: \(verdict(targets.ingest)))
                   service time alone (send to 202): \(service)
        delivery:  202 -> APNs accepted, all \(deliveryAll.count) updates  \(all)   (target p99 < 1.2 s: \(verdict(targets.all)))
                   alert updates (\(deliveryAlert.count), sent at once)  \(alerts)   (target p99 < 20 ms: \(verdict(targets.alerts)))
                   \(undelivered) never delivered; \(beforeAnswer) accepted before the driver read the 202 (counted as 0)
                   APNs accepted = \(broadcasts.bySimulator != nil ? "the simulator's log time of its answer (all \(broadcasts.matched) matched by apns-request-id)" : "serve's record of the answer (deliveries.sent_at)"); \
        by serve's record instead: p99 \(ms(Percentiles(recordedByServe).p99))
        apns:      \(priorities.values.reduce(0, +)) broadcasts accepted (\(priorities.sorted { $0.key > $1.key }.map { "\($0.value) at priority \($0.key)" }.joined(separator: ", "))); \
        updates \(dispositions["broadcast"] ?? 0) broadcast, \(dispositions["conflated"] ?? 0) conflated, \
        \(dispositions["superseded"] ?? 0) superseded, \(dispositions["pending"] ?? 0) pending, \(dispositions["unsent"] ?? 0) unsent; \
        alerts below priority 10: \(alertsBelowTen)
        cpu:       \(cpuAccount(load, updates: load.sent.count))
        rss:       serve every 100 ms during the load (\(load.rssSamples.count) samples): max of the second third \(rss.secondThird / 1024) MiB, \
        of the last third \(rss.lastThird / 1024) MiB   (target within 10%: \(verdict(rssWithin)))
        """)
    return targets.ingest && targets.all && targets.alerts && rssWithin && failures == 0 && undelivered == 0
}

/// The machine's busy share during the load and each process group's CPU time per update sent.
func cpuAccount(_ load: LoadOutcome, updates: Int) -> String {
    let (before, after) = load.cpu
    let tick = 1_000.0 / Double(CPUTimes.ticksPerSecond)  // ms
    let cores = ProcessInfo.processInfo.activeProcessorCount
    let busy = Double(after.machineBusy - before.machineBusy) * tick
    let perUpdate = { (ticks: Int) in String(format: "%.3f ms", Double(ticks) * tick / Double(max(updates, 1))) }
    let order = ["PostgreSQL", "serve", "simulator", "driver"].filter { after.groups[$0] != nil }
    let counted = order.map { (after.groups[$0] ?? 0) - (before.groups[$0] ?? 0) }
    return String(
        format: "the machine was %.0f%% busy (%d cores) during the load; CPU per update: ",
        100 * busy / (Double(load.end - load.start) / 1e6) / Double(cores), cores)
        + zip(order, counted).map { "\($0) \(perUpdate($1))" }.joined(separator: ", ")
}

/// Writes one CSV line per update sent (times in microseconds from the load's start), for looking at where
/// the tails fall: due, sent, answered, status, alert, delivered (empty when never).
func writeSamples(to path: String, load: LoadOutcome, accepted broadcasts: AcceptedBroadcasts) throws {
    let deliveries = broadcasts.bySimulator ?? broadcasts.byServe
    func micros(_ at: Int64) -> String { String((at - load.start) / 1_000) }
    var lines = ["due_us,sent_us,answered_us,status,alert,delivered_us"]
    for update in load.sent.sorted(by: { $0.due < $1.due }) {
        let delivered = update.updateID.flatMap { deliveries.deliveredAt(event: update.event, updateID: $0) }
        lines.append(
            [
                micros(update.due), micros(update.sentAt), micros(update.answeredAt), String(update.status),
                update.alert ? "1" : "0", delivered.map(micros) ?? "",
            ].joined(separator: ","))
    }
    try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
}

/// p50, p99, p99.9 and the maximum of nanosecond values (nearest rank).
struct Percentiles: CustomStringConvertible {
    var p50: Int64 = 0, p99: Int64 = 0, p999: Int64 = 0, max: Int64 = 0

    init(_ values: [Int64]) {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return }
        func rank(_ quantile: Double) -> Int64 {
            sorted[Swift.min(Swift.max(Int((quantile * Double(sorted.count)).rounded(.up)), 1), sorted.count) - 1]
        }
        p50 = rank(0.5)
        p99 = rank(0.99)
        p999 = rank(0.999)
        max = sorted[sorted.count - 1]
    }

    var description: String { "p50 \(ms(p50))  p99 \(ms(p99))  p99.9 \(ms(p999))  max \(ms(max))" }
}

func log(_ line: String) { FileHandle.standardError.write(Data("  \(line)\n".utf8)) }

func verdict(_ met: Bool) -> String { met ? "met" : "NOT met" }
