import Foundation
import MarqueeTestSupport
import Testing

@testable import MarqueeCore

@Suite struct PushToStartTokenSlotTests {
    static let now = Date(timeIntervalSince1970: 1_790_000_000)

    @Test(arguments: PushToStartTokenTable.rows(now: now).map(\.name))
    func everyRuleDoesWhatTheTableSays(_ name: String) throws {
        let row = try #require(PushToStartTokenTable.rows(now: Self.now).first { $0.name == name })
        var slot = row.before
        let action = slot.handle(row.event, now: Self.now, previousRetention: PushToStartTokenTable.retention)
        #expect(action == row.action)
        #expect(slot == row.after)
        #expect(action != .keep || slot == row.before, "a kept slot is unchanged")
    }

    @Test func theTableNamesEveryActionAndEveryEvent() {
        let rows = PushToStartTokenTable.rows(now: Self.now)
        #expect(Set(rows.map(\.action)) == Set(PushToStartTokenSlot.Action.allCases))
        #expect(Set(rows.map(\.name)).count == rows.count)
        #expect(rows.contains { if case .movedAway = $0.event { true } else { false } })
        #expect(rows.contains { if case .cleared = $0.event { true } else { false } })
    }

    @Test func aRefusalsOutcomeIsWhatTheSlotDoes() {
        for row in PushToStartTokenTable.rows(now: Self.now) {
            guard case .refused(let refusal) = row.event else { continue }
            let expected: InvalidationOutcome =
                switch row.action {
                case .clear: .invalidated
                case .flagRefused: .refused
                default: row.before.token == nil ? .unmatched : .kept
                }
            #expect(row.before.outcome(of: refusal) == expected, "\(row.name)")
        }
    }
}
