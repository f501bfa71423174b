import Foundation
import MarqueeCore
import Testing

/// The start fan-out's decisions, without I/O.
struct StartPlannerTests {
    let planner = StartPlanner(limits: StartLimits(startsPerDeviceHour: 8, maxConcurrentActivities: 2, throttleRetryDelay: 30))
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    var waitOver: Date { now.addingTimeInterval(-1) }
    var waitAhead: Date { now.addingTimeInterval(45) }

    func member(_ os: String?, _ adjust: (inout StartCandidate) -> Void = { _ in }) -> StartCandidate {
        var candidate = StartCandidate(installation: 7, os: os.flatMap(OSVersion.init), token: String(repeating: "ab", count: 32))
        adjust(&candidate)
        return candidate
    }

    @Test func theOSVersionDecidesThePath() {
        #expect(planner.decide(member("18.0"), channelID: "Y2g=", channelWaitUntil: waitAhead, now: now) == .send(.channel))
        #expect(planner.decide(member("17.2"), channelID: "Y2g=", channelWaitUntil: waitAhead, now: now) == .send(.plain))
        #expect(planner.decide(member("17.10"), channelID: nil, channelWaitUntil: waitAhead, now: now) == .send(.plain))
        #expect(planner.decide(member(nil), channelID: "Y2g=", channelWaitUntil: waitAhead, now: now) == .send(.plain))
        #expect(planner.decide(member("17.1.2"), channelID: "Y2g=", channelWaitUntil: waitAhead, now: now) == .skip(.notStartable))
        #expect(planner.decide(member("16.4"), channelID: "Y2g=", channelWaitUntil: waitAhead, now: now) == .skip(.notStartable))
    }

    @Test func iOS18WaitsForTheChannelThenAsksForAToken() {
        #expect(planner.decide(member("18.2"), channelID: nil, channelWaitUntil: waitAhead, now: now) == .wait(until: waitAhead))
        #expect(planner.decide(member("18.2"), channelID: nil, channelWaitUntil: waitOver, now: now) == .send(.token))
    }

    @Test func membersOutsideTheAudienceOrStartedAlreadyGetNothing() {
        #expect(planner.decide(member("18.0") { $0.enabled = false }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
        #expect(planner.decide(member("18.0") { $0.token = nil }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
        #expect(planner.decide(member("18.0") { $0.startedForEvent = true }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
        for state in [StartState.accepted, .rejected, .unknown, .skipped, .sending] {
            #expect(
                planner.decide(member("18.0") { $0.runStateForToken = state }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none,
                "\(state)")
        }
        // A planned retry whose member left the audience is settled, so the run does not wait for it.
        let disabled = member("18.0") {
            $0.enabled = false
            $0.hasPlannedStart = true
        }
        #expect(planner.decide(disabled, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.disabled))
        let startedElsewhere = member("18.0") {
            $0.startedForEvent = true
            $0.hasPlannedStart = true
        }
        #expect(planner.decide(startedElsewhere, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.startedByAnotherRun))
    }

