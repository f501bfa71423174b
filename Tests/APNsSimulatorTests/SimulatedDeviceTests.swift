import Foundation
import MarqueeCore
import Testing

@testable import APNsSimulator

/// The device state machine as a value: facts in, outcomes and actions out, no I/O and no clock.
@Suite struct SimulatedDeviceTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static let token = String(repeating: "cd", count: 32)

    static func push(_ aps: JSONObject) -> LiveActivityPushContent { LiveActivityPushContent(aps: aps) }

    static func startPush(
        timestamp: Int64 = 100, match: String = "m1", channel: String? = nil, inputToken: Bool = false,
        alert: Bool = true
    ) -> LiveActivityPushContent {
        var aps: JSONObject = [
            "timestamp": .int(timestamp), "event": "start", "content-state": ["home": 0, "away": 0],
            "attributes-type": "MatchAttributes", "attributes": ["matchId": .string(match), "homeTeam": "Lyon"],
        ]
        if alert { aps["alert"] = ["title": "Kick-off", "body": "Lyon v Porto"] }
        if let channel { aps["input-push-channel"] = .string(channel) }
        if inputToken { aps["input-push-token"] = 1 }
        return push(aps)
    }

    static func update(_ timestamp: Int64, home: Int64 = 1, event: String = "update") -> LiveActivityPushContent {
        push(["timestamp": .int(timestamp), "event": .string(event), "content-state": ["home": .int(home), "away": 0]])
    }

    static func identity(_ n: Int) -> NewActivityIdentity {
        NewActivityIdentity(activityID: "A-\(n)", updateToken: String(repeating: "0\(n % 10)", count: 32))
    }

    static func rules(_ configure: (inout SimulatedDeviceRules) -> Void = { _ in }) -> SimulatedDeviceRules {
        var rules = SimulatedDeviceRules()
        rules.registersActivities = true
        configure(&rules)
        return rules
    }

    static func device(_ version: String, installation: String? = "inst-1") -> SimulatedDevice {
        SimulatedDevice(pushToStartToken: token, osVersion: SimulatorOSVersion(parsing: version)!, installationID: installation)
    }

    @Test func versionsCompareAsNumbers() {
        #expect(SimulatorOSVersion(parsing: "17.10")! > SimulatorOSVersion(parsing: "17.2")!)
        #expect(SimulatorOSVersion(parsing: "18")! == SimulatorOSVersion(18, 0, 0))
        #expect(SimulatorOSVersion(parsing: "17.2.1")!.description == "17.2.1")
        for bad in ["", "18.", "a.b", "1.2.3.4", "-1", " 18"] { #expect(SimulatorOSVersion(parsing: bad) == nil, "\(bad)") }
    }

    @Test func startsFollowTheOSVersion() {
        // Below 17.2: never.
        for version in ["16.1", "17.1.2"] {
            var device = Self.device(version)
            let reaction = device.receiveStart(
                Self.startPush(), channelExists: true, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
            #expect(reaction == DeviceReaction(outcomes: [.startIgnored(.belowPushToStart)]), "\(version)")
            #expect(device.activities.isEmpty && device.ignoredStarts == [.belowPushToStart: 1])
        }
        // 17.2 to 17.x: a plain start with a minted update token, which the app's backend registers.
        var seventeen = Self.device("17.2")
        let reaction = seventeen.receiveStart(
            Self.startPush(), channelExists: false, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
        #expect(reaction.outcomes == [.started(activityID: "A-1")])
        #expect(
            reaction.actions == [
                .registerActivity(
                    ActivityRegistration(
                        installationID: "inst-1", activityID: "A-1", attributesType: "MatchAttributes",
                        attributes: ["matchId": "m1", "homeTeam": "Lyon"], pushToken: Self.identity(1).updateToken, deviceToken: Self.token))
            ])
        #expect(seventeen.activities.first?.updatePath == .token(Self.identity(1).updateToken))
        #expect(seventeen.activities.first?.registration == .pending)
        // ...but a channel start is an iOS 18 payload: not started.
        var channelOn17 = Self.device("17.5")
        #expect(
            channelOn17.receiveStart(
                Self.startPush(channel: "Y2g="), channelExists: true, identity: Self.identity(2), rules: Self.rules(),
                now: Self.start
            ).outcomes == [.startIgnored(.channelBelowiOS18)])
        // 18 and later: input-push-channel joins the channel; input-push-token: 1 mints a token; neither: no path.
        var eighteen = Self.device("18.0")
        _ = eighteen.receiveStart(
            Self.startPush(match: "a", channel: "Y2g="), channelExists: true, identity: Self.identity(3), rules: Self.rules(), now: Self.start)
        let tokenStart = eighteen.receiveStart(
            Self.startPush(match: "b", inputToken: true), channelExists: false, identity: Self.identity(4),
            rules: Self.rules(), now: Self.start)
        _ = eighteen.receiveStart(Self.startPush(match: "c"), channelExists: false, identity: Self.identity(5), rules: Self.rules(), now: Self.start)
        #expect(eighteen.activities.map(\.updatePath) == [.channel("Y2g="), .token(Self.identity(4).updateToken), .none])
        #expect(eighteen.activities.map(\.registration) == [.notNeeded, .pending, .notNeeded])
        #expect(tokenStart.actions.count == 1)
        // An unknown channel starts nothing.
        #expect(
            eighteen.receiveStart(
                Self.startPush(channel: "bm9uZQ=="), channelExists: false, identity: Self.identity(6), rules: Self.rules(),
                now: Self.start
            ).outcomes == [.startIgnored(.unknownChannel)])
    }

    @Test func aStartNeedsItsKeysAndAnAlert() {
        var device = Self.device("18.1")
        let noAlert = device.receiveStart(
            Self.startPush(alert: false), channelExists: false, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
        #expect(noAlert.outcomes == [.startIgnored(.noAlert)])
        var incomplete = Self.startPush()
        incomplete.contentState = nil
        #expect(
            device.receiveStart(incomplete, channelExists: false, identity: Self.identity(2), rules: Self.rules(), now: Self.start).outcomes
                == [.startIgnored(.incomplete)])
        #expect(
            device.receiveStart(Self.update(5), channelExists: false, identity: Self.identity(3), rules: Self.rules(), now: Self.start).outcomes
                == [.startIgnored(.notAStart)])
        #expect(device.activities.isEmpty && device.ignoredStarts == [.noAlert: 1, .incomplete: 1, .notAStart: 1])
    }

    @Test func registrationsNeedAnAppBackendAndAnInstallationID() {
        var withoutBackend = Self.device("17.4")
        let reaction = withoutBackend.receiveStart(
            Self.startPush(), channelExists: false, identity: Self.identity(1),
            rules: Self.rules { $0.registersActivities = false }, now: Self.start)
        #expect(reaction.actions.isEmpty && withoutBackend.activities.first?.registration == .skipped("no app backend"))
        var anonymous = Self.device("17.4", installation: nil)
        #expect(
            anonymous.receiveStart(Self.startPush(), channelExists: false, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
                .actions.isEmpty)
        #expect(anonymous.activities.first?.registration == .skipped("no installation id"))
        anonymous.registrationFinished(activityID: "A-1", .registered(status: 201))
        #expect(anonymous.activities.first?.registration == .registered(status: 201))
    }

    @Test func theBudgetIgnoresStartsPastItForAnHour() {
        var device = Self.device("18.0")
        let rules = Self.rules { $0.startsPerHour = 2 }
        var outcomes: [DeviceOutcome] = []
        for n in 0..<3 {
            outcomes +=
                device.receiveStart(
                    Self.startPush(match: "m\(n)"), channelExists: false, identity: Self.identity(n), rules: rules,
                    now: Self.start.addingTimeInterval(Double(n) * 60)
                ).outcomes
        }
        #expect(outcomes == [.started(activityID: "A-0"), .started(activityID: "A-1"), .startIgnored(.overBudget)])
        // An hour after the first start, one start is free again; ignored starts used none of the budget.
        let later = Self.start.addingTimeInterval(3_600)
        #expect(
            device.receiveStart(Self.startPush(match: "m3"), channelExists: false, identity: Self.identity(3), rules: rules, now: later).outcomes
                == [.started(activityID: "A-3")])
        #expect(
            device.receiveStart(Self.startPush(match: "m4"), channelExists: false, identity: Self.identity(4), rules: rules, now: later).outcomes
                == [.startIgnored(.overBudget)])
        #expect(device.ignoredStarts == [.overBudget: 2] && device.activities.count == 3)
        // A budget of 0 starts nothing.
        var none = Self.device("18.0")
        #expect(
            none.receiveStart(
                Self.startPush(), channelExists: false, identity: Self.identity(1), rules: Self.rules { $0.startsPerHour = 0 },
                now: Self.start
            ).outcomes == [.startIgnored(.overBudget)])
    }

    @Test func onlyNewerTimestampsAreShownAndNothingAfterTheEnd() {
        var device = Self.device("18.2")
        _ = device.receiveStart(
            Self.startPush(timestamp: 100, channel: "Y2g="), channelExists: true, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
        #expect(device.receiveBroadcast(channelID: "Y2g=", Self.update(101, home: 1), now: Self.start).outcomes == [.updated(activityID: "A-1")])
        #expect(device.receiveBroadcast(channelID: "Y2g=", Self.update(101, home: 9), now: Self.start).outcomes == [.notNewer(activityID: "A-1")])
        #expect(device.receiveBroadcast(channelID: "Y2g=", Self.update(99, home: 9), now: Self.start).outcomes == [.notNewer(activityID: "A-1")])
        #expect(device.receiveBroadcast(channelID: "b3RoZXI=", Self.update(200), now: Self.start).outcomes.isEmpty)
        #expect(
            device.receiveBroadcast(channelID: "Y2g=", Self.push(["timestamp": 102, "event": "update"]), now: Self.start).outcomes
                == [.unreadable(activityID: "A-1")])
        let end = Self.push([
            "timestamp": 103, "event": "end", "content-state": ["home": 2, "away": 0],
            "dismissal-date": .int(Int64(Self.start.timeIntervalSince1970) + 60),
        ])
        #expect(device.receiveBroadcast(channelID: "Y2g=", end, now: Self.start).outcomes == [.ended(activityID: "A-1")])
        #expect(device.receiveBroadcast(channelID: "Y2g=", Self.update(104, home: 3), now: Self.start).outcomes == [.afterEnd(activityID: "A-1")])
        let activity = device.activities[0]
        #expect(activity.contentState == ["home": 2, "away": 0] && activity.timestamp == 103)
        #expect(activity.state == .ended && activity.endCause == .push && activity.endedAt == Self.start)
        #expect(activity.updatesShown == 2 && activity.notNewerIgnored == 2 && activity.receivedAfterEnd == 1 && activity.unreadable == 1)
        // The dismissal date passes: gone from the Lock Screen.
        device.advance(to: Self.start.addingTimeInterval(61))
        #expect(device.activities[0].state == .dismissed)
    }

    @Test func pushesToAMintedTokenUpdateAndEnd() {
        var device = Self.device("17.3")
        _ = device.receiveStart(Self.startPush(timestamp: 10), channelExists: false, identity: Self.identity(1), rules: Self.rules(), now: Self.start)
        let token = Self.identity(1).updateToken
        #expect(device.receiveUpdate(token: token, Self.update(11, home: 4), now: Self.start).outcomes == [.updated(activityID: "A-1")])
        #expect(device.receiveUpdate(token: "ffff", Self.update(12), now: Self.start).outcomes.isEmpty)
        // An end without content-state keeps the last state; with no dismissal date it stays 4 hours.
        #expect(
            device.receiveUpdate(token: token, Self.push(["timestamp": 12, "event": "end"]), now: Self.start).outcomes == [.ended(activityID: "A-1")])
        #expect(device.activities[0].contentState == ["home": 4, "away": 0])
        #expect(device.activities[0].dismissesAt == Self.start.addingTimeInterval(4 * 3_600))
        // A dismissal date in the past dismisses at once.
        var other = Self.device("17.3")
        _ = other.receiveStart(Self.startPush(timestamp: 10), channelExists: false, identity: Self.identity(2), rules: Self.rules(), now: Self.start)
        _ = other.receiveUpdate(
            token: Self.identity(2).updateToken, Self.push(["timestamp": 11, "event": "end", "dismissal-date": 1]), now: Self.start)
        #expect(other.activities[0].state == .dismissed)
    }

    @Test func theSystemEndsAnActivityAfterItsMaximumDurationAndStaleDatesShow() {
        var device = Self.device("18.0")
        let rules = Self.rules { $0.activityMaxDuration = 60 }
        var start = Self.startPush(timestamp: 10, channel: "Y2g=")
        start.staleDate = Self.start.addingTimeInterval(30)
        _ = device.receiveStart(start, channelExists: true, identity: Self.identity(1), rules: rules, now: Self.start)
        device.advance(to: Self.start.addingTimeInterval(31))
        #expect(device.activities[0].state == .stale)
        // A newer update without a stale date makes it current again.
        _ = device.receiveBroadcast(channelID: "Y2g=", Self.update(11), now: Self.start.addingTimeInterval(32))
        #expect(device.activities[0].state == .active)
        // Past the maximum duration: ended as of that moment, and later pushes count as received after the end.
        #expect(
            device.receiveBroadcast(channelID: "Y2g=", Self.update(12), now: Self.start.addingTimeInterval(61)).outcomes
                == [.afterEnd(activityID: "A-1")])
        let activity = device.activities[0]
        #expect(activity.state == .ended && activity.endCause == .maximumDuration && activity.endedAt == Self.start.addingTimeInterval(60))
        device.advance(to: Self.start.addingTimeInterval(60 + 4 * 3_600))
        #expect(device.activities[0].state == .dismissed)
    }

    @Test func summariesCountDuplicatesPerEventAndTheNewestState() {
        var device = Self.device("18.0")
        let rules = Self.rules()
        _ = device.receiveStart(
            Self.startPush(timestamp: 10, match: "m1", channel: "Y2g="), channelExists: true, identity: Self.identity(1), rules: rules,
            now: Self.start)
        _ = device.receiveStart(
            Self.startPush(timestamp: 10, match: "m1", channel: "Y2g="), channelExists: true, identity: Self.identity(2), rules: rules,
            now: Self.start.addingTimeInterval(1))
        _ = device.receiveBroadcast(channelID: "Y2g=", Self.update(20, home: 3), now: Self.start.addingTimeInterval(2))
        _ = device.receiveStart(
            Self.startPush(timestamp: 10, match: "m2", inputToken: true), channelExists: false, identity: Self.identity(3), rules: rules,
            now: Self.start.addingTimeInterval(3))
        let byKey = device.eventSummaries(eventKeys: ["MatchAttributes": "matchId"])
        #expect(byKey.map(\.event) == ["m1", "m2"])
        #expect(
            byKey[0].activities == 2 && byKey[0].duplicates == 1 && byKey[0].newestState == ["home": 3, "away": 0] && byKey[0].newestTimestamp == 20)
        #expect(byKey[1].activities == 1 && byKey[1].duplicates == 0)
        // Without an event key, the channel names the event, then the attributes.
        let byChannel = device.eventSummaries(eventKeys: [:])
        #expect(byChannel.map(\.event) == ["channel:Y2g=", #"MatchAttributes:{"matchId":"m2","homeTeam":"Lyon"}"#])
        // An activity started after the previous one ended is no duplicate.
        var again = Self.device("17.4")
        _ = again.receiveStart(Self.startPush(timestamp: 1), channelExists: false, identity: Self.identity(1), rules: rules, now: Self.start)
        _ = again.receiveUpdate(token: Self.identity(1).updateToken, Self.update(2, event: "end"), now: Self.start.addingTimeInterval(1))
        _ = again.receiveStart(
            Self.startPush(timestamp: 3), channelExists: false, identity: Self.identity(2), rules: rules, now: Self.start.addingTimeInterval(2))
        #expect(again.eventSummaries(eventKeys: ["MatchAttributes": "matchId"]).first?.duplicates == 0)
    }

    @Test func registrationRetriesAreBounded() {
        #expect(RegistrationAttempt.after(status: 201, failure: nil, attempt: 1, attempts: 4) == .finished(.registered(status: 201)))
        #expect(RegistrationAttempt.after(status: 503, failure: nil, attempt: 1, attempts: 4) == .retry(after: .milliseconds(100)))
        #expect(RegistrationAttempt.after(status: 429, failure: nil, attempt: 2, attempts: 4) == .retry(after: .milliseconds(200)))
        #expect(RegistrationAttempt.after(status: nil, failure: "refused", attempt: 3, attempts: 4) == .retry(after: .milliseconds(400)))
        #expect(RegistrationAttempt.after(status: nil, failure: "refused", attempt: 4, attempts: 4) == .finished(.failed("refused after 4 tries")))
        #expect(RegistrationAttempt.after(status: 422, failure: nil, attempt: 1, attempts: 4) == .finished(.failed("HTTP 422")))
        #expect(
            ActivityRegistrar.eventKey(
                inAttributeType: Array(#"{"name":"T","attributes":{"a":"string","b":{"type":"string","eventKey":true}}}"#.utf8)) == "b")
        #expect(ActivityRegistrar.eventKey(inAttributeType: Array(#"{"attributes":{"a":"string"}}"#.utf8)) == nil)
    }

    @Test func deviceFilesParseAndRefuseWhatTheyCannotRead() throws {
        let specs = try SimulatedDeviceSpec.parse(
            Array(
                #"{"devices":[{"pushToStartToken":"ABCD","osVersion":"18.1","installationId":"i-1"},{"pushToStartToken":"ef01","osVersion":"17"}]}"#
                    .utf8))
        #expect(
            specs == [
                SimulatedDeviceSpec(pushToStartToken: "abcd", osVersion: SimulatorOSVersion(18, 1), installationID: "i-1"),
                SimulatedDeviceSpec(pushToStartToken: "ef01", osVersion: SimulatorOSVersion(17)),
            ])
        #expect(try SimulatedDeviceSpec.parse(Array(#"[{"pushToStartToken":"ab","osVersion":"16.4"}]"#.utf8)).count == 1)
        #expect(try SimulatedDeviceSpec.parse(Array(#"{"pushToStartToken":"ab","osVersion":"16.4"}"#.utf8)).count == 1)
        for bad in [
            #"nope"#, #"{"devices":[{"pushToStartToken":"xyz","osVersion":"18"}]}"#, #"[{"pushToStartToken":"ab","osVersion":"eighteen"}]"#,
            #"[{"pushToStartToken":"ab","osVersion":"18","os":"18"}]"#, #"[{"pushToStartToken":"ab","osVersion":"18","installationId":""}]"#, "[1]",
        ] {
            #expect(throws: SimulatorConfigurationError.self, "\(bad)") { try SimulatedDeviceSpec.parse(Array(bad.utf8)) }
        }
    }

    @Test func theRegistryRoutesTokensAndChannelsAndReports() {
        var rules = SimulatedDeviceRules()
        rules.registersActivities = true
        let devices = SimulatedDevices(rules: rules, eventKeys: ["MatchAttributes": "matchId"], seed: 1)
        #expect(devices.isEmpty)
        let other = String(repeating: "ef", count: 32)
        #expect(
            devices.add([
                SimulatedDeviceSpec(pushToStartToken: Self.token, osVersion: SimulatorOSVersion(18), installationID: "i-1"),
                SimulatedDeviceSpec(pushToStartToken: other, osVersion: SimulatorOSVersion(17, 4), installationID: "i-2"),
            ]) == (2, 0))
        #expect(!devices.isEmpty && devices.kind(of: Self.token) == .pushToStart && devices.kind(of: "00") == .unknown)
        _ = devices.deliverDevicePush(token: Self.token, Self.startPush(timestamp: 1, channel: "Y2g="), channelExists: true, now: Self.start)
        let started = devices.deliverDevicePush(token: other, Self.startPush(timestamp: 1), channelExists: false, now: Self.start)
        guard case .registerActivity(let registration)? = started.actions.first else {
            Issue.record("no registration")
            return
        }
        #expect(devices.kind(of: registration.pushToken) == .updateToken && devices.hasListeners(channelID: "Y2g="))
        #expect(SimulatorIdentifiers.isCanonicalUUID(registration.activityID) && registration.pushToken.count == 64)
        #expect(devices.deliverBroadcast(channelID: "Y2g=", Self.update(2), now: Self.start).outcomes.count == 1)
        #expect(devices.deliverDevicePush(token: registration.pushToken, Self.update(2), channelExists: false, now: Self.start).outcomes.count == 1)
        devices.registrationFinished(registration, .registered(status: 201))
        #expect(devices.device("i-2", at: Self.start)?.activities.first?.registration == .registered(status: 201))
        // An OS upgrade keeps the activities.
        #expect(devices.add([SimulatedDeviceSpec(pushToStartToken: other, osVersion: SimulatorOSVersion(18))]) == (0, 1))
        #expect(
            devices.device(other, at: Self.start)?.osVersion == SimulatorOSVersion(18)
                && devices.device(other, at: Self.start)?.installationID == "i-2")
        let report = devices.report(at: Self.start)
        #expect(report["devices"] == 2 && report["activities"] == 2 && report["duplicates"] == 0 && report["activitiesByState"] == ["active": 2])
        #expect(report["perDevice"]?.arrayValue?.first?["events"]?.arrayValue?.first?["event"] == "m1")
        devices.removeAll()
        #expect(devices.isEmpty && devices.kind(of: Self.token) == .unknown)
    }
}
