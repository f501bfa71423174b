import Foundation
import Testing

@testable import MarqueeService

/// The dispatcher's due times: gathered into steps, never early, earliest first.
struct DueScheduleTests {
    let origin = ContinuousClock.now

    @Test func timesAreRoundedUpToTheirStepAndOneStepIsKeptOnce() {
        var schedule = DueSchedule(step: .milliseconds(20), origin: origin)
        let first = schedule.insert(origin + .milliseconds(45))
        #expect(first)
        #expect(schedule.earliest == origin + .milliseconds(60))
        // Another time in the same step adds nothing; an earlier step becomes the earliest, a later one not.
        let sameStep = schedule.insert(origin + .milliseconds(41))
        #expect(!sameStep && schedule.count == 1)
        let earlier = schedule.insert(origin + .milliseconds(5))
        #expect(earlier)
        #expect(schedule.earliest == origin + .milliseconds(20))
        let later = schedule.insert(origin + .milliseconds(300))
        #expect(!later && schedule.count == 3)
    }

    @Test func removingWhatIsDueKeepsLaterTimes() {
        var schedule = DueSchedule(step: .milliseconds(10), origin: origin)
        for milliseconds in [30, 10, 50, 20] { schedule.insert(origin + .milliseconds(milliseconds)) }
        schedule.removeDue(by: origin + .milliseconds(25))
        #expect(schedule.earliest == origin + .milliseconds(30))
        #expect(schedule.count == 2)
        schedule.removeDue(by: origin + .seconds(1))
        #expect(schedule.earliest == nil)
    }

    @Test func pastTimesAreDueAtOnceAndTheFarthestGoPastCapacity() {
        var schedule = DueSchedule(step: .milliseconds(10), capacity: 2, origin: origin)
        schedule.insert(origin - .seconds(1))
        #expect(schedule.earliest == origin)
        schedule.insert(origin + .milliseconds(100))
        // Full: a farther time is dropped, a nearer one replaces the farthest.
        let farther = schedule.insert(origin + .milliseconds(200))
        #expect(!farther)
        schedule.insert(origin + .milliseconds(50))
        schedule.removeDue(by: origin)
        #expect(schedule.earliest == origin + .milliseconds(50))
        #expect(schedule.count == 1)
    }
}