    /// One activity per device per event: what the app registered of the event holds back a start. The store reads
    /// the facts (StartRepositoryTests.eachActivityTheAppRegisteredHoldsBackItsRoundsStart): an activity of the run's
    /// round (active, pending, ended, by any route) is `hasActivityOfRound`; a dismissal while the round ran is
    /// `dismissedByUser` in every round; an activity of an earlier round, or dismissed after Marquee's end, is neither.
    @Test func anActivityTheAppRegisteredHoldsBackAStart() {
        let hasActivity = member("18.0") { $0.hasActivityOfRound = true }
        let dismissed = member("17.6") { $0.dismissedByUser = true }
        let both = member("18.0") {
            $0.hasActivityOfRound = true
            $0.dismissedByUser = true
        }
        for channelID in ["Y2g=", nil] {
            #expect(planner.decide(hasActivity, channelID: channelID, channelWaitUntil: waitOver, now: now) == .skip(.hasActivity))
            #expect(planner.decide(dismissed, channelID: channelID, channelWaitUntil: waitOver, now: now) == .skip(.dismissed))
            #expect(planner.decide(both, channelID: channelID, channelWaitUntil: waitOver, now: now) == .skip(.dismissed))
        }
        // Neither fact (an earlier round's activity, a dismissal after the end): started as any follower.
        #expect(planner.decide(member("18.0"), channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .send(.channel))
        // Before the device limit, the concurrency cap and the OS: a duplicate is the first thing ruled out.
        let limited = member("17.1") {
            $0.hasActivityOfRound = true
            $0.startsLastHour = 99
        }
        #expect(planner.decide(limited, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.hasActivity))
        // A planned retry (not due yet) whose app registered the activity meanwhile is settled at once.
        let retry = member("18.0") {
            $0.runStateForToken = .planned
            $0.retryAt = now.addingTimeInterval(20)
            $0.hasPlannedStart = true
            $0.hasActivityOfRound = true
        }
        #expect(planner.decide(retry, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.hasActivity))
        // Settled in this run, or started already (the registered activity is the started one): nothing more.
        #expect(
            planner.decide(
                member("18.0") {
                    $0.runStateForToken = .skipped
                    $0.hasActivityOfRound = true
                },
                channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
        #expect(
            planner.decide(
                member("18.0") {
                    $0.startedForEvent = true
                    $0.hasActivityOfRound = true
                },
                channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
        // Outside the audience: nothing to count.
        #expect(
            planner.decide(
                member("18.0") {
                    $0.enabled = false
                    $0.dismissedByUser = true
                },
                channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .none)
    }

    @Test func aPlannedRetryGoesWhenDue() {
        let later = now.addingTimeInterval(20)
        let waiting = member("17.4") {
            $0.runStateForToken = .planned
            $0.retryAt = later
            $0.hasPlannedStart = true
        }
        #expect(planner.decide(waiting, channelID: nil, channelWaitUntil: waitOver, now: now) == .wait(until: later))
        #expect(planner.decide(waiting, channelID: nil, channelWaitUntil: waitOver, now: later) == .send(.plain))
    }

    @Test func thePerDeviceLimitAndTheConcurrencyCapWithDirectFollowsFirst() {
        #expect(planner.decide(member("18.0") { $0.startsLastHour = 7 }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .send(.channel))
        #expect(
            planner.decide(member("18.0") { $0.startsLastHour = 8 }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.deviceLimit))
        #expect(
            planner.decide(member("18.0") { $0.concurrentEvents = 1 }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .send(.channel))
        #expect(
            planner.decide(member("18.0") { $0.concurrentEvents = 2 }, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.concurrency)
        )
        // A topic follower with one activity running keeps the last place for an event it follows itself.
        let topicOnly = member("18.0") {
            $0.followsEventDirectly = false
            $0.concurrentEvents = 1
            $0.directFollowsWaiting = 1
        }
        #expect(planner.decide(topicOnly, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .skip(.concurrency))
        var direct = topicOnly
        direct.followsEventDirectly = true
        #expect(planner.decide(direct, channelID: "Y2g=", channelWaitUntil: waitOver, now: now) == .send(.channel))
    }

    @Test func answersFollowTheNoRepeatPolicy() {
        #expect(planner.afterAnswer(.accepted, attempt: 1).state == .accepted)
        #expect(planner.afterAnswer(.unknown(reason: "timeout"), attempt: 1).state == .unknown, "a lost answer is never resent")
        let gone = planner.afterAnswer(
            .rejected(reason: "Unregistered", refusal: .gone(reason: "Unregistered", apnsTimestampMilliseconds: 5)), attempt: 1)
        #expect(gone.state == .rejected && gone.reason == "Unregistered" && gone.refusal != nil)
        let throttled = planner.afterAnswer(.throttled(reason: "TooManyRequests", retryAfter: nil), attempt: 1)
        #expect(throttled.state == .planned && throttled.retryAfter == 30 && !throttled.backOffChunk, "one later retry of that token only")
        let throttledAgain = planner.afterAnswer(.throttled(reason: "TooManyRequests", retryAfter: nil), attempt: 2)
        #expect(throttledAgain.state == .skipped && throttledAgain.reason == StartSkipReason.throttled.rawValue)
        let notDone = planner.afterAnswer(.notDone(reason: "ServiceUnavailable", retryAfter: nil), attempt: 3)
        #expect(notDone.state == .planned && notDone.backOffChunk && notDone.retryAfter == nil, "500 and 503 back off the chunk")
        let parked = planner.afterAnswer(.parkCredentials(reason: "InvalidProviderToken"), attempt: 1)
        #expect(parked.state == .planned && parked.parkApp && !parked.backOffChunk, "a refused key parks the app; the start waits for it")
    }

