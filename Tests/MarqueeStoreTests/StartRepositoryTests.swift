import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// Start runs, chunks and starts on a real PostgreSQL (Sql/0025).
@Suite(.enabled(if: TestDatabase.available))
struct StartRepositoryTests {
    static func token(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "ab" + String(repeating: "0", count: 62 - hex.count) + hex
    }

    /// `count` installations on iOS 18 following `topic`; their row ids.
    static func followers(_ count: Int, topic: String, _ f: PipelineFixture) async throws -> [Int] {
        var ids: [Int] = []
        let installations = InstallationRepository(pool: f.pool)
        for index in 1...count {
            let (record, _) = try await installations.register(
                InstallationRegistration(appID: f.appID, installationID: "i-\(index)", pushToStartToken: token(index), osVersion: "18.1"),
                previousTokenRetention: 60)
            _ = try await installations.changeFollows(.replace, installation: record.id, appID: f.appID, events: [], topics: [topic])
            ids.append(record.id)
        }
        return ids
    }

    static let alert: JSONValue = ["title": "Kick-off", "body": "Arsenal v Chelsea"]

    func event(_ f: PipelineFixture, startsIn: TimeInterval, alert: JSONValue? = StartRepositoryTests.alert, lead: Int? = nil) async throws -> Int {
        try await f.events.create(
            NewEvent(
                appID: f.appID, externalID: "m-\(UUID().uuidString.prefix(8))", kind: .match, attributeTypeID: f.typeID,
                startsAt: Date().addingTimeInterval(startsIn), endsAt: Date().addingTimeInterval(startsIn + 7200), topics: ["team:ars"],
                initialState: ["home": 0], initialStateAt: nil, audienceLead: lead, startAlert: alert)
        ).id
    }

    /// A manual run of a new event over `followers` new installations, its first chunk (of `chunkSize`) cut and
    /// claimed by "one".
    func runWithClaimedChunk(_ followers: Int, _ f: PipelineFixture, chunkSize: Int = 10) async throws -> (
        repository: StartRepository, ids: [Int], eventID: Int, run: Int, chunk: ClaimedStartChunk
    ) {
        let repository = StartRepository(pool: f.pool)
        let ids = try await Self.followers(followers, topic: "team:ars", f)
        let eventID = try await event(f, startsIn: 7200)
        let run = try await repository.createManualRun(appID: f.appID, eventID: eventID, topics: nil, alert: nil, createdBy: nil, channelWait: 60)
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: chunkSize, cutAhead: 1) { StartRunPlanner().next($0) }
        return (repository, ids, eventID, run, try #require(try await repository.claimChunk(instance: "one", lease: 60)))
    }

