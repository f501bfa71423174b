import APNs
import Foundation
import MarqueeCore
import MarqueeTestSupport
import Postgres
import Testing

@testable import MarqueeService
@testable import MarqueeStore

/// The audience's two jobs in process, on a real database, an injected clock and a recording device-push double:
/// each test reads as a transcript of what one turn of the worker loop did (claim, work a chunk) and what APNs got.
@Suite(.enabled(if: PipelineServiceFixture.available))
struct AudienceJobTests {
    static let alert: JSONValue = ["title": "Kick-off", "body": "Arsenal v Chelsea"]

    static func token(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "ab" + String(repeating: "0", count: 62 - hex.count) + hex
    }

    /// An installation that follows the event, with push-to-start token `token(index)`; its id.
    @discardableResult
    static func follower(_ f: PipelineServiceFixture, _ index: Int, os: String, of eventID: Int) async throws -> Int {
        let installations = InstallationRepository(pool: f.pool)
        let (record, _) = try await installations.register(
            InstallationRegistration(appID: f.appID, installationID: "fan-\(index)", pushToStartToken: token(index), osVersion: os),
            previousTokenRetention: 60)
        _ = try await installations.changeFollows(.replace, installation: record.id, appID: f.appID, events: [.id(eventID)], topics: [])
        return record.id
    }

    static func fanOut(
        _ f: PipelineServiceFixture, _ apns: RecordingDevicePushAPNs, instance: String = "one", sendWindow: Int = 1000,
        answerBatch: Int = 100, parking: CredentialsParking? = nil
    ) -> StartFanOut {
        var settings = StartSettings()
        settings.sendWindow = sendWindow
        var configuration = StartFanOutConfiguration(instance: instance, settings: settings)
        configuration.clockDrivesDatabase = true
        configuration.answerBatch = answerBatch
        return StartFanOut(
            pool: f.pool, apns: apns, configuration: configuration, metrics: StartMetrics(registry: MetricsRegistry()), logger: f.logger,
            parking: parking, clock: f.clock)
    }

    /// A manual run of the event, cut into its first chunk.
    static func run(_ f: PipelineServiceFixture, _ eventID: Int, _ job: StartFanOut) async throws {
        _ = try await StartRepository(pool: f.pool).createManualRun(
            appID: f.appID, eventID: eventID, topics: nil, alert: alert, createdBy: nil, channelWait: 60)
        try await job.advancePasses()
    }

    static func rows(_ f: PipelineServiceFixture, _ table: String) async throws -> Int {
        try await f.pool.query("SELECT count(*)::bigint AS n FROM \(identifier: table)")[0].decode(column: "n")
    }

    static func counts(_ f: PipelineServiceFixture, _ eventID: Int) async throws -> StartCounts {
        try #require(try await StartRepository(pool: f.pool).runs(eventID: eventID).first).counts
    }

    @Test func aRunStartsEachFollowerOnItsRouteAndRecordsEveryAnswer() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        let channel = try #require(try await f.openChannel(eventID: event.id).apnsChannelID)
        try await Self.follower(f, 1, os: "18.2", of: event.id)
        try await Self.follower(f, 2, os: "17.5", of: event.id)
        try await Self.follower(f, 3, os: "16.4", of: event.id)
        let apns = RecordingDevicePushAPNs()
        let job = Self.fanOut(f, apns)
        try await Self.run(f, event.id, job)

