import Foundation
import Testing

@testable import MarqueeCore

@Suite struct EventChangePlannerTests {
    static let kickoff = Date(timeIntervalSince1970: 1_795_977_000)

    static func facts(
        _ status: EventStatus = .scheduled, endsIn: TimeInterval? = 7200, lead: Int? = nil, startsWentOut: Bool = false,
        restart: TimeInterval = 3600
    ) -> EventChangeFacts {
        EventChangeFacts(
            status: status, startsAt: kickoff, endsAt: endsIn.map { kickoff.addingTimeInterval($0) }, audienceLead: lead,
            defaultAudienceLead: 600, startsWentOut: startsWentOut, restartOnPostpone: restart)
    }

    @Test func newTimesAreStoredInEveryStatusThatTakesThem() throws {
        let later = EventChange(startsAt: Self.kickoff.addingTimeInterval(1800), endsAt: Self.kickoff.addingTimeInterval(9000))
        for status in EventStatus.allCases {
            let result = EventChangePlanner.plan(later, facts: Self.facts(status))
            switch status {
            case .scheduled, .live:
                let plan = try result.get()
                #expect(plan.event == .rescheduled && plan.action == nil && plan.status == status)
                #expect(plan.startsAt == later.startsAt && plan.endsAt == later.endsAt && plan.warnings.isEmpty)
            case .ending, .ended, .cancelled:
                #expect(throws: EventChangeRefusal.closed(status)) { try result.get() }
            }
        }
    }

    @Test func anEndNotAfterTheStartIsRefused() {
        #expect(throws: EventChangeRefusal.endsNotAfterStart) {
            try EventChangePlanner.plan(EventChange(endsAt: Self.kickoff), facts: Self.facts()).get()
        }
        // Only the start moves, past the stored end.
        #expect(throws: EventChangeRefusal.endsNotAfterStart) {
            try EventChangePlanner.plan(EventChange(startsAt: Self.kickoff.addingTimeInterval(7200)), facts: Self.facts()).get()
        }
        // Without an end any start goes.
        #expect(throws: Never.self) {
            try EventChangePlanner.plan(EventChange(startsAt: Self.kickoff.addingTimeInterval(86400)), facts: Self.facts(endsIn: nil)).get()
        }
    }

    @Test func aLaterStartAfterStartsWentOutRestartsTheAudienceOnlyPastTheThreshold() throws {
        let hourAndABit = EventChange(startsAt: Self.kickoff.addingTimeInterval(3601), endsAt: Self.kickoff.addingTimeInterval(20000))
        let hour = EventChange(startsAt: Self.kickoff.addingTimeInterval(3600), endsAt: Self.kickoff.addingTimeInterval(20000))
        let earlier = EventChange(startsAt: Self.kickoff.addingTimeInterval(-7200))
        for status in [EventStatus.scheduled, .live] {
            let postponed = try EventChangePlanner.plan(hourAndABit, facts: Self.facts(status, startsWentOut: true)).get()
            #expect(postponed.event == .postponed && postponed.action == .restartAudience && postponed.status == .scheduled)
            #expect(try EventChangePlanner.plan(hour, facts: Self.facts(status, startsWentOut: true)).get().event == .rescheduled)
            #expect(try EventChangePlanner.plan(hourAndABit, facts: Self.facts(status)).get().event == .rescheduled)
            #expect(try EventChangePlanner.plan(earlier, facts: Self.facts(status, startsWentOut: true)).get().event == .rescheduled)
        }
        #expect(throws: EventChangeRefusal.closed(.ending)) {
            try EventChangePlanner.plan(hourAndABit, facts: Self.facts(.ending, startsWentOut: true)).get()
        }
    }

    @Test func theEightHourWarningCountsFromTheAudienceStart() throws {
        let eightHours = EventWarning.activityLifetime
        // The default lead (600 s): 8 h from the audience start is startsAt + 8 h − 600 s.
        let limit = eightHours - 600
        #expect(try EventChangePlanner.plan(EventChange(endsAt: Self.kickoff.addingTimeInterval(limit)), facts: Self.facts()).get().warnings == [])
        #expect(
            try EventChangePlanner.plan(EventChange(endsAt: Self.kickoff.addingTimeInterval(limit + 1)), facts: Self.facts()).get().warnings
                == [.outlivesActivity])
        // The event's own lead, and a lead set by the same change.
        #expect(
            try EventChangePlanner.plan(EventChange(endsAt: Self.kickoff.addingTimeInterval(limit)), facts: Self.facts(lead: 3600)).get()
                .warnings == [.outlivesActivity])
        #expect(
            try EventChangePlanner.plan(
                EventChange(endsAt: Self.kickoff.addingTimeInterval(limit), audienceLead: .some(0)), facts: Self.facts(lead: 3600)
            ).get().warnings == [])
        #expect(
            try EventChangePlanner.plan(
                EventChange(endsAt: Self.kickoff.addingTimeInterval(limit + 1), audienceLead: .some(nil)), facts: Self.facts(lead: 0)
            ).get().warnings == [.outlivesActivity])
        #expect(EventWarning.warnings(startsAt: Self.kickoff, endsAt: nil, lead: 86400) == [])
    }

    @Test func aCancelEndsActivitiesWhenSomeMayRunAndAChannelOrTheirTokensTakeTheEnd() {
        for status in EventStatus.allCases {
            for started in [false, true] {
                for carries in [false, true] {
                    for tokens in [false, true] {
                        let plan = EventCancelPlan.plan(
                            EventCancelFacts(status: status, startedActivities: started, channelCarriesEnd: carries, tokenActivitiesTakeEnd: tokens))
                        if EventLifecycle.finalStates.contains(status) {
                            #expect(plan == nil)
                        } else {
                            #expect(
                                plan == (started && (carries || tokens) ? .endActivities : .closeQuietly), "\(status) \(started) \(carries) \(tokens)"
                            )
                        }
                    }
                }
            }
        }
    }
}