    @Test func automaticRunsAreCreatedOnceWhenDueAndSkippedWhenLateOrWithoutAnAlert() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = StartRepository(pool: f.pool)
        let due = try await event(f, startsIn: 300)
        let notYet = try await event(f, startsIn: 3600)
        let late = try await event(f, startsIn: -7200)
        let silent = try await event(f, startsIn: 300, alert: nil)
        let ownLead = try await event(f, startsIn: 3000, lead: 3600)
        let created = try await repository.createDueAutomaticRuns(lead: 600, maxLateness: 1800, channelWait: 60)
        var byEvent: [Int: CreatedStartRun] = [:]
        for run in created { byEvent[run.eventID] = run }
        #expect(byEvent[due]?.state == .running && byEvent[ownLead]?.state == .running)
        #expect(byEvent[notYet] == nil)
        #expect(byEvent[late]?.state == .skipped && byEvent[late]?.skipReason == .late)
        #expect(byEvent[silent]?.state == .skipped && byEvent[silent]?.skipReason == .noAlert)
        #expect(try await repository.createDueAutomaticRuns(lead: 600, maxLateness: 1800, channelWait: 60).isEmpty, "once per event")
        await #expect(throws: PipelineError.eventNotFound(999_999)) {
            _ = try await repository.createManualRun(appID: nil, eventID: 999_999, topics: nil, alert: nil, createdBy: nil, channelWait: 60)
        }
    }

    @Test func chunksAreCutInKeysetOrderClaimedOnceAndAStartGoesOncePerEventAcrossRuns() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = StartRepository(pool: f.pool)
        let ids = try await Self.followers(25, topic: "team:ars", f)
        let eventID = try await event(f, startsIn: 7200)
        let first = try await repository.createManualRun(appID: f.appID, eventID: eventID, topics: nil, alert: nil, createdBy: "k", channelWait: 60)
        let planner = StartRunPlanner(lateStartInterval: 60)
        let step = try await repository.advance(runID: first, lateStartCutoff: 900, chunkSize: 10, cutAhead: 2) { planner.next($0) }
        #expect(step?.step == .cutChunk)
        // Two cut ahead, then the third once one is claimed.
        let a = try #require(try await repository.claimChunk(instance: "one", lease: 60))
        #expect(a.after == 0 && a.through == ids[9])
        _ = try await repository.advance(runID: first, lateStartCutoff: 900, chunkSize: 10, cutAhead: 2) { planner.next($0) }
        let b = try #require(try await repository.claimChunk(instance: "two", lease: 60))
        let c = try #require(try await repository.claimChunk(instance: "two", lease: 60))
        #expect(b.after == ids[9] && b.through == ids[19] && c.after == ids[19] && c.through == ids[24])
        #expect(try await repository.claimChunk(instance: "three", lease: 60) == nil, "a held chunk is nobody else's")

        let members = try await repository.members(of: a)
        #expect(members.map(\.candidate.installation) == Array(ids[0..<10]))
        let planned = members.map {
            PlannedStart(installation: $0.candidate.installation, token: $0.candidate.token!, osMajor: 18, route: .channel, plannedStartID: nil)
        }
        let marked = try await repository.markWindow(a, planned)
        #expect(marked.id != nil && marked.starts.count == 10 && marked.starts.allSatisfy { $0.attempt == 1 && $0.retriedStartID == nil })
        #expect(try await f.count("starts") == 0, "a window's first sends are written once, when answered")
        // A second run of the same event, racing: its starts of the same installations are left out.
        let second = try await repository.createManualRun(appID: f.appID, eventID: eventID, topics: nil, alert: nil, createdBy: "k", channelWait: 60)
        _ = try await repository.advance(runID: second, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { planner.next($0) }
        let other = try #require(try await repository.claimChunk(instance: "four", lease: 60))
        #expect(other.runID == second)
        #expect(try await repository.markWindow(other, planned).starts.isEmpty, "the event's open window names them")

        // Answers: one accepted, one throttled (planned again), the rest left in the window by a holder that died.
        try await repository.record(
            a, window: marked,
            [
                StartAnswerRecord(start: marked.starts[0], state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil),
                StartAnswerRecord(
                    start: marked.starts[1], state: .planned, reason: "TooManyRequests", status: 429, retryAfter: 30, apnsUniqueID: nil),
            ], last: false)
        #expect(try await repository.members(of: other).filter(\.candidate.startedForEvent).map(\.candidate.installation) == [ids[0]])
        #expect(try await repository.settleAbandoned(a) == 8)
        #expect(try await f.count("start_windows") == 0)
        // Each start went out or may have, except the throttled one, which APNs proved it did not take: the second run
        // may start it (and the first run's retry is then left out).
        #expect(try await repository.markWindow(other, planned).starts.map(\.installation) == [marked.starts[1].installation])
        let run = try #require(try await repository.runs(eventID: eventID).first { $0.id == first })
        #expect(run.counts.accepted == 1 && run.counts.planned == 1 && run.counts.unknown == 8)
        // The last acceptance is the open chunk's until the chunk is done, then the run's own.
        let accepted = try #require(run.lastAcceptedAt)
        #expect(
            try await f.pool.query("SELECT last_accepted_at FROM start_runs WHERE id = \(first)")[0].decode(Date?.self, column: "last_accepted_at")
                == nil)
        try await repository.finish(a, instance: "one")
        #expect(
            try await f.pool.query("SELECT last_accepted_at FROM start_runs WHERE id = \(first)")[0].decode(Date?.self, column: "last_accepted_at")
                == accepted)
        #expect(try await repository.runs(eventID: eventID).first { $0.id == first }?.lastAcceptedAt == accepted)
        let retry = try #require(try await repository.members(of: a).first { $0.candidate.installation == marked.starts[1].installation })
        #expect(retry.candidate.runStateForToken == .planned && retry.plannedStartID != nil && retry.candidate.retryAt != nil)
        #expect(!retry.candidate.startedForEvent, "a planned start has not started the installation")
    }

    @Test func aRunFinishedWithAChunkOpenKeepsThatChunksLastAcceptance() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let (repository, _, eventID, run, chunk) = try await runWithClaimedChunk(3, f)
        let member = try #require(try await repository.members(of: chunk).first)
        let marked = try await repository.markWindow(
            chunk,
            [
                PlannedStart(
                    installation: member.candidate.installation, token: member.candidate.token!, osMajor: 18, route: .channel, plannedStartID: nil)
            ])
        try await repository.record(
            chunk, window: marked,
            [StartAnswerRecord(start: marked.starts[0], state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil)], last: true)
        let accepted = try #require(try await repository.runs(eventID: eventID).first?.lastAcceptedAt)
        // The run's own step ends it (stopped) while the chunk is still held: the chunk's time moves to the run.
        let step = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .finish(.stopped) }
        #expect(step?.step == .finish(.stopped))
        #expect(
            try await f.pool.query("SELECT last_accepted_at FROM start_runs WHERE id = \(run)")[0].decode(Date?.self, column: "last_accepted_at")
                == accepted)
        #expect(try await repository.runs(eventID: eventID).first?.lastAcceptedAt == accepted)
    }

    @Test func aRunsCountsAreItsDoneChunksKeptCountsAndItsOpenChunksStartsAcrossPasses() async throws {
        // Sql/0033: a done chunk keeps the counts of the starts it wrote; a later pass's chunk over the same range
        // counts only its own, so the report matches a count over every start of the run.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let (repository, _, eventID, run, first) = try await runWithClaimedChunk(3, f)
        func sendAll(_ chunk: ClaimedStartChunk, answers: [StartState]) async throws {
            let members = try await repository.members(of: chunk)
            let marked = try await repository.markWindow(
                chunk,
                members.map {
                    PlannedStart(
                        installation: $0.candidate.installation, token: $0.candidate.token!, osMajor: 18, route: .channel, plannedStartID: nil)
                })
            try #require(marked.starts.count == answers.count)
            try await repository.record(
                chunk, window: marked,
                zip(marked.starts, answers).map {
                    StartAnswerRecord(
                        start: $0, state: $1, reason: $1 == .rejected ? "BadDeviceToken" : nil, status: $1 == .accepted ? 200 : 400,
                        retryAfter: nil,
                        apnsUniqueID: nil)
                }, last: true)
        }
        func counted() async throws -> StartCounts { try #require(try await repository.runs(eventID: eventID).first).counts }
        func countedOverEveryStart() async throws -> [String: Int] {
            var groups: [String: Int] = [:]
            for row in try await f.pool.query("SELECT state, count(*)::bigint AS n FROM starts WHERE run_id = \(run) GROUP BY 1") {
                groups[try row.decode(String.self, column: "state")] = try row.decode(Int.self, column: "n")
            }
            return groups
        }
        try await sendAll(first, answers: [.accepted, .accepted, .rejected])
        #expect(try await counted().accepted == 2, "an open chunk's starts are counted")
        try await repository.finish(first, instance: "one")
        #expect(
            try await f.pool.query("SELECT counts IS NOT NULL AS kept FROM start_chunks WHERE id = \(first.id)")[0].decode(Bool.self, column: "kept"))
        // A late follower, and a second pass over the same range.
        let (late, _) = try await InstallationRepository(pool: f.pool).register(
            InstallationRegistration(appID: f.appID, installationID: "late", pushToStartToken: Self.token(99), osVersion: "18.1"),
            previousTokenRetention: 60)
        _ = try await InstallationRepository(pool: f.pool).changeFollows(
            .replace, installation: late.id, appID: f.appID, events: [], topics: ["team:ars"])
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .roll(nextPassAt: Date()) }
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .beginPass }
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .cutChunk }
        let second = try #require(try await repository.claimChunk(instance: "one", lease: 60))
        #expect(second.after == first.after, "the second pass covers the first one's range again")
        try await sendAll(second, answers: [.accepted])
        try await repository.finish(second, instance: "one")
        let counts = try await counted()
        #expect(counts.audience == 4 && counts.accepted == 3 && counts.rejected == ["BadDeviceToken": 1])
        #expect(try await countedOverEveryStart() == ["accepted": 3, "rejected": 1])
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .finish(.done) }
        #expect(try await counted().audience == 4)
    }

    @Test func eachStartIsWrittenOnceAsItsAnswerArrivesAndTheLastBatchClosesTheWindow() async throws {
        // Sql/0042: the window's mark is one row; each answer is one insert into starts, in batches, and no start's
        // row is written twice. Until its last batch, the window names the starts still to be answered.
        let f = try await PipelineFixture.make(maxConnections: 1)
        defer { f.pool.close() }
        let (repository, _, eventID, _, chunk) = try await runWithClaimedChunk(100, f, chunkSize: 100)
        let marked = try await repository.markWindow(
            chunk,
            try await repository.members(of: chunk).map {
                PlannedStart(installation: $0.candidate.installation, token: $0.candidate.token!, osMajor: 18, route: .channel, plannedStartID: nil)
            })
        try #require(marked.starts.count == 100)
        let answers = marked.starts.enumerated().map { index, start in
            index % 10 == 0
                ? StartAnswerRecord(start: start, state: .unknown, reason: nil, status: nil, retryAfter: nil, apnsUniqueID: nil)
                : StartAnswerRecord(start: start, state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: UUID().uuidString)
        }
        #expect(try await repository.record(chunk, window: marked, Array(answers[0..<60]), last: false) == 60)
        var counts = try #require(try await repository.runs(eventID: eventID).first).counts
        #expect(counts.accepted == 54 && counts.unknown == 6 && counts.sending == 40, "the window's unanswered starts are sending")
        #expect(try await f.count("start_windows") == 1)
        #expect(try await repository.record(chunk, window: marked, Array(answers[60...]), last: true) == 40)
        #expect(try await f.count("start_windows") == 0, "the last batch closes the window")
        counts = try #require(try await repository.runs(eventID: eventID).first).counts
        #expect(counts.accepted == 90 && counts.unknown == 10 && counts.sending == 0)
        // The pool's one connection reports its table counters as it goes idle; this makes the next report due.
        try await f.pool.execute("SELECT pg_stat_force_next_flush()")
        let counters = try await f.pool.query("SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'starts'")[0]
        #expect(try counters.decode(Int.self, column: "n_tup_ins") == 100)
        #expect(try counters.decode(Int.self, column: "n_tup_upd") == 0, "no start's row was written twice")
    }

    /// One activity per device per event, as the store reads it for the planner (StartPlannerTests has the decisions):
    /// an activity of the run's round holds back its installation whatever its state (active, pending, ended), a
    /// dismissal while its round ran holds back every later round, and an activity of an earlier round or dismissed
    /// after Marquee's end of its round holds nothing back. The mark reads the activities again: a registration
    /// committed between the members' read and the mark is skipped there, not started.
    @Test func eachActivityTheAppRegisteredHoldsBackItsRoundsStart() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = StartRepository(pool: f.pool)
        let installations = InstallationRepository(pool: f.pool)
        let ids = try await Self.followers(7, topic: "team:ars", f)
        let eventID = try await event(f, startsIn: 7200)
        func register(_ index: Int, startDate: Date? = nil) async throws {
            _ = try await installations.registerActivity(
                installation: ids[index], appID: f.appID, activityID: "act-\(index)", event: .id(eventID), attributeType: "MatchAttributes",
                pushType: .channel, pushToken: nil, startDate: startDate)
        }
        func end(_ index: Int, _ how: ActivityLifecycle.Event) async throws -> StoredActivity {
            try await installations.endActivity(installation: ids[index], appID: f.appID, activityID: "act-\(index)", event: how)
        }
        // Round 1: the fifth installation's activity, and the sixth's, which its user dismissed while it ran.
        try await register(4)
        try await register(5)
        #expect(try await end(5, .dismissed).userDismissed)
        // The event is postponed (a new audience round); the fifth's old activity is cleared after that end.
        try await f.pool.execute("UPDATE events SET audience_round = 2, postponed_at = now() WHERE id = \(eventID)")
        #expect(!(try await end(4, .dismissed).userDismissed))
        // Round 2: active, scheduled, ended by the app, dismissed by the user.
        try await register(0)
        try await register(1, startDate: Date().addingTimeInterval(3600))
        try await register(2)
        _ = try await end(2, .ended)
        try await register(3)
        _ = try await end(3, .dismissed)

        let run = try await repository.createManualRun(appID: f.appID, eventID: eventID, topics: nil, alert: nil, createdBy: nil, channelWait: 0)
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { StartRunPlanner().next($0) }
        let chunk = try #require(try await repository.claimChunk(instance: "one", lease: 60))
        let members = try await repository.members(of: chunk)
        #expect(members.map(\.candidate.installation) == ids)
        let facts = members.map { ($0.candidate.hasActivityOfRound, $0.candidate.dismissedByUser) }
        #expect(facts.map(\.0) == [true, true, true, true, false, false, false])
        #expect(facts.map(\.1) == [false, false, false, true, false, true, false])
        let planner = StartPlanner()
        let decisions = members.map { planner.decide($0.candidate, channelID: "Y2g=", channelWaitUntil: Date(), now: Date()) }
        #expect(
            decisions == [
                .skip(.hasActivity), .skip(.hasActivity), .skip(.hasActivity), .skip(.dismissed), .send(.channel), .skip(.dismissed),
                .send(.channel),
            ])
        try await repository.skip(
            chunk,
            zip(members, decisions).compactMap { member, decision in
                guard case .skip(let reason) = decision else { return nil }
                return SkippedStart(
                    installation: member.candidate.installation, token: member.candidate.token!, osMajor: 18, reason: reason, plannedStartID: nil)
            })
        // The race: the seventh's app registers the activity it started itself after the read, before the mark.
        try await register(6)
        let marked = try await repository.markWindow(
            chunk,
            [4, 6].map { PlannedStart(installation: ids[$0], token: members[$0].candidate.token!, osMajor: 18, route: .channel, plannedStartID: nil) }
        )
        #expect(marked.starts.map(\.installation) == [ids[4]])
        try await repository.finish(chunk, instance: "one")
        let counts = try #require(try await repository.runs(eventID: eventID).first).counts
        #expect(counts.skipped == ["has_activity": 4, "dismissed": 2])
        #expect(counts.sending == 1)
    }

    @Test func aRunsAdoptionCountsAcceptedStartsWhoseActivityCameWithinTenMinutes() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let (repository, ids, eventID, _, chunk) = try await runWithClaimedChunk(5, f)
        let marked = try await repository.markWindow(
            chunk,
            ids.enumerated().map {
                PlannedStart(installation: $1, token: Self.token($0 + 1), osMajor: 17 + $0 % 2, route: .plain, plannedStartID: nil)
            })
        try await repository.record(
            chunk, window: marked,
            marked.starts.map {
                $0.installation == ids[4]
                    ? StartAnswerRecord(start: $0, state: .rejected, reason: "BadDeviceToken", status: 400, retryAfter: nil, apnsUniqueID: nil)
                    : StartAnswerRecord(start: $0, state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil)
            }, last: true)
        let other = try await event(f, startsIn: 7200)
        func activity(_ installation: Int, _ name: String, event: Int, createdIn: TimeInterval = 0) async throws {
            try await f.pool.execute(
                """
                INSERT INTO activities (app_id, installation, activity_id, event_id, attribute_type, push_type, state, created_at, audience_round)
                VALUES (\(f.appID), \(installation), \(name), \(event), 'MatchAttributes', 'channel', 'active', now() + make_interval(secs => \(createdIn)), 1)
                """)
        }
        try await activity(ids[0], "a", event: eventID)
        try await activity(ids[0], "b", event: eventID)  // a second activity: still one adopted start
        try await activity(ids[1], "c", event: eventID)
        try await activity(ids[2], "d", event: eventID, createdIn: 1200)  // after the ten minutes
        try await activity(ids[3], "e", event: other)  // another event's
        try await activity(ids[4], "f", event: eventID)  // its start was rejected
        let report = try #require(try await repository.runs(eventID: eventID).first)
        #expect(report.adoption == ["17": 1, "18": 1])
    }

    @Test func aFinishedRunOfAnEventOverIsPurgedWithItsStarts() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let (repository, ids, eventID, run, chunk) = try await runWithClaimedChunk(3, f)
        try await repository.skip(
            chunk,
            ids.map {
                SkippedStart(
                    installation: $0, token: Self.token(1 + ids.firstIndex(of: $0)!), osMajor: 16, reason: .notStartable, plannedStartID: nil)
            })
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { _ in .finish(.done) }
        #expect(try await repository.purge(finishedBefore: Date().addingTimeInterval(60)) == 0, "the event is not over")
        try await f.pool.execute("UPDATE events SET status = 'ended' WHERE id = \(eventID)")
        #expect(try await repository.purge(finishedBefore: Date().addingTimeInterval(-60)) == 0, "finished too recently")
        #expect(try await repository.purge(finishedBefore: Date().addingTimeInterval(60), batch: 2) == 3)
        #expect(try await repository.runs(eventID: eventID).isEmpty)
    }

    @Test func membersCarryTheirStartsOfOtherEventsTheirActivitiesAndTheDirectFollowsWaiting() async throws {
        // What the planner's per-device limit and concurrency cap read (StartPlanner), from the database.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = StartRepository(pool: f.pool)
        let ids = try await Self.followers(3, topic: "team:ars", f)
        let started = try await event(f, startsIn: 7200)
        let ended = try await event(f, startsIn: 7200)
        // The first installation's start of `started` went out, and the second's of `ended`.
        for (eventID, installation) in [(started, ids[0]), (ended, ids[1])] {
            let run = try await repository.createManualRun(appID: f.appID, eventID: eventID, topics: nil, alert: nil, createdBy: nil, channelWait: 60)
            _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { StartRunPlanner().next($0) }
            let chunk = try #require(try await repository.claimChunk(instance: "one", lease: 60))
            try #require(chunk.runID == run)
            let token = try #require(try await repository.members(of: chunk).first { $0.candidate.installation == installation }?.candidate.token)
            let marked = try await repository.markWindow(
                chunk, [PlannedStart(installation: installation, token: token, osMajor: 18, route: .channel, plannedStartID: nil)])
            try #require(marked.starts.count == 1)
            try await repository.record(
                chunk, window: marked,
                [StartAnswerRecord(start: marked.starts[0], state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil)],
                last: true)
            try await repository.finish(chunk, instance: "one")
        }
        try await f.pool.execute("UPDATE events SET status = 'ended' WHERE id = \(ended)")
        let waiting = try await event(f, startsIn: 7800)
        let later = try await event(f, startsIn: 7200 + 86_400)  // does not overlap
        let withActivity = try await event(f, startsIn: 7200)
        try await f.pool.execute(
            """
            INSERT INTO activities (app_id, installation, activity_id, event_id, attribute_type, push_type, state, audience_round)
            VALUES (\(f.appID), \(ids[0]), 'a', \(withActivity), 'MatchAttributes', 'channel', 'active', 1)
            """)
        let installations = InstallationRepository(pool: f.pool)
        _ = try await installations.changeFollows(
            .replace, installation: ids[0], appID: f.appID, events: [.id(started), .id(waiting), .id(later), .id(withActivity)],
            topics: ["team:ars"])
        _ = try await installations.changeFollows(.replace, installation: ids[2], appID: f.appID, events: [.id(waiting)], topics: ["team:ars"])

        let this = try await event(f, startsIn: 7200)
        let run = try await repository.createManualRun(appID: f.appID, eventID: this, topics: nil, alert: nil, createdBy: nil, channelWait: 60)
        _ = try await repository.advance(runID: run, lateStartCutoff: 900, chunkSize: 10, cutAhead: 1) { StartRunPlanner().next($0) }
        let claimed = try #require(try await repository.claimChunk(instance: "one", lease: 60))
        try #require(claimed.runID == run)
        let facts = try await repository.members(of: claimed).map {
            [$0.candidate.startsLastHour, $0.candidate.concurrentEvents, $0.candidate.directFollowsWaiting]
        }
        #expect(facts == [[1, 2, 1], [1, 0, 0], [0, 0, 1]], "starts in the last hour, events concurrent, direct follows waiting")
    }

    @Test func removingTheAppTakesItsStartsWithIt() async throws {
        // A start has no foreign key to its run or event (Sql/0032); the app's installations take its starts.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let (repository, ids, _, _, chunk) = try await runWithClaimedChunk(2, f)
        let marked = try await repository.markWindow(
            chunk,
            ids.enumerated().map { PlannedStart(installation: $1, token: Self.token($0 + 1), osMajor: 18, route: .plain, plannedStartID: nil) })
        #expect(marked.starts.count == 2)
        try await repository.record(
            chunk, window: marked,
            [StartAnswerRecord(start: marked.starts[0], state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil)],
            last: false)
        #expect(try await f.count("starts") == 1)
        #expect(try await f.count("start_windows") == 1)
        #expect(try await AppRepository(pool: f.pool).remove(id: f.appID)?.id == f.appID)
        #expect(try await f.count("starts") == 0)
        #expect(try await f.count("start_windows") == 0)
        #expect(try await f.count("start_runs") == 0)
    }

    @Test func aRacedWindowQueuesTheLastBroadcastStateAgainWithoutItsAlert() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let repository = StartRepository(pool: f.pool)
        let event = try await f.makeEvent(startsAt: Date().addingTimeInterval(3600))
        let channel = try await f.openChannel(eventID: event.id)
        let apnsChannelID = try #require(channel.apnsChannelID)
        let goal = try await f.postAccepted(event.id, ["home": 1, "away": 0], at: Date())
        #expect(try await repository.broadcastLastStateAgain(eventID: event.id) == false, "nothing broadcast yet")
        // The dispatcher broadcast the goal with its alert at priority high, and its outbox row went.
        try await f.pool.execute(
            """
            UPDATE updates SET disposition = \(UpdateDisposition.broadcast.rawValue), disposed_at = now(),
                alert = \(#"{"title": "GOAL"}"#)::jsonb, priority = \(RequestedPriority.high.rawValue) WHERE id = \(goal.id)
            """)
        try await f.pool.execute("DELETE FROM outbox WHERE event_id = \(event.id)")
        try await f.pool.execute("UPDATE channels SET last_aps_timestamp = 42 WHERE id = \(channel.id)")
        let before = try await repository.channelAfterWindow(eventID: event.id, apnsChannelID: apnsChannelID)
        #expect(before.lastApsTimestamp == 42 && !before.broadcastInFlight)

        #expect(try await repository.broadcastLastStateAgain(eventID: event.id))
        let queued = try await f.pool.query(
            """
            SELECT u.id, u.content_state = \(#"{"home": 1, "away": 0}"#)::jsonb AS same_state, u.alert IS NULL AS silent, u.priority, u.disposition, u.api_key_id IS NULL AS by_marquee
            FROM outbox o JOIN updates u ON u.id = o.update_id WHERE o.event_id = \(event.id)
            """)
        try #require(queued.count == 1)
        #expect(try queued[0].decode(Int.self, column: "id") > goal.id)
        #expect(try queued[0].decode(Bool.self, column: "same_state"), "the broadcast's state")
        #expect(try queued[0].decode(Bool.self, column: "silent"), "the goal's alert is not sounded again")
        #expect(try queued[0].decode(String.self, column: "priority") == RequestedPriority.low.rawValue)
        #expect(try queued[0].decode(String.self, column: "disposition") == UpdateDisposition.pending.rawValue)
        #expect(try queued[0].decode(Bool.self, column: "by_marquee"))
        #expect(try await repository.broadcastLastStateAgain(eventID: event.id) == false, "queued work carries that state already")

        let claimed = try await OutboxRepository(pool: f.pool).claim(instance: "dispatcher", limit: 10, lease: 60)
        #expect(claimed.map(\.eventID) == [event.id])
        #expect(try await repository.channelAfterWindow(eventID: event.id, apnsChannelID: apnsChannelID).broadcastInFlight)

        // After an end, nothing goes again.
        try await f.pool.execute("DELETE FROM outbox WHERE event_id = \(event.id)")
        try await f.pool.execute(
            """
            UPDATE updates SET action = \(UpdateAction.end.rawValue), disposition = \(UpdateDisposition.broadcast.rawValue), disposed_at = now()
            WHERE event_id = \(event.id)
            """)
        #expect(try await repository.broadcastLastStateAgain(eventID: event.id) == false)
    }
}