    @Test func aBroadcastRacingAWindowOfChannelStartsIsBroadcastAgain() {
        // The window's starts carried aps.timestamp 100; the channel's is read once they are answered.
        let cases: [(channel: Int64?, inFlight: Bool, waitedOut: Bool, expected: StartWindowFollowUp)] = [
            (nil, false, false, .none), (nil, false, true, .none), (100, false, false, .none), (100, false, true, .none),
            (nil, true, false, .waitForBroadcast), (100, true, false, .waitForBroadcast),
            (nil, true, true, .broadcastAgain), (100, true, true, .broadcastAgain),
            (101, false, false, .broadcastAgain), (101, false, true, .broadcastAgain),
            (101, true, false, .broadcastAgain), (101, true, true, .broadcastAgain),
        ]
        for c in cases {
            let followUp = planner.afterChannelWindow(
                startedWith: 100, channelTimestamp: c.channel, broadcastInFlight: c.inFlight, waitedOut: c.waitedOut)
            #expect(followUp == c.expected, "channel \(c.channel.map(String.init) ?? "nil"), in flight \(c.inFlight), waited out \(c.waitedOut)")
        }
    }

    @Test func theStartRunLifecycleNamesEveryChangeOfARunsState() {
        typealias L = StartRunLifecycle
        let table: [(StartRunState, L.Event, StartRunState?)] = [
            (.running, .firstPassDone, .rolling), (.rolling, .firstPassDone, .rolling),
            (.running, .cutoffPassed, .done), (.rolling, .cutoffPassed, .done),
            (.running, .eventEnded, .stopped), (.rolling, .eventEnded, .done),
            (.running, .eventCancelled, .stopped), (.rolling, .eventCancelled, .stopped),
            (.running, .postponed, .stopped), (.rolling, .postponed, .stopped),
        ]
        for (state, event, to) in table { #expect(L.transition(from: state, on: event) == to, "\(state) \(event)") }
        for state in [StartRunState.done, .skipped, .stopped] {
            for event in L.Event.allCases { #expect(L.transition(from: state, on: event) == nil, "\(state) is final") }
        }
        #expect(table.count == 2 * L.Event.allCases.count)
        #expect(L.openStates == [.running, .rolling] && StartRunState.openStates == L.openStates)
        #expect(L.finalStates == [.done, .skipped, .stopped])
    }

    @Test func aRunCutsChunksThenRollsIntoLatePassesUntilTheCutoff() {
        let runs = StartRunPlanner(lateStartInterval: 60)
        func facts(_ state: StartRunState, _ adjust: (inout StartRunFacts) -> Void = { _ in }) -> StartRunFacts {
            var facts = StartRunFacts(
                state: state, eventStatus: .live, planningDone: true, openChunks: 0, nextPassAt: nil,
                lateStartCutoff: now.addingTimeInterval(3600), now: now)
            adjust(&facts)
            return facts
        }
        #expect(runs.next(facts(.running) { $0.planningDone = false }) == .cutChunk)
        #expect(runs.next(facts(.running) { $0.openChunks = 3 }) == .wait(until: nil))
        #expect(runs.next(facts(.running)) == .roll(nextPassAt: now.addingTimeInterval(60)))
        #expect(runs.next(facts(.rolling) { $0.nextPassAt = now.addingTimeInterval(10) }) == .wait(until: now.addingTimeInterval(10)))
        #expect(runs.next(facts(.rolling) { $0.nextPassAt = now }) == .beginPass)
        #expect(runs.next(facts(.rolling)) == .roll(nextPassAt: now.addingTimeInterval(60)), "a late pass ended")
        #expect(runs.next(facts(.rolling) { $0.lateStartCutoff = now }) == .finish(.done))
        #expect(runs.next(facts(.running) { $0.lateStartCutoff = now.addingTimeInterval(-1) }) == .finish(.done))
        #expect(
            runs.next(
                facts(.rolling) {
                    $0.lateStartCutoff = nil
                    $0.nextPassAt = now
                }) == .beginPass, "no end: while the event lasts")
        for status in [EventStatus.ending, .ended, .cancelled] {
            #expect(
                runs.next(
                    facts(.running) {
                        $0.eventStatus = status
                        $0.planningDone = false
                    }) == .finish(.stopped))
            // After the first pass an end cuts nothing short; a cancel stops the run.
            #expect(runs.next(facts(.rolling) { $0.eventStatus = status }) == .finish(status == .cancelled ? .stopped : .done))
        }
        #expect(runs.next(facts(.done)) == .wait(until: nil))
    }
}
