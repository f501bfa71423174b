import Foundation
import Testing

@testable import MarqueeCore

private let sentAt = Date(timeIntervalSince1970: 1_800_000_000)

@Suite struct FreshnessSettingsTests {
    @Test func readsEveryMemberAndWritesBackOnlyTheSetOnes() throws {
        let settings = try FreshnessSettings(json: ["staleAfter": 120, "relevanceScore": 75.5, "alertBoostSeconds": 0, "dismissAfter": nil])
        #expect(settings == FreshnessSettings(staleAfter: 120, relevanceScore: 75.5, alertBoostSeconds: 0))
        #expect(settings.json == ["staleAfter": 120, "relevanceScore": 75.5, "alertBoostSeconds": 0])
        #expect(try FreshnessSettings(json: [:]) == FreshnessSettings())
    }

    @Test(
        arguments: [
            (["staleAfter": 0] as JSONValue, "staleAfter"),
            (["staleAfter": -1] as JSONValue, "staleAfter"),
            (["staleAfter": 28_801] as JSONValue, "staleAfter"),
            (["staleAfter": 1.5] as JSONValue, "staleAfter"),
            (["staleAfter": "60"] as JSONValue, "staleAfter"),
            (["relevanceScore": -1] as JSONValue, "relevanceScore"),
            (["alertBoost": 1_000_001] as JSONValue, "alertBoost"),
            (["alertBoostSeconds": -5] as JSONValue, "alertBoostSeconds"),
            (["dismissAfter": 14_401] as JSONValue, "dismissAfter"),
            (["stale": 60] as JSONValue, "stale"),
        ] as [(JSONValue, String)])
    func refusesAMemberOutOfRangeNamingIt(json: JSONValue, field: String) {
        #expect(throws: FreshnessSettingsError.self) { try FreshnessSettings(json: json) }
        do {
            _ = try FreshnessSettings(json: json, path: "freshness.")
        } catch {
            #expect(error.field == "freshness." + field)
        }
    }

    @Test func refusesANonObjectNamingThePathItSitsAt() {
        do {
            _ = try FreshnessSettings(json: [60], path: "freshness.")
            Issue.record("an array was read as a policy")
        } catch {
            #expect(error.field == "freshness")
        }
    }

    @Test func theBoundsThemselvesAreAllowed() throws {
        let settings = try FreshnessSettings(json: ["staleAfter": 28_800, "dismissAfter": 14_400, "relevanceScore": 0, "alertBoost": 1_000_000])
        #expect(settings == FreshnessSettings(staleAfter: 28_800, relevanceScore: 0, alertBoost: 1_000_000, dismissAfter: 14_400))
        #expect(try FreshnessSettings(json: ["staleAfter": 1]).staleAfter == 1)
    }
}

@Suite struct FreshnessPolicyTests {
    @Test func theEventsMembersWinOverTheTypesAndThoseOverTheDefaults() {
        #expect(FreshnessPolicy(event: nil, type: nil) == .defaults)
        let type = FreshnessSettings(staleAfter: 300, relevanceScore: 10, dismissAfter: 600)
        let event = FreshnessSettings(staleAfter: 60, alertBoost: 5)
        let policy = FreshnessPolicy(event: event, type: type)
        #expect(policy == FreshnessPolicy(staleAfter: 60, relevanceScore: 10, alertBoost: 5, alertBoostSeconds: 300, dismissAfter: 600))
    }

    @Test func anUpdateGoesStaleThatLongAfterItIsSent() {
        let policy = FreshnessPolicy(event: FreshnessSettings(staleAfter: 90), type: nil)
        let fields = policy.fields(for: .update, explicit: SendTimeFields(), carriesAlert: false, lastAlertAt: nil, sentAt: sentAt)
        #expect(fields == SendTimeFields(staleDate: sentAt.addingTimeInterval(90), relevanceScore: 50))
        let withoutPolicy = FreshnessPolicy.defaults.fields(
            for: .update, explicit: SendTimeFields(), carriesAlert: false, lastAlertAt: nil, sentAt: sentAt)
        #expect(withoutPolicy.staleDate == nil)
    }

