// The run itself: setup, the open-loop load, the drain, and the report (see main.swift).
import BenchSupport
import Foundation
import Postgres
import Synchronization

/// Runs the benchmark; returns whether every target was met.
func runServiceBench(_ flags: Flags) async throws -> Bool {
    let port = UInt16(try flags.int("port", default: 8080))
    let adminKey = try flags.required("admin-key")
    let ingestKey = try flags.required("ingest-key")
    let app = try flags.int("app", default: 1)
    let databaseURL = try flags.required("database-url")
    let servePID = Int32(try flags.int("serve-pid", default: 1))
    let eventCount = try flags.int("events", default: 1_000)
    let updatesPerEvent = try flags.int("updates", default: 60)
    let rate = try flags.int("rate", default: 1_000)
    let connections = try flags.int("connections", default: 32)
    let run = String(wallNanoseconds() / 1_000_000_000)

    let database = try await PostgresConnection.connect(url: databaseURL)

    // ---- setup: the attributes type, the events (starting now), their channels open
    let typeBody = """
        {"app": \(app), "name": "BenchMatch", "attributes": {"homeTeam": "string", "awayTeam": "string"},
         "contentState": {"homeScore": {"type": "int", "significant": true}, "awayScore": {"type": "int", "significant": true},
                          "minute": "int", "lastEvent": "string?"}}
        """
    let typeAnswer = try BlockingHTTPConnection(port: port).send(
        method: "POST", path: "/v1/attribute-types", headers: [("Authorization", "Bearer \(adminKey)"), ("Content-Type", "application/json")],
        body: Array(typeBody.utf8))
    guard typeAnswer.status == 201 || typeAnswer.status == 200 else {
        throw BenchError("POST /v1/attribute-types answered \(typeAnswer.status): \(String(decoding: typeAnswer.body, as: UTF8.self))")
    }

    let setupStart = wallNanoseconds()
    let startsAt = iso8601(wallNanoseconds())
    let endsAt = iso8601(wallNanoseconds() + 3 * 3_600 * 1_000_000_000)
    let created = await onThreads(min(connections, 8)) { thread, threads -> Result<[(Int, Int)], BenchHTTPError> in
        let connection = BlockingHTTPConnection(port: port)
        var ids: [(Int, Int)] = []
        for index in stride(from: thread, to: eventCount, by: threads) {
            let body = """
                {"app": \(app), "externalId": "bench-\(run)-\(index)", "kind": "match", "attributeType": "BenchMatch",
                 "attributes": {"homeTeam": "Home \(index)", "awayTeam": "Away \(index)"},
                 "contentState": {"homeScore": 0, "awayScore": 0, "minute": 0}, "startsAt": "\(startsAt)", "endsAt": "\(endsAt)"}
                """
            do throws(BenchHTTPError) {
                let answer = try connection.send(method: "POST", path: "/v1/events",
                                                 headers: [("Authorization", "Bearer \(adminKey)"), ("Content-Type", "application/json")],
                                                 body: Array(body.utf8))
                guard answer.status == 201, let id = firstID(in: answer.body) else {
                    return .failure(.protocolError("POST /v1/events answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))"))
                }
                ids.append((index, id))
            } catch {
                return .failure(error)
            }
        }
        return .success(ids)
    }
    var eventIDs = [Int](repeating: 0, count: eventCount)
    for result in created {
        for (index, id) in try result.get() { eventIDs[index] = id }
    }
    let events = eventIDs
    log("created \(eventCount) events in \(format(seconds: wallNanoseconds() - setupStart))")

    let openStart = wallNanoseconds()
    while true {
        let open = try await database.query("SELECT count(*) AS n FROM channels WHERE state = 'open'")[0].decode(Int.self, column: "n")
        if open >= eventCount { break }
        if wallNanoseconds() - openStart > 300 * 1_000_000_000 {
            throw BenchError("only \(open) of \(eventCount) channels opened within 300 s; see serve's log")
        }
        try await Task.sleep(for: .milliseconds(200))
    }
    log("\(eventCount) channels open at the simulator after \(format(seconds: wallNanoseconds() - openStart))")

    // ---- the load: update i is due at start + i / rate, for event i % events, as its update i / events
    let total = eventCount * updatesPerEvent
    let intervalNanoseconds = 1_000_000_000 / Int64(rate)
    let loadStart = wallNanoseconds() + 200_000_000
    let next = Atomic<Int>(0)
    let sampler = RSSSampler(processID: servePID)
    sampler.start()
    log("sending \(total) updates at \(rate)/s over \(connections) connections (open loop)")

    let perThread = await onThreads(connections) { _, _ -> [Sent] in
        let connection = BlockingHTTPConnection(port: port)
        var sent: [Sent] = []
        sent.reserveCapacity(total / connections * 2)
        while true {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < total else { break }
            let due = loadStart + Int64(index) * intervalNanoseconds
            sleep(until: due)
            let event = events[index % eventCount]
            let sequence = index / eventCount + 1
            let alert = sequence % 20 == 10
            let home = (sequence + 10) / 20
            var body = """
                {"contentState": {"homeScore": \(home), "awayScore": 0, "minute": \(sequence), "lastEvent": "\(alert ? "GOAL" : "play") \(sequence)'"}
                """
            if alert { body += #", "alert": {"title": "GOAL", "body": "Home \#(home)-0 (\#(sequence)')", "sound": "default"}"# }
            body += "}"
            let start = wallNanoseconds()
            var record = Sent(due: due, sentAt: start, acceptedAt: 0, status: 0, updateID: nil, event: event, alert: alert)
            do {
                let answer = try connection.send(
                    method: "POST", path: "/v1/events/\(event)/updates",
                    headers: [("Authorization", "Bearer \(ingestKey)"), ("Content-Type", "application/json"),
                              ("Idempotency-Key", "bench-\(run)-\(event)-\(sequence)")],
                    body: Array(body.utf8))
                record.acceptedAt = wallNanoseconds()
                record.status = answer.status
                record.updateID = answer.status == 202 ? firstID(in: answer.body) : nil
            } catch {
                record.acceptedAt = wallNanoseconds()
            }
            sent.append(record)
        }
        return sent
    }
    let loadEnd = wallNanoseconds()
    let rssSamples = sampler.stop()
    let sent = perThread.flatMap { $0 }
    let accepted = sent.filter { $0.status == 202 && $0.updateID != nil }
    let failures = sent.count - accepted.count
    var statuses: [Int: Int] = [:]
    for record in sent where record.status != 202 { statuses[record.status, default: 0] += 1 }
    log("load finished in \(format(seconds: loadEnd - loadStart)); waiting for the dispatcher to drain")

    // ---- drain, then read what APNs accepted
    let drainStart = wallNanoseconds()
    var pendingLeft = 0
    repeat {
        pendingLeft = try await database.query("SELECT count(*) AS n FROM updates WHERE disposition = 'pending'")[0].decode(Int.self, column: "n")
        if pendingLeft == 0 { break }
        try await Task.sleep(for: .milliseconds(200))
    } while wallNanoseconds() - drainStart < 120 * 1_000_000_000
    log("drained after \(format(seconds: wallNanoseconds() - drainStart)) (\(pendingLeft) pending)")

    var broadcastsByEvent: [Int: [Broadcast]] = [:]
    var priorities: [Int: Int] = [:]
    for row in try await database.query("""
        SELECT u.event_id, d.update_id, d.priority, (extract(epoch FROM d.sent_at) * 1000000)::bigint AS sent_us
        FROM deliveries d JOIN updates u ON u.id = d.update_id
        WHERE d.kind = 'broadcast' AND d.status = 200
        """) {
        let broadcast = Broadcast(updateID: try row.decode(Int.self, column: "update_id"),
                                  sentAt: try row.decode(Int64.self, column: "sent_us") * 1_000)
        broadcastsByEvent[try row.decode(Int.self, column: "event_id"), default: []].append(broadcast)
        priorities[try row.decode(Int.self, column: "priority"), default: 0] += 1
    }
    var dispositions: [String: Int] = [:]
    for row in try await database.query("SELECT disposition, count(*) AS n FROM updates GROUP BY disposition") {
        dispositions[try row.decode(String.self, column: "disposition")] = try row.decode(Int.self, column: "n")
    }
    let alertsBelowTen = try await database.query("""
        SELECT count(*) AS n FROM updates u JOIN deliveries d ON d.update_id = u.id
        WHERE u.alert IS NOT NULL AND d.kind = 'broadcast' AND d.status = 200 AND d.priority <> 10
        """)[0].decode(Int.self, column: "n")

    // Per event: broadcasts by update id, with the earliest acceptance among this and every later one.
    var firstAcceptance: [Int: (ids: [Int], earliest: [Int64])] = [:]
    for (event, list) in broadcastsByEvent {
        let sorted = list.sorted { $0.updateID < $1.updateID }
        var earliest = sorted.map(\.sentAt)
        if earliest.count > 1 {
            for index in stride(from: earliest.count - 2, through: 0, by: -1) { earliest[index] = min(earliest[index], earliest[index + 1]) }
        }
        firstAcceptance[event] = (sorted.map(\.updateID), earliest)
    }
    var deliveryAll: [Int64] = []
    var deliveryAlert: [Int64] = []
    var undelivered = 0
    var beforeAccepted = 0
    for record in accepted {
        guard let table = firstAcceptance[record.event], let id = record.updateID,
              let position = firstIndex(atLeast: id, in: table.ids) else {
            undelivered += 1
            continue
        }
        var latency = table.earliest[position] - record.acceptedAt
        if latency < 0 {
            beforeAccepted += 1  // serve recorded APNs' answer before this thread read its 202
            latency = 0
        }
        deliveryAll.append(latency)
        if record.alert { deliveryAlert.append(latency) }
    }

    // ---- the report
    let ingestFromDue = accepted.map { $0.acceptedAt - $0.due }
    let ingestService = accepted.map { $0.acceptedAt - $0.sentAt }
    let lateSends = sent.filter { $0.sentAt - $0.due > 1_000_000 }.count
    let lastAccepted = accepted.map(\.acceptedAt).max() ?? loadEnd
    let sustained = Double(accepted.count) / (Double(lastAccepted - loadStart) / 1e9)
    let figures = loadFigures(elapsed: .nanoseconds(loadEnd - loadStart), rssSamples: rssSamples)
    let rss = figures.text.split(separator: " ").reduce(into: [String: Int]()) { values, pair in
        let parts = pair.split(separator: "=")
        if parts.count == 2 { values[String(parts[0])] = Int(parts[1]) }
    }
    let rssSecond = rss["rss_max_second_third_kib"] ?? 0
    let rssLast = rss["rss_max_last_third_kib"] ?? 0
    let totalBroadcasts = priorities.values.reduce(0, +)

    let ingestP99 = percentile(ingestFromDue, 0.99)
    let allP99 = percentile(deliveryAll, 0.99)
    let alertP99 = percentile(deliveryAlert, 0.99)
    let rssWithin = abs(rssLast - rssSecond) <= rssSecond / 10
    let met = [ingestP99 < 10_000_000, allP99 < 1_200_000_000, alertP99 < 20_000_000, rssWithin, failures == 0, undelivered == 0]

    print("""
        rate:      \(String(format: "%.1f", sustained)) updates/s sustained (\(accepted.count) of \(total) answered 202 in \
        \(format(seconds: lastAccepted - loadStart)); scheduled \(rate)/s; \(failures) failed\(statuses.isEmpty ? "" : " \(statuses)"); \
        \(lateSends) sent > 1 ms late)
        ingest:    202 latency from the scheduled send  p50 \(ms(percentile(ingestFromDue, 0.5)))  p99 \(ms(ingestP99))  \
        p99.9 \(ms(percentile(ingestFromDue, 0.999)))  max \(ms(ingestFromDue.max() ?? 0))   (target p99 < 10 ms: \(verdict(ingestP99 < 10_000_000)))
                   (service time alone, send to 202: p50 \(ms(percentile(ingestService, 0.5)))  p99 \(ms(percentile(ingestService, 0.99))))
        delivery:  202 -> APNs accepted, all \(deliveryAll.count) updates  p50 \(ms(percentile(deliveryAll, 0.5)))  p99 \(ms(allP99))  \
        p99.9 \(ms(percentile(deliveryAll, 0.999)))  max \(ms(deliveryAll.max() ?? 0))   (target p99 < 1.2 s: \(verdict(allP99 < 1_200_000_000)))
                   alert updates (\(deliveryAlert.count), sent at once)  p50 \(ms(percentile(deliveryAlert, 0.5)))  p99 \(ms(alertP99))  \
        p99.9 \(ms(percentile(deliveryAlert, 0.999)))  max \(ms(deliveryAlert.max() ?? 0))   (target p99 < 20 ms: \(verdict(alertP99 < 20_000_000)))
                   \(undelivered) never delivered; \(beforeAccepted) recorded before the driver read their 202 (counted as 0)
        apns:      \(totalBroadcasts) broadcasts accepted (\(priorities.sorted { $0.key > $1.key }.map { "\($0.value) at priority \($0.key)" }.joined(separator: ", "))); \
        updates \(dispositions["broadcast"] ?? 0) broadcast, \(dispositions["conflated"] ?? 0) conflated, \
        \(dispositions["superseded"] ?? 0) superseded, \(dispositions["pending"] ?? 0) pending; alerts below priority 10: \(alertsBelowTen)
        rss:       serve sampled every 100 ms during the load (\(rssSamples.count) samples): max of the second third \(rssSecond / 1024) MiB, \
        of the last third \(rssLast / 1024) MiB   (target within 10%: \(verdict(rssWithin)))
        """)
    return met.allSatisfy { $0 }
}

/// One sent update: when it was due, when its 202 came, and what it was.
struct Sent: Sendable {
    var due: Int64
    var sentAt: Int64
    var acceptedAt: Int64
    var status: Int
    var updateID: Int?
    var event: Int
    var alert: Bool
}

struct Broadcast {
    var updateID: Int
    var sentAt: Int64
}
func log(_ line: String) { FileHandle.standardError.write(Data("  \(line)\n".utf8)) }

func verdict(_ ok: Bool) -> String { ok ? "met" : "NOT met" }
