import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// Ingest: one transaction for update, latest state and outbox; idempotency; out-of-order input; merges under the lock.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineIngestTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func storesUpdateLatestStateAndOutbox() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()

        let result = try await f.post(event.id, ["home": 1, "away": 0], at: t0)
        guard case .accepted(let update, let response) = result else {
            Issue.record("not accepted")
            return
        }
        #expect(update.disposition == .pending)
        #expect(response.status == 202)
        let latest = try await f.events.latestState(eventID: event.id)
        #expect(latest.state == ["home": 1, "away": 0])
        #expect(latest.at == t0)
        #expect(latest.updateID == update.id)
        #expect(try await f.scalar(Int.self, "SELECT update_id FROM outbox WHERE event_id = \(event.id)") == update.id)
        // A second update moves the single outbox row to the newer update.
        guard case .accepted(let second, _) = try await f.post(event.id, ["home": 2, "away": 0], at: t0 + 1) else {
            Issue.record("not accepted")
            return
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox WHERE event_id = \(event.id)") == 1)
        #expect(try await f.scalar(Int.self, "SELECT update_id FROM outbox WHERE event_id = \(event.id)") == second.id)
        let counts = try await f.events.counts(eventID: event.id)
        #expect(counts.pending == 2)
    }

    @Test func aFailureMidwayStoresNothing() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let idempotency = IdempotencyRequest(apiKeyID: f.apiKeyID, key: "k1", requestHash: PipelineFixture.hash("a"))
        // A constraint violation in the update INSERT (dismissal date on a plain update).
        await #expect(throws: PostgresError.self) {
            try await f.ingest.ingest(
                eventID: event.id, UpdateDraft(dismissalDate: t0, occurredAt: t0), idempotency: idempotency,
                contentState: { _ in ["home": 1] }, response: { _ in StoredResponse(status: 202, body: Data()) })
        }
        // A refusal by the caller's validation, after the lock.
        struct SchemaMismatch: Error {}
        await #expect(throws: SchemaMismatch.self) {
            try await f.ingest.ingest(
                eventID: event.id, UpdateDraft(occurredAt: t0), idempotency: idempotency,
                contentState: { _ in throw SchemaMismatch() }, response: { _ in StoredResponse(status: 202, body: Data()) })
        }
        // Refusals by the event (closed, or another app's for a key bound to an app) leave no key behind.
        try await f.pool.execute("UPDATE events SET status = 'ended' WHERE id = \(event.id)")
        await #expect(throws: PipelineError.eventClosed(event.id, .ended)) {
            try await f.post(event.id, ["home": 1], at: t0, key: "k1", body: "a")
        }
        try await f.pool.execute("UPDATE events SET status = 'live' WHERE id = \(event.id)")
        await #expect(throws: PipelineError.eventNotFound(event.id)) {
            try await f.ingest.ingest(
                eventID: event.id, UpdateDraft(occurredAt: t0), state: ["home": 1], appID: 999_999,
                idempotency: idempotency, response: PipelineFixture.answer)
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 0)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 0)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM idempotency_keys") == 0)
        #expect(try await f.events.latestState(eventID: event.id).state == ["home": 0, "away": 0])
        await #expect(throws: PipelineError.eventNotFound(999_999)) {
            try await f.post(999_999, ["home": 1], at: t0)
        }
    }

    @Test func idempotentRetries() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let first = try await f.post(event.id, ["home": 1], at: t0, key: "goal-1", body: "body-a")
        guard case .accepted = first else {
            Issue.record("first not accepted")
            return
        }
        let again = try await f.post(event.id, ["home": 1], at: t0, key: "goal-1", body: "body-a")
        #expect(again == .replayed(first.response))
        await #expect(throws: PipelineError.idempotencyKeyReused(key: "goal-1")) {
            try await f.post(event.id, ["home": 9], at: t0, key: "goal-1", body: "body-b")
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 1)
        // 24 h later the key is free again.
        let later = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(occurredAt: t0 + 2),
            idempotency: IdempotencyRequest(apiKeyID: f.apiKeyID, key: "goal-1", requestHash: PipelineFixture.hash("body-b")),
            now: Date() + 24 * 3600 + 60, contentState: { _ in ["home": 2] }, response: { _ in StoredResponse(status: 202, body: Data("x".utf8)) })
        guard case .accepted = later else {
            Issue.record("expired key not taken over")
            return
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 2)
        #expect(try await f.ingest.purgeExpiredIdempotencyKeys(now: Date() + 3 * 24 * 3600) == 1)
    }

    /// A replay's answer is rebuilt from the stored update: the disposition it had at ingest, whatever became of it since.
    @Test func replaysAreRebuiltFromTheStoredUpdate() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let newer = try await f.post(event.id, ["home": 2], at: t0 + 10, key: "newer", body: "newer")
        let older = try await f.post(event.id, ["home": 1], at: t0 + 5, key: "older", body: "older")
        guard case .accepted(let sent, _) = newer, case .accepted(let superseded, _) = older else {
            Issue.record("not accepted")
            return
        }
        #expect(superseded.disposition == .superseded)
        try await f.pool.execute("UPDATE updates SET disposition = 'broadcast', disposed_at = now() WHERE id = \(sent.id)")
        #expect(try await f.post(event.id, ["home": 2], at: t0 + 10, key: "newer", body: "newer") == .replayed(newer.response))
        #expect(try await f.post(event.id, ["home": 1], at: t0 + 5, key: "older", body: "older") == .replayed(older.response))
        #expect(String(decoding: older.response.body, as: UTF8.self).contains("superseded"))
        // A key whose update is gone (deleted with its event) answers that the event is not found.
        try await f.pool.execute("DELETE FROM updates WHERE id = \(sent.id)")
        await #expect(throws: PipelineError.eventNotFound(event.id)) {
            try await f.post(event.id, ["home": 2], at: t0 + 10, key: "newer", body: "newer")
        }
    }

    /// Concurrent whole states without a time: ids, times and the latest state follow the order of arrival
    /// under the event's row lock, so the outbox row always points at the newest pending update.
    @Test func concurrentWholeStatesFollowTheOrderOfArrival() async throws {
        let f = try await PipelineFixture.make(maxConnections: 8)
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<24 {
                group.addTask {
                    _ = try await f.ingest.ingest(
                        eventID: event.id, UpdateDraft(occurredAt: nil), state: ["home": .int(Int64(index))],
                        response: PipelineFixture.answer)
                }
            }
            try await group.waitForAll()
        }
        let rows = try await f.pool.query("SELECT id, occurred_at, disposition FROM updates WHERE event_id = \(event.id) ORDER BY id")
        let times = try rows.map { try $0.decode(Date.self, column: "occurred_at") }
        #expect(rows.count == 24)
        #expect(try rows.allSatisfy { try $0.decode(String.self, column: "disposition") == "pending" })
        #expect(times == times.sorted())
        let newest = try rows.last!.decode(Int.self, column: "id")
        #expect(try await f.events.latestState(eventID: event.id).updateID == newest)
        #expect(try await f.scalar(Int.self, "SELECT update_id FROM outbox WHERE event_id = \(event.id)") == newest)
        #expect(try await f.scalar(Date.self, "SELECT latest_state_at FROM events WHERE id = \(event.id)") == times.last)
    }

    @Test func concurrentDuplicatesWaitAndReplay() async throws {
        let f = try await PipelineFixture.make(maxConnections: 8)
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        try await expectOneAcceptedAndOneAnswer(Array(repeating: event.id, count: 8)) { eventID in
            try await f.post(eventID, ["home": 1], at: self.t0, key: "same", body: "same")
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 1)
    }

    /// Duplicates that do not share an event's row lock wait for the first request's uncommitted key, then
    /// get its answer (the same body: the same request hash).
    @Test func concurrentDuplicatesOnOtherEventsWaitForTheKey() async throws {
        let f = try await PipelineFixture.make(maxConnections: 8)
        defer { f.pool.close() }
        var events: [EventRecord] = []
        for _ in 0..<8 { events.append(try await f.makeEvent()) }
        try await expectOneAcceptedAndOneAnswer(events.map(\.id)) { eventID in
            try await f.post(eventID, ["home": 1], at: self.t0, key: "shared", body: "shared")
        }
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM updates") == 1)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM outbox") == 1)
        #expect(try await f.scalar(Int.self, "SELECT count(*) FROM events WHERE latest_update_id IS NOT NULL") == 1)
    }

    /// Posts once per event id, all at once: exactly one is accepted, and all get the same answer.
    private func expectOneAcceptedAndOneAnswer(
        _ eventIDs: [Int],
        post: @escaping @Sendable (Int) async throws -> IngestResult
    ) async throws {
        let results = try await withThrowingTaskGroup(of: IngestResult.self) { group in
            for eventID in eventIDs { group.addTask { try await post(eventID) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.filter { if case .accepted = $0 { true } else { false } }.count == 1)
        #expect(Set(results.map(\.response)).count == 1)
    }

    @Test func olderInputIsSupersededAndLeavesLatestStateAlone() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let newer = try await f.postAccepted(event.id, ["home": 2], at: t0 + 10)
        let older = try await f.postAccepted(event.id, ["home": 1], at: t0 + 5)
        #expect(older.disposition == .superseded)
        let latest = try await f.events.latestState(eventID: event.id)
        #expect(latest.state == ["home": 2])
        #expect(latest.updateID == newer.id)
        #expect(try await f.scalar(Int.self, "SELECT update_id FROM outbox WHERE event_id = \(event.id)") == newer.id)
        #expect(try await f.scalar(Bool.self, "SELECT disposed_at IS NOT NULL FROM updates WHERE id = \(older.id)"))
        // An update older than the initial state is superseded too; an equal time is accepted.
        let same = try await f.postAccepted(event.id, ["home": 3], at: t0 + 10)
        #expect(same.disposition == .pending)
    }

    /// Without a time, an update takes the time of its arrival, never before the latest state, so it is
    /// never superseded (even behind a state stamped in the future).
    @Test func anUpdateWithoutATimeFollowsTheLatestState() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent()
        let now = try await f.scalar(Date.self, "SELECT now()")
        try await f.post(event.id, ["home": 1], at: now + 3600)
        let result = try await f.ingest.ingest(
            eventID: event.id, UpdateDraft(occurredAt: nil), contentState: { _ in ["home": 2] },
            response: { _ in StoredResponse(status: 202, body: Data()) })
        guard case .accepted(let update, _) = result else {
            Issue.record("not accepted")
            return
        }
        #expect(update.disposition == .pending)
        #expect(abs(update.occurredAt.timeIntervalSince(now + 3600)) < 0.001)
        #expect(try await f.events.latestState(eventID: event.id).state == ["home": 2])
        // With the latest state in the past, it takes the database's now.
        let other = try await f.makeEvent()
        let plain = try await f.ingest.ingest(
            eventID: other.id, UpdateDraft(occurredAt: nil), contentState: { _ in ["home": 1] },
            response: { _ in StoredResponse(status: 202, body: Data()) })
        guard case .accepted(let stamped, _) = plain else {
            Issue.record("not accepted")
            return
        }
        #expect(stamped.occurredAt >= now)
    }

    @Test func mergePatchesApplyUnderTheEventLock() async throws {
        let f = try await PipelineFixture.make(maxConnections: 6)
        defer { f.pool.close() }
        let event = try await f.makeEvent(state: ["home": 0, "away": 0])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<12 {
                group.addTask {
                    _ = try await f.ingest.ingest(
                        eventID: event.id, UpdateDraft(occurredAt: self.t0),  // equal times: none is superseded
                        contentState: { locked in
                            let home = locked.latestState?["home"]?.intValue ?? 0
                            return (locked.latestState ?? [:]).merging(patch: ["home": .int(home + 1)])
                        },
                        response: { _ in StoredResponse(status: 202, body: Data()) })
                }
            }
            try await group.waitForAll()
        }
        // Every read-modify-write saw the previous one's result: no lost increment.
        let states = try await f.pool.query("SELECT (content_state->>'home')::int AS home FROM updates ORDER BY id")
            .map { try $0.decode(Int.self, column: "home") }
        #expect(states == Array(1...12))
        #expect(try await f.events.latestState(eventID: event.id).state == ["home": 12, "away": 0])
    }
}