    @Test func anAlertRaisesTheScoreForAlertBoostSecondsFromItsBroadcast() {
        let policy = FreshnessPolicy.defaults
        func score(carriesAlert: Bool, lastAlertAt: Date?) -> Double? {
            policy.fields(for: .update, explicit: SendTimeFields(), carriesAlert: carriesAlert, lastAlertAt: lastAlertAt, sentAt: sentAt)
                .relevanceScore
        }
        #expect(score(carriesAlert: true, lastAlertAt: nil) == 100)
        #expect(score(carriesAlert: false, lastAlertAt: sentAt.addingTimeInterval(-299)) == 100)
        #expect(score(carriesAlert: false, lastAlertAt: sentAt.addingTimeInterval(-300)) == 50)
        #expect(score(carriesAlert: false, lastAlertAt: nil) == 50)
        let noBoost = FreshnessPolicy(event: FreshnessSettings(alertBoostSeconds: 0), type: nil)
        #expect(
            noBoost.fields(for: .update, explicit: SendTimeFields(), carriesAlert: false, lastAlertAt: sentAt, sentAt: sentAt).relevanceScore == 50)
    }

    @Test func anEndGoesWithScoreZeroAndIsDismissedDismissAfterItsSend() {
        let policy = FreshnessPolicy(event: FreshnessSettings(staleAfter: 60, dismissAfter: 900), type: nil)
        let fields = policy.fields(for: .end, explicit: SendTimeFields(), carriesAlert: true, lastAlertAt: sentAt, sentAt: sentAt)
        #expect(fields == SendTimeFields(staleDate: nil, relevanceScore: 0, dismissalDate: sentAt.addingTimeInterval(900)))
        #expect(
            FreshnessPolicy.defaults.fields(for: .end, explicit: SendTimeFields(), carriesAlert: false, lastAlertAt: nil, sentAt: sentAt)
                == SendTimeFields(relevanceScore: 0))
    }

    @Test func whatAnUpdateSetsItselfWins() {
        let policy = FreshnessPolicy(event: FreshnessSettings(staleAfter: 60, dismissAfter: 900), type: nil)
        let explicit = SendTimeFields(staleDate: sentAt.addingTimeInterval(5), relevanceScore: 7, dismissalDate: sentAt.addingTimeInterval(30))
        #expect(
            policy.fields(for: .update, explicit: explicit, carriesAlert: true, lastAlertAt: nil, sentAt: sentAt)
                == SendTimeFields(staleDate: explicit.staleDate, relevanceScore: 7))
        #expect(policy.fields(for: .end, explicit: explicit, carriesAlert: false, lastAlertAt: nil, sentAt: sentAt) == explicit)
    }

    @Test func theWidestFieldsAtSendAreNoSmallerThanAnyThePolicyCanGive() throws {
        let state: JSONValue = ["score": "1-0"]
        for action in [UpdateAction.update, .end] {
            let widest = SendTimeFields().widestAtSend(for: action)
            let widestBytes = LiveActivityPayload(action: action, timestamp: 1_800_000_000, contentState: state, fields: widest, alert: nil).bytes
            let extreme = FreshnessPolicy(
                staleAfter: 28_800, relevanceScore: 999_999.123456789, alertBoost: 1_000_000, alertBoostSeconds: 28_800, dismissAfter: 14_400)
            let given = extreme.fields(for: action, explicit: SendTimeFields(), carriesAlert: true, lastAlertAt: nil, sentAt: sentAt)
            let givenBytes = LiveActivityPayload(action: action, timestamp: 1_800_000_000, contentState: state, fields: given, alert: nil).bytes
            #expect(widestBytes.count >= givenBytes.count, "\(action)")
        }
    }
}