        let chunk = try #require(try await job.claimChunk())
        await job.work(chunk, shutdown: ShutdownSignal())
        #expect(Set(apns.pushes.map(\.token)) == [Self.token(1), Self.token(2)], "below 17.2 nothing is sent")
        let onChannel = try #require(apns.pushes.first { $0.token == Self.token(1) })
        let plain = try #require(apns.pushes.first { $0.token == Self.token(2) })
        #expect(onChannel.aps["event"] as? String == "start" && onChannel.aps["input-push-channel"] as? String == channel)
        #expect(plain.aps["event"] as? String == "start" && plain.aps["input-push-channel"] == nil && plain.priority == .high)
        let counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 2 && counts.notStartable == 1 && counts.unknown == 0)
        #expect(try await job.claimChunk() == nil, "the chunk is done")
    }

    @Test func aHolderThatDiesBetweenWindowsLeavesUnknownOnlyWhatItMarked() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        for index in 1...3 { try await Self.follower(f, index, os: "17.5", of: event.id) }
        let apns = RecordingDevicePushAPNs()
        let job = Self.fanOut(f, apns, instance: "two", sendWindow: 1)
        try await Self.run(f, event.id, job)
        // Another instance claims the chunk, marks its first window (and may have sent it), then dies.
        let repository = StartRepository(pool: f.pool)
        let dead = try #require(try await repository.claimChunk(instance: "dead", lease: 60, now: f.clock.now))
        let first = try #require(try await repository.members(of: dead, now: f.clock.now).first)
        let marked = try await repository.markWindow(
            dead,
            [PlannedStart(installation: first.candidate.installation, token: Self.token(1), osMajor: 17, route: .plain, plannedStartID: nil)])
        #expect(marked.starts.count == 1)
        #expect(try await job.claimChunk() == nil, "its lease holds")

        // Its lease runs out: this instance takes the chunk over.
        f.clock.advance(by: 61)
        let chunk = try #require(try await job.claimChunk())
        await job.work(chunk, shutdown: ShutdownSignal())
        #expect(Set(apns.pushes.map(\.token)) == [Self.token(2), Self.token(3)], "what the dead holder marked is never sent again")
        let counts = try await Self.counts(f, event.id)
        #expect(counts.unknown == 1 && counts.accepted == 2)
    }

    @Test func aHolderLostInTheMiddleOfAWindowCostsOnlyTheAnswersItHadNotWritten() async throws {
        // Answers are written as they arrive (Sql/0042), a batch of two here: a holder lost while two of its window's
        // requests are in flight has written the other four, and only the two are unknown. Their answers, arriving
        // after another instance took the chunk over, change nothing.
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        for index in 1...6 { try await Self.follower(f, index, os: "17.5", of: event.id) }
        let apns = RecordingDevicePushAPNs()
        apns.hold([Self.token(5), Self.token(6)])
        let lost = Self.fanOut(f, apns, instance: "lost", sendWindow: 6, answerBatch: 2)
        try await Self.run(f, event.id, lost)
        let chunk = try #require(try await lost.claimChunk())
        let holder = Task { await lost.work(chunk, shutdown: ShutdownSignal()) }
        let written = try await eventually {
            let rows = try await Self.rows(f, "starts")
            return apns.heldCount == 2 && rows == 4
        }
        #expect(written, "four answers written, two in flight")
        var counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 4 && counts.sending == 2)

        // The holder is taken for gone (its lease ran out): this instance settles what its window had not answered.
        f.clock.advance(by: 61)
        let apnsAfter = RecordingDevicePushAPNs()
        let taker = Self.fanOut(f, apnsAfter, instance: "taker")
        let again = try #require(try await taker.claimChunk())
        await taker.work(again, shutdown: ShutdownSignal())
        #expect(apnsAfter.pushes.isEmpty, "nothing the lost holder marked is sent again")
        counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 4 && counts.unknown == 2 && counts.sending == 0)

        // APNs answers the two late: the start stays unknown.
        apns.releaseHeld()
        await holder.value
        counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 4 && counts.unknown == 2)
        #expect(try await Self.rows(f, "start_windows") == 0)
    }

    @Test func twoRunsOfOneEventOnTwoInstancesStartEachDeviceOnce() async throws {
        // Two runs at once (an automatic one and an operator's), each worked by another instance, in windows of five:
        // every follower gets one start between them (`StartRepository.windowLock`).
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        for index in 1...40 { try await Self.follower(f, index, os: "17.5", of: event.id) }
        let apns = RecordingDevicePushAPNs()
        let one = Self.fanOut(f, apns, instance: "one", sendWindow: 5)
        let two = Self.fanOut(f, apns, instance: "two", sendWindow: 5)
        try await Self.run(f, event.id, one)
        try await Self.run(f, event.id, two)
        let first = try #require(try await one.claimChunk())
        let second = try #require(try await two.claimChunk())
        #expect(first.runID != second.runID)
        async let a: Void = one.work(first, shutdown: ShutdownSignal())
        async let b: Void = two.work(second, shutdown: ShutdownSignal())
        _ = await (a, b)
        let tokens = apns.pushes.map(\.token)
        #expect(tokens.count == 40 && Set(tokens).count == 40, "\(tokens.count) starts to \(Set(tokens).count) devices")
        let accepted = try await f.pool.query(
            "SELECT count(*)::bigint AS n FROM starts WHERE event_id = \(event.id) AND state = \(StartState.accepted)")[0]
        #expect(try accepted.decode(Int.self, column: "n") == 40)
    }

    @Test func aRefusedKeyParksTheRunWhichGoesOnOnceTheKeyWorks() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        for index in 1...4 { try await Self.follower(f, index, os: "17.5", of: event.id) }
        let apns = RecordingDevicePushAPNs { _, _ in RecordingDevicePushAPNs.refused(403, .invalidProviderToken) }
        let parking = CredentialsParking(
            pool: f.pool, policy: CredentialsParkPolicy(base: 60), metrics: f.metrics, logger: f.logger, clock: f.clock)
        let job = Self.fanOut(f, apns, sendWindow: 2, parking: parking)
        try await Self.run(f, event.id, job)

        let chunk = try #require(try await job.claimChunk())
        await job.work(chunk, shutdown: ShutdownSignal())
        #expect(apns.pushes.count == 2, "one window went, and the refusal parked the app")
        #expect(await parking.heldUntil(appID: f.appID) != nil)
        var counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 0 && counts.rejected.isEmpty && counts.planned == 2, "a refused key rejects no start")
        #expect(try await job.claimChunk() == nil, "the chunk waits")

        // The key works again and the park's window ends: the probe goes, succeeds, and the run goes on.
        apns.answer { _, _ in RecordingDevicePushAPNs.accepted }
        f.clock.advance(by: 61)
        let again = try #require(try await job.claimChunk())
        await job.work(again, shutdown: ShutdownSignal())
        counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 4 && counts.planned == 0)
        #expect(apns.pushes.count == 6)
        #expect(await parking.heldUntil(appID: f.appID) == nil, "the success ended the park")
    }

    @Test func aThrottledStartGoesOnceMoreAfterItsDelay() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        for index in 1...2 { try await Self.follower(f, index, os: "17.5", of: event.id) }
        let throttled = Self.token(1)
        let apns = RecordingDevicePushAPNs { token, sent in
            token == throttled && sent == 1 ? RecordingDevicePushAPNs.refused(429, .tooManyRequests) : RecordingDevicePushAPNs.accepted
        }
        let job = Self.fanOut(f, apns)
        try await Self.run(f, event.id, job)
        await job.work(try #require(try await job.claimChunk()), shutdown: ShutdownSignal())
        var counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 1 && counts.planned == 1)
        #expect(try await job.claimChunk() == nil, "the throttled token waits")

        f.clock.advance(by: 31)
        await job.work(try #require(try await job.claimChunk()), shutdown: ShutdownSignal())
        counts = try await Self.counts(f, event.id)
        #expect(counts.accepted == 2 && counts.planned == 0)
        #expect(apns.pushes.filter { $0.token == throttled }.count == 2)
    }

    @Test func aLateFollowerIsStartedByTheNextPass() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        try await Self.follower(f, 1, os: "17.5", of: event.id)
        let apns = RecordingDevicePushAPNs()
        let job = Self.fanOut(f, apns)
        try await Self.run(f, event.id, job)
        await job.work(try #require(try await job.claimChunk()), shutdown: ShutdownSignal())
        try await job.advancePasses()  // the first pass is done: the run rolls
        #expect(try await StartRepository(pool: f.pool).runs(eventID: event.id).first?.state == .rolling)

        try await Self.follower(f, 2, os: "17.5", of: event.id)
        try await job.advancePasses()
        #expect(try await job.claimChunk() == nil, "the next pass is a minute later")
        f.clock.advance(by: 61)
        try await job.advancePasses()  // begins the pass
        try await job.advancePasses()  // cuts its chunk
        await job.work(try #require(try await job.claimChunk()), shutdown: ShutdownSignal())
        #expect(apns.pushes.map(\.token) == [Self.token(1), Self.token(2)], "each once")
    }

    @Test func mirroringSendsTheNewestStateToEachTokenActivityAndParksOnARefusedKey() async throws {
        let f = try await PipelineServiceFixture.make()
        defer { f.pool.close() }
        // An event with no channel: its updates go to its token activities by the token route.
        let event = try await f.makeEvent(startsAt: f.clock.now.addingTimeInterval(3600))
        let installations = InstallationRepository(pool: f.pool)
        for index in 1...2 {
            let installation = try await Self.follower(f, index, os: "17.4", of: event.id)
            _ = try await installations.registerActivity(
                installation: installation, appID: f.appID, activityID: "act-\(index)", event: .id(event.id), attributeType: "MatchAttributes",
                pushType: .token, pushToken: "cd" + String(repeating: "\(index)", count: 62))
        }
        let apns = RecordingDevicePushAPNs()
        let parking = CredentialsParking(
            pool: f.pool, policy: CredentialsParkPolicy(base: 60), metrics: f.metrics, logger: f.logger, clock: f.clock)
        let job = MirrorService(
            pool: f.pool, apns: apns, instance: "m1", expiration: ExpirationPolicy(), settings: ChunkJobSettings(sendWindow: 10),
            metrics: MirrorMetrics(registry: MetricsRegistry()), logger: f.logger, parking: parking, clock: f.clock, clockDrivesDatabase: true)
        func turn() async throws {
            try await job.beginDueWork()
            try await job.advancePasses()
            while let chunk = try await job.claimChunk() { await job.work(chunk, shutdown: ShutdownSignal()) }
        }

        try await f.post(event.id, ["home": 1, "away": 0], priority: .high)
        try await turn()
        #expect(apns.pushes.count == 2 && apns.pushes.allSatisfy { $0.token.hasPrefix("cd") })
        let first = try #require(apns.pushes.first?.aps)
        #expect(first["event"] as? String == "update" && (first["content-state"] as? [String: Any])?["home"] as? Int == 1)
        try await turn()
        #expect(apns.pushes.count == 2, "no token is sent the same state twice")

        apns.answer { _, _ in RecordingDevicePushAPNs.refused(403, .badCertificateEnvironment) }
        try await f.post(event.id, ["home": 2, "away": 0], priority: .high)
        try await turn()
        #expect(await parking.heldUntil(appID: f.appID) != nil, "a refused key parks mirroring as it parks broadcasts")
        let refused = apns.pushes.count
        try await turn()
        #expect(apns.pushes.count == refused, "nothing goes while parked")
        #expect(try await MirrorRepository(pool: f.pool).progress(eventID: event.id).behind == 2)
    }
}