@Suite struct QuietCancelChannelPlanTests {
    /// For each channel state, what a quiet cancel leaves the event's current channel in and does (`-`: nothing).
    static let table: [ChannelLifecycle.State: String] = [
        .planned: "deleted nothing", .createFailed: "deleted nothing",
        .open: "deleting deleteChannel(attempt: 1)", .ending: "deleting deleteChannel(attempt: 1)",
        // A create whose outcome is not known yet is left to settle; the rest are no current channel.
        .creating: "-", .createUnknown: "-", .ended: "-", .deleting: "-", .deleted: "-", .lost: "-",
    ]

    @Test func everyChannelStateDoesWhatTheTableSays() {
        #expect(Set(Self.table.keys) == Set(ChannelLifecycle.State.allCases))
        for (state, expected) in Self.table {
            let plan = QuietCancelChannelPlan.plan(ChannelLifecycle(state: state, attempt: 2))
            #expect(plan.map { "\($0.next.state.rawValue) \($0.action)" } ?? "-" == expected, "\(state)")
        }
        #expect(QuietCancelChannelPlan.plan(nil) == nil, "no channel")
    }
}

@Suite struct DismissalPolicyTests {
    @Test func anEndsDismissalDateIsAtMostFourHoursAfterItGoesOut() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(DismissalPolicy.allows(now.addingTimeInterval(4 * 3600), sentAt: now, notBefore: nil))
        #expect(!DismissalPolicy.allows(now.addingTimeInterval(4 * 3600 + 1), sentAt: now, notBefore: nil))
        #expect(DismissalPolicy.allows(now.addingTimeInterval(-60), sentAt: now, notBefore: nil), "a past date dismisses at once")
        // Held until `at`: counted from then; an `at` already past counts from now.
        #expect(DismissalPolicy.allows(now.addingTimeInterval(6 * 3600), sentAt: now, notBefore: now.addingTimeInterval(2 * 3600)))
        #expect(!DismissalPolicy.allows(now.addingTimeInterval(6 * 3600 + 1), sentAt: now, notBefore: now.addingTimeInterval(2 * 3600)))
        #expect(!DismissalPolicy.allows(now.addingTimeInterval(4 * 3600 + 1), sentAt: now, notBefore: now.addingTimeInterval(-3600)))
    }
}