/// Events: create, read, list with keyset paging, state and counts.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineEventTests {
    @Test func createReadAndRefuseDuplicates() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let start = Date(timeIntervalSince1970: 1_800_000_000.123456)
        let event = try await f.events.create(
            NewEvent(
                appID: f.appID, externalID: "ars-che", kind: .match, attributeTypeID: f.typeID,
                attributes: ["home": "Arsenal"], storagePolicy: .notStored, startsAt: start, endsAt: start + 7200,
                topics: ["team:arsenal", "team:chelsea"], initialState: ["home": 0]))
        #expect(event.storagePolicy == .notStored)
        #expect(event.status == .scheduled)
        #expect(event.startsAt == start)
        #expect(event.latestState == ["home": 0])
        #expect(event.latestStateAt != nil)
        #expect(try await f.events.get(id: event.id) == event)
        #expect(try await f.events.get(appID: f.appID, externalID: "ars-che") == event)
        #expect(try await f.events.get(id: event.id, appID: f.appID + 1) == nil)
        await #expect(throws: PipelineError.externalIDTaken(appID: f.appID, externalID: "ars-che")) {
            try await f.makeEvent("ars-che")
        }
        await #expect(throws: PipelineError.self) {
            try await f.events.create(NewEvent(appID: f.appID, externalID: "x", kind: .other, attributeTypeID: f.typeID + 99, startsAt: start))
        }
        #expect(try await f.events.perform(.startsAtReached, eventID: event.id))
        #expect(try await f.events.perform(.startsAtReached, eventID: event.id) == false)
    }

    @Test func listFiltersAndPages() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        var made: [EventRecord] = []
        for index in 0..<7 {
            made.append(
                try await f.makeEvent(
                    "e\(index)", startsAt: base + Double(index % 3) * 60,
                    kind: index % 2 == 0 ? .match : .flight,
                    topics: index < 4 ? ["team:arsenal"] : []))
        }
        var seen: [Int] = []
        var cursor: String?
        repeat {
            let page = try await f.events.list(EventFilter(appID: f.appID), limit: 3, cursor: cursor)
            #expect(page.events.count <= 3)
            seen += page.events.map(\.id)
            cursor = page.nextCursor
        } while cursor != nil
        let expected = made.sorted { ($0.startsAt, $0.id) < ($1.startsAt, $1.id) }.map(\.id)
        #expect(seen == expected)
        #expect(try await f.events.list(EventFilter(kind: .flight)).events.count == 3)
        #expect(
            try await f.events.list(EventFilter(topic: "team:arsenal")).events.map(\.id)
                == made[0..<4].sorted { ($0.startsAt, $0.id) < ($1.startsAt, $1.id) }.map(\.id))
        #expect(try await f.events.list(EventFilter(startsAfter: base + 60, startsBefore: base + 120)).events.count == 2)
        #expect(try await f.events.list(EventFilter(status: .live)).events.isEmpty)
        await #expect(throws: PipelineError.invalidCursor) { try await f.events.list(cursor: "nonsense") }
    }
}
