import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The installation registry and token hygiene on a real PostgreSQL (Sql/0023).
@Suite(.enabled(if: TestDatabase.available))
struct AudienceRegistryTests {
    static func token(_ byte: String) -> String { String(repeating: byte, count: 32) }

    func register(
        _ fixture: PipelineFixture, _ id: String, token: String? = nil, os: String? = nil, enabled: Bool? = nil,
        app: Int? = nil
    ) async throws -> (InstallationRecord, created: Bool) {
        try await InstallationRepository(pool: fixture.pool).register(
            InstallationRegistration(
                appID: app ?? fixture.appID, installationID: id, pushToStartToken: token, osVersion: os,
                liveActivitiesEnabled: enabled), previousTokenRetention: 7 * 86400)
    }

    @Test func aRegistrationWithoutATokenKeepsTheStoredOneAndARotationKeepsThePrevious() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let (first, created) = try await register(fixture, "inst-1", token: Self.token("a1"), os: "17.2.1")
        #expect(created)
        #expect(first.pushToStartToken?.token == Self.token("a1"))
        #expect(first.parsedOSVersion == OSVersion(major: 17, minor: 2, patch: 1))
        let (again, createdAgain) = try await register(fixture, "inst-1", os: "18.1")
        #expect(!createdAgain)
        #expect(again.pushToStartToken?.token == Self.token("a1"), "a registration without a token wipes nothing")
        #expect(again.parsedOSVersion == OSVersion(major: 18, minor: 1))
        #expect(again.pushToStartToken?.seenAt == first.pushToStartToken?.seenAt, "only a sent token is seen again")
        let (rotated, _) = try await register(fixture, "inst-1", token: Self.token("b2"))
        #expect(rotated.pushToStartToken?.token == Self.token("b2"))
        #expect(rotated.pushToStartToken?.previousToken == Self.token("a1"))
        #expect(rotated.pushToStartToken?.previousUntil != nil)
        #expect(rotated.osVersion == "18.1", "an absent osVersion keeps the stored one")
    }

    @Test func aReinstallMovesTheTokenToTheNewInstallation() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let (old, _) = try await register(fixture, "before-reinstall", token: Self.token("c3"))
        let (new, _) = try await register(fixture, "after-reinstall", token: Self.token("c3"))
        #expect(new.pushToStartToken?.token == Self.token("c3"))
        #expect(try await InstallationRepository(pool: fixture.pool).record(id: old.id).pushToStartToken == nil)
    }

    @Test func anInstallationIDUnderTwoAppsNeedsTheApp() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let other = try await fixture.pool.query(
            """
            INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path)
            VALUES ('com.example.scores', 'production', 'ABCDE12345', 'KEY1234567', 'keys/AuthKey.p8') RETURNING id
            """)[0].decode(Int.self, column: "id")
        let repository = InstallationRepository(pool: fixture.pool)
        _ = try await register(fixture, "shared-id")
        #expect(try await repository.find(installationID: "shared-id", appID: nil).appID == fixture.appID)
        _ = try await register(fixture, "shared-id", app: other)
        await #expect(throws: AudienceError.installationInSeveralApps("shared-id", apps: [fixture.appID, other].sorted())) {
            try await repository.find(installationID: "shared-id", appID: nil)
        }
        #expect(try await repository.find(installationID: "shared-id", appID: other).appID == other)
        await #expect(throws: AudienceError.installationNotFound("nobody")) { try await repository.find(installationID: "nobody", appID: nil) }
    }

    @Test func followsResolveToTheAudienceByEventAndByTopic() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let match = try await fixture.makeEvent("ars-che", topics: ["team:arsenal", "team:chelsea"])
        let other = try await fixture.makeEvent("liv-eve", topics: ["team:liverpool"])
        let repository = InstallationRepository(pool: fixture.pool)
        let byEvent = try await register(fixture, "by-event", token: Self.token("01"), os: "18.0").0
        let byTopic = try await register(fixture, "by-topic", token: Self.token("02"), os: "17.4").0
        let both = try await register(fixture, "both", token: Self.token("03")).0
        let elsewhere = try await register(fixture, "elsewhere", token: Self.token("04")).0
        let disabled = try await register(fixture, "disabled", token: Self.token("05"), enabled: false).0
        let tokenless = try await register(fixture, "tokenless").0
        _ = try await repository.changeFollows(.replace, installation: byEvent.id, appID: fixture.appID, events: [.id(match.id)], topics: [])
        _ = try await repository.changeFollows(.replace, installation: byTopic.id, appID: fixture.appID, events: [], topics: ["team:chelsea"])
        let followed = try await repository.changeFollows(
            .replace, installation: both.id, appID: fixture.appID,
            events: [.externalID("ars-che")], topics: ["team:arsenal", "team:arsenal"])
        #expect(Set(followed) == [.event(id: match.id, externalID: "ars-che"), .topic("team:arsenal")])
        _ = try await repository.changeFollows(
            .replace, installation: elsewhere.id, appID: fixture.appID, events: [.id(other.id)],
            topics: ["team:liverpool"])
        for installation in [disabled.id, tokenless.id] {
            _ = try await repository.changeFollows(.add, installation: installation, appID: fixture.appID, events: [.id(match.id)], topics: [])
        }
        let audience = AudienceRepository(pool: fixture.pool)
        let everyone = try await audience.page(eventID: match.id)
        #expect(everyone.members.map(\.installationID) == ["by-event", "by-topic", "both"])
        #expect(everyone.members.first?.osVersion == OSVersion(major: 18))
        #expect(everyone.nextAfter == nil)
        // Keyset pages of one read follows: the disabled and tokenless ones take a place in a page, not in the audience.
        var seen: [String] = []
        var after = 0
        var pages = 0
        while true {
            let page = try await audience.page(eventID: match.id, after: after, limit: 1)
            seen += page.members.map(\.installationID)
            pages += 1
            guard let next = page.nextAfter else { break }
            after = next
        }
        #expect(seen == ["by-event", "by-topic", "both"])
        #expect(pages == 6, "five followers, and one empty page at the end")
        // Removing a follow takes the installation out.
        _ = try await repository.changeFollows(.remove, installation: byTopic.id, appID: fixture.appID, events: [], topics: ["team:chelsea"])
        #expect(try await audience.page(eventID: match.id).members.map(\.installationID) == ["by-event", "both"])
    }

    @Test func followsAreLimitedAndUnknownEventsChangeNothing() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("known")
        let repository = InstallationRepository(pool: fixture.pool)
        let installation = try await register(fixture, "limited").0
        _ = try await repository.changeFollows(
            .replace, installation: installation.id, appID: fixture.appID, events: [.id(event.id)],
            topics: ["team:a"])
        await #expect(throws: AudienceError.unknownEvent(.externalID("missing"), index: 1)) {
            try await repository.changeFollows(
                .replace, installation: installation.id, appID: fixture.appID,
                events: [.id(event.id), .externalID("missing")], topics: [])
        }
        let topics = (0..<500).map { "topic:\($0)" }
        await #expect(throws: AudienceError.tooManyFollows(count: 502, limit: 500)) {
            try await repository.changeFollows(.add, installation: installation.id, appID: fixture.appID, events: [], topics: topics)
        }
        #expect(try await repository.record(id: installation.id).follows.count == 2, "a refused change leaves the set as it was")
        #expect(
            try await repository.changeFollows(
                .replace, installation: installation.id, appID: fixture.appID, events: [],
                topics: topics
            ).count == 500)
    }

    @Test func anEndedActivityIsATombstoneThatALateTokenCannotRevive() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let other = try await fixture.makeEvent("other")
        let repository = InstallationRepository(pool: fixture.pool)
        let installation = try await register(fixture, "phone").0
        func put(_ activity: String, token: String?, event: Int) async throws -> (StoredActivity, created: Bool) {
            try await repository.registerActivity(
                installation: installation.id, appID: fixture.appID, activityID: activity, event: .id(event),
                attributeType: "MatchAttributes", pushType: token == nil ? .channel : .token, pushToken: token)
        }
        let (first, created) = try await put("act-1", token: Self.token("d1"), event: event.id)
        #expect(created && first.state == .active && first.pushToken == Self.token("d1"))
        let (rotated, createdAgain) = try await put("act-1", token: Self.token("d2"), event: event.id)
        #expect(!createdAgain && rotated.pushToken == Self.token("d2"))
        await #expect(throws: AudienceError.activityEventChanged("act-1", storedEventID: event.id)) {
            try await put("act-1", token: Self.token("d2"), event: other.id)
        }
        let ended = try await repository.endActivity(installation: installation.id, appID: fixture.appID, activityID: "act-1", event: .ended)
        #expect(ended.state == .ended && ended.endedAt != nil)
        // The ended activity's token stream yields again: refused, and the next activity's token is untouched.
        _ = try await put("act-2", token: Self.token("e1"), event: event.id)
        await #expect(throws: AudienceError.activityEnded("act-1", .ended)) { try await put("act-1", token: Self.token("d3"), event: event.id) }
        let record = try await repository.record(id: installation.id)
        #expect(record.activities.map(\.activityID) == ["act-2", "act-1"])
        #expect(record.activities.map(\.pushToken) == [Self.token("e1"), Self.token("d2")])
        let dismissed = try await repository.endActivity(installation: installation.id, appID: fixture.appID, activityID: "act-1", event: .dismissed)
        #expect(dismissed.state == .dismissed && dismissed.endedAt == ended.endedAt)
        #expect(
            try await repository.endActivity(installation: installation.id, appID: fixture.appID, activityID: "act-1", event: .ended).state
                == .dismissed)
        let channel = try await put("act-3", token: nil, event: event.id).0
        #expect(channel.pushType == .channel && channel.pushToken == nil)
        // The ended activity was dismissed after it ended: iOS clearing it, not the user holding back starts.
        #expect(!dismissed.userDismissed)
    }

    @Test func aDismissalOfAnActivityNeverRegisteredIsATombstoneOfItsEvent() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let repository = InstallationRepository(pool: fixture.pool)
        let installation = try await register(fixture, "phone").0
        await #expect(throws: AudienceError.activityNotFound("pushed-1")) {
            try await repository.endActivity(installation: installation.id, appID: fixture.appID, activityID: "pushed-1", event: .dismissed)
        }
        let tombstone = try await repository.endActivity(
            installation: installation.id, appID: fixture.appID, activityID: "pushed-1", event: .dismissed, eventReference: .id(event.id))
        #expect(tombstone.state == .dismissed && tombstone.eventID == event.id && tombstone.endedAt != nil)
        #expect(tombstone.userDismissed && tombstone.audienceRound == 1 && tombstone.pushType == .channel)
        // A repeated report changes nothing.
        let again = try await repository.endActivity(
            installation: installation.id, appID: fixture.appID, activityID: "pushed-1", event: .dismissed, eventReference: .id(event.id))
        #expect(again == tombstone)
        // A scheduled activity is pending until iOS starts it, then active.
        let start = Date().addingTimeInterval(3600)
        let (pending, _) = try await repository.registerActivity(
            installation: installation.id, appID: fixture.appID, activityID: "scheduled-1", event: .id(event.id),
            attributeType: "MatchAttributes", pushType: .channel, pushToken: nil, startDate: start)
        #expect(pending.state == .pending && pending.endedAt == nil)
        #expect(abs(pending.startDate!.timeIntervalSince(start)) < 0.001)
        let (running, _) = try await repository.registerActivity(
            installation: installation.id, appID: fixture.appID, activityID: "scheduled-1", event: .id(event.id),
            attributeType: "MatchAttributes", pushType: .channel, pushToken: nil)
        #expect(running.state == .active && running.startDate == pending.startDate)
    }

    @Test func aGoneTokenIsInvalidatedOnlyWhenNotRegisteredAfterAPNsTime() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let hygiene = TokenHygieneRepository(pool: fixture.pool)
        let installations = InstallationRepository(pool: fixture.pool)
        let kept = try await register(fixture, "came-back", token: Self.token("f1")).0
        let seen = try #require(kept.pushToStartToken?.seenAt)
        let before = Int64((seen.timeIntervalSince1970 - 60) * 1000)
        #expect(
            try await hygiene.refuse(
                appID: fixture.appID, token: Self.token("f1"), kind: .pushToStart,
                refusal: .gone(reason: "Unregistered", apnsTimestampMilliseconds: before)) == .kept)
        #expect(try await installations.record(id: kept.id).pushToStartToken?.token == Self.token("f1"))
        let after = Int64((seen.timeIntervalSince1970 + 60) * 1000)
        #expect(
            try await hygiene.refuse(
                appID: fixture.appID, token: Self.token("f1"), kind: .pushToStart,
                refusal: .gone(reason: "Unregistered", apnsTimestampMilliseconds: after)) == .invalidated)
        #expect(try await installations.record(id: kept.id).pushToStartToken == nil)
        #expect(
            try await hygiene.refuse(
                appID: fixture.appID, token: Self.token("f1"), kind: .pushToStart,
                refusal: .gone(reason: "Unregistered", apnsTimestampMilliseconds: after)) == .unmatched)
        let rows = try await fixture.pool.query("SELECT outcome, apns_timestamp_ms FROM token_invalidations ORDER BY id")
        #expect(try rows.map { try $0.decode(String.self, column: "outcome") } == ["kept", "invalidated", "unmatched"])
        #expect(try rows[0].decode(Int64.self, column: "apns_timestamp_ms") == before)
    }

    @Test func aBadDeviceTokenIsFlaggedNotDeletedAndLeavesTheAudience() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let installations = InstallationRepository(pool: fixture.pool)
        let phone = try await register(fixture, "phone", token: Self.token("ab")).0
        _ = try await installations.changeFollows(.add, installation: phone.id, appID: fixture.appID, events: [.id(event.id)], topics: [])
        let hygiene = TokenHygieneRepository(pool: fixture.pool)
        #expect(try await hygiene.refuse(appID: fixture.appID, token: Self.token("ab"), kind: .pushToStart, refusal: .badDeviceToken) == .refused)
        let flagged = try await installations.record(id: phone.id).pushToStartToken
        #expect(flagged?.token == Self.token("ab") && flagged?.refusedReason == "BadDeviceToken")
        #expect(try await AudienceRepository(pool: fixture.pool).page(eventID: event.id).members.isEmpty)
        // The same token sent again stays refused; a new one clears the flag.
        #expect(try await register(fixture, "phone", token: Self.token("ab")).0.pushToStartToken?.refusedReason == "BadDeviceToken")
        #expect(try await register(fixture, "phone", token: Self.token("ac")).0.pushToStartToken?.refusedReason == nil)
        #expect(try await AudienceRepository(pool: fixture.pool).page(eventID: event.id).members.count == 1)
        #expect(try await hygiene.refuse(appID: fixture.appID, token: Self.token("ac"), kind: .pushToStart, refusal: .notForTopic) == .refused)
        #expect(try await installations.record(id: phone.id).topicRefusedAt != nil)
        // What a log may name: the app's installation id, not the row's number (issue 48).
        let recorded = try await hygiene.recordRefusal(appID: fixture.appID, token: Self.token("ac"), kind: .pushToStart, refusal: .badDeviceToken)
        #expect(recorded == RecordedTokenRefusal(outcome: .refused, installationID: "phone"), "\(recorded)")
        let stranger = try await hygiene.recordRefusal(appID: fixture.appID, token: Self.token("ff"), kind: .pushToStart, refusal: .badDeviceToken)
        #expect(stranger.installationID == nil && stranger.outcome == .unmatched)
    }

    @Test func eraseKeepsOnlyTheTokensHash() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let installations = InstallationRepository(pool: fixture.pool)
        let phone = try await register(fixture, "erase-me", token: Self.token("cd")).0
        _ = try await installations.changeFollows(.add, installation: phone.id, appID: fixture.appID, events: [.id(event.id)], topics: ["t"])
        _ = try await installations.registerActivity(
            installation: phone.id, appID: fixture.appID, activityID: "a", event: .id(event.id),
            attributeType: "MatchAttributes", pushType: .token, pushToken: Self.token("ce"))
        try await TokenHygieneRepository(pool: fixture.pool).refuse(
            appID: fixture.appID, token: Self.token("cd"), kind: .pushToStart,
            refusal: .badDeviceToken)
        #expect(try await installations.erase(installation: phone.id))
        for table in ["installations", "follows", "activities"] {
            #expect(
                try await fixture.pool.query("SELECT count(*)::bigint AS n FROM \(identifier: table)")[0].decode(Int.self, column: "n") == 0,
                "\(table)")
        }
        let row = try await fixture.pool.query("SELECT token, installation, encode(token_sha256, 'hex') AS hash FROM token_invalidations")[0]
        #expect(try row.decode(String?.self, column: "token") == nil && row.decode(Int?.self, column: "installation") == nil)
        #expect(try row.decode(String.self, column: "hash").count == 64)
    }

    @Test func stalePushToStartTokensArePruned() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let installations = InstallationRepository(pool: fixture.pool)
        let stale = try await register(fixture, "stale", token: Self.token("11")).0
        let fresh = try await register(fixture, "fresh", token: Self.token("12")).0
        try await fixture.pool.execute(
            """
            UPDATE installations SET token_seen_at = now() - interval '61 days' WHERE id = \(stale.id)
            """)
        #expect(try await TokenHygieneRepository(pool: fixture.pool).prune(notSeenFor: 60 * 86400, batch: 1) == 1)
        #expect(try await installations.record(id: stale.id).pushToStartToken == nil)
        #expect(try await installations.record(id: fresh.id).pushToStartToken != nil)
    }

    @Test func oldTokenRefusalsArePurged() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let hygiene = TokenHygieneRepository(pool: fixture.pool)
        for byte in ["31", "32", "33"] {
            try await hygiene.refuse(appID: fixture.appID, token: Self.token(byte), kind: .pushToStart, refusal: .badDeviceToken)
        }
        try await fixture.pool.execute("UPDATE token_invalidations SET recorded_at = now() - interval '40 days' WHERE token <> \(Self.token("33"))")
        #expect(try await hygiene.purgeInvalidations(recordedBefore: Date().addingTimeInterval(-30 * 86400), batch: 1) == 2)
        let left = try await fixture.pool.query("SELECT token FROM token_invalidations").map { try $0.decode(String.self, column: "token") }
        #expect(left == [Self.token("33")])
    }

    @Test func removingTheAppTakesItsFollowsWithIt() async throws {
        // A follow has no foreign key to its event (Sql/0034); the app's installations take its follows.
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let a = try await register(fixture, "a", token: Self.token("31"), os: "18.2").0
        _ = try await InstallationRepository(pool: fixture.pool).changeFollows(
            .add, installation: a.id, appID: fixture.appID, events: [.id(event.id)], topics: ["league"])
        #expect(try await fixture.count("follows") == 2)
        #expect(try await AppRepository(pool: fixture.pool).remove(id: fixture.appID)?.id == fixture.appID)
        #expect(try await fixture.count("follows") == 0)
    }

    @Test func erasingAnInstallationTakesItsFollowsAndNoOthers() async throws {
        // A follow has no foreign key to its installation either (Sql/0037): a trigger on installations takes an
        // erased installation's follows, and only its own.
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let installations = InstallationRepository(pool: fixture.pool)
        let a = try await register(fixture, "a", token: Self.token("41"), os: "18.2").0
        let b = try await register(fixture, "b", token: Self.token("42"), os: "18.2").0
        for installation in [a, b] {
            _ = try await installations.changeFollows(
                .add, installation: installation.id, appID: fixture.appID, events: [.id(event.id)], topics: ["league"])
        }
        #expect(try await fixture.count("follows") == 4)
        #expect(try await installations.erase(installation: a.id))
        #expect(try await fixture.count("follows") == 2)
        #expect(try await installations.record(id: b.id).follows.count == 2)
    }

    @Test func statsCountByVersionEnablementTokenAndFollows() async throws {
        let fixture = try await PipelineFixture.make()
        defer { fixture.pool.close() }
        let event = try await fixture.makeEvent("match")
        let installations = InstallationRepository(pool: fixture.pool)
        let a = try await register(fixture, "a", token: Self.token("21"), os: "18.2").0
        _ = try await register(fixture, "b", os: "17.1", enabled: false)
        _ = try await installations.changeFollows(.add, installation: a.id, appID: fixture.appID, events: [.id(event.id)], topics: [])
        let stats = try await AudienceRepository(pool: fixture.pool).stats(appID: fixture.appID)
        func groups(_ stats: AudienceStats) -> Set<String> {
            Set(
                stats.installations.map {
                    "\($0.osMajor.map(String.init) ?? "-") \($0.enabled) \($0.token) \($0.follows.map(String.init) ?? "-") \($0.count)"
                })
        }
        #expect(groups(stats) == ["18 true current true 1", "17 false none false 1"])
        // The metrics' sample counts the same installations without probing their follows.
        let gauges = try await AudienceRepository(pool: fixture.pool).stats(appID: fixture.appID, forGauges: true)
        #expect(groups(gauges) == ["18 true current - 1", "17 false none - 1"])
    }
}
