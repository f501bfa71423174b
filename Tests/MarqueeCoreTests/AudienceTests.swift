import Foundation
import MarqueeCore
import Testing

/// The audience's values without I/O: tokens, OS versions, the activity lifecycle and the 410 rule.
struct AudienceTests {
    @Test func deviceTokensAre64To200HexCharactersLowerCased() throws {
        #expect(try DeviceTokenText.validate(String(repeating: "AB", count: 32)).get() == String(repeating: "ab", count: 32))
        #expect(try DeviceTokenText.validate(String(repeating: "0f", count: 100)).get().count == 200)
        #expect(try DeviceTokenText.validate(String(repeating: "0f", count: 31) + "aF").get() == String(repeating: "0f", count: 31) + "af")
        #expect(DeviceTokenText.validate(String(repeating: "0", count: 62)) == .failure(.length(62)))
        #expect(DeviceTokenText.validate(String(repeating: "0", count: 202)) == .failure(.length(202)))
        #expect(DeviceTokenText.validate(String(repeating: "0", count: 65)) == .failure(.oddLength))
        #expect(DeviceTokenText.validate(String(repeating: "g", count: 64)) == .failure(.notHex))
        #expect(DeviceTokenText.validate(String(repeating: "é", count: 32)) == .failure(.notHex))
    }

    @Test func osVersionsCompareAsNumbers() {
        #expect(OSVersion("17.10")! > OSVersion("17.2")!)
        #expect(OSVersion("17.2") == OSVersion(major: 17, minor: 2, patch: 0))
        #expect(OSVersion("18") == OSVersion.channels)
        #expect(OSVersion("16.10.123") == OSVersion(major: 16, minor: 10, patch: 123))
        #expect(OSVersion("007.0") == OSVersion(major: 7))
        #expect(OSVersion("17.1.9")! < OSVersion.pushToStart && OSVersion("17.2")! >= OSVersion.pushToStart)
        for bad in ["", "17.", ".1", "17.2.1.4", "a.b", "1234", "17 .2", "-1", "17.+2", "17..2", "17.2.", "1.2.3.", "17.1234"] {
            #expect(OSVersion(bad) == nil, "\(bad)")
        }
    }

    @Test func theActivityLifecycleKeepsTombstones() {
        typealias L = ActivityLifecycle
        let table: [(L.State?, L.Event, L.Action)] = [
            (nil, .registered, .store(.active)), (.active, .registered, .store(.active)), (.pending, .registered, .store(.active)),
            (.ended, .registered, .refuseEnded), (.dismissed, .registered, .refuseEnded),
            (nil, .scheduled, .store(.pending)), (.pending, .scheduled, .store(.pending)), (.active, .scheduled, .store(.active)),
            (.ended, .scheduled, .refuseEnded), (.dismissed, .scheduled, .refuseEnded),
            (nil, .ended, .store(.ended)), (.active, .ended, .store(.ended)), (.pending, .ended, .store(.ended)), (.ended, .ended, .keep),
            (.dismissed, .ended, .keep),
            (nil, .dismissed, .store(.dismissed)), (.active, .dismissed, .store(.dismissed)), (.pending, .dismissed, .store(.dismissed)),
            (.ended, .dismissed, .store(.dismissed)), (.dismissed, .dismissed, .keep),
        ]
        #expect(table.count == 5 * L.Event.allCases.count)
        for (state, event, action) in table { #expect(L.transition(from: state, on: event) == action, "\(String(describing: state)) \(event)") }
        #expect(L.finalStates == [.ended, .dismissed])
        #expect(L.mirroredStates == [.active, .pending])
    }

    @Test func aDismissalHoldsBackStartsOnlyWhileItsRoundRan() {
        typealias L = ActivityLifecycle
        #expect(L.dismissalIsTheUsers(activityRunning: true, activityRound: 2, eventRound: 2, eventTakesStarts: true))
        // After Marquee's end went out: the event is over, or a postponement moved it to a new round.
        #expect(!L.dismissalIsTheUsers(activityRunning: true, activityRound: 2, eventRound: 2, eventTakesStarts: false))
        #expect(!L.dismissalIsTheUsers(activityRunning: true, activityRound: 1, eventRound: 2, eventTakesStarts: true))
        // The app ended it: iOS clears an ended activity.
        #expect(!L.dismissalIsTheUsers(activityRunning: false, activityRound: 2, eventRound: 2, eventTakesStarts: true))
    }

    @Test func aGoneTokenIsInvalidOnlyWhenNotSeenAfterAPNsTime() {
        let seen = Date(timeIntervalSince1970: 1_800_000_000)
        let gone = { (ms: Int64?) in TokenRefusal.gone(reason: "Unregistered", apnsTimestampMilliseconds: ms) }
        #expect(gone(1_800_000_000_000 - 1).outcome(tokenSeenAt: seen) == .kept)
        #expect(gone(1_800_000_000_000).outcome(tokenSeenAt: seen) == .invalidated)
        #expect(gone(nil).outcome(tokenSeenAt: seen) == .invalidated)
        #expect(gone(1).outcome(tokenSeenAt: nil) == .unmatched)
        #expect(TokenRefusal.badDeviceToken.outcome(tokenSeenAt: seen) == .refused)
        #expect(TokenRefusal.notForTopic.reason == "DeviceTokenNotForTopic")
    }
}
