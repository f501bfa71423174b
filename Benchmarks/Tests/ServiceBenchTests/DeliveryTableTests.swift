// The bench's measurement rules: when an update counts as delivered, and how percentiles are ranked.
import Testing
@testable import ServiceBench

@Suite struct DeliveryTableTests {
    @Test func anUpdateIsDeliveredByTheFirstAcceptedBroadcastOfItsStateOrANewerOne() {
        // Event 1: update 10 broadcast at 100, 11 and 12 conflated into 13 at 250, 14 accepted at 240
        // (APNs answers can be recorded out of order); event 2: update 20 at 500.
        let table = DeliveryTable([(1, 10, 100), (1, 13, 250), (1, 14, 240), (2, 20, 500)])
        #expect(table.deliveredAt(event: 1, updateID: 10) == 100)
        #expect(table.deliveredAt(event: 1, updateID: 11) == 240)
        #expect(table.deliveredAt(event: 1, updateID: 13) == 240)
        #expect(table.deliveredAt(event: 1, updateID: 14) == 240)
        #expect(table.deliveredAt(event: 1, updateID: 15) == nil)
        #expect(table.deliveredAt(event: 2, updateID: 10) == 500)
        #expect(table.deliveredAt(event: 3, updateID: 1) == nil)
    }

    @Test func percentilesAreNearestRank() {
        let values = (1...1_000).map { Int64($0) }.shuffled()
        let figures = Percentiles(values)
        #expect(figures.p50 == 500)
        #expect(figures.p99 == 990)
        #expect(figures.p999 == 999)
        #expect(figures.max == 1_000)
        #expect(Percentiles([]).p99 == 0)
        #expect(Percentiles([7]).p50 == 7)
    }

    @Test func theFirstIDOfAnAnswerIsTheResourceID() {
        #expect(firstID(in: Array(#"{"update": {"id": 42, "event": 7}}"#.utf8)) == 42)
        #expect(firstID(in: Array(#"{"id":9,"externalId":"x"}"#.utf8)) == 9)
        #expect(firstID(in: Array(#"{"error": {"code": "not_found"}}"#.utf8)) == nil)
    }
}
