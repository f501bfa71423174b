import Foundation
import Testing

@testable import MarqueeCore

/// Random states sent in every accepted input form must decode in the app to exactly what was sent.
@Suite struct EncodingPropertyTests {
    @Test func randomMatchStatesRoundTripThroughTheApp() throws {
        var random = SplitMix64(seed: 11)
        let periods = ["scheduled", "firstHalf", "halfTime", "secondHalf", "extraTime", "penalties", "fullTime"]
        for _ in 0..<300 {
            let kickoff = randomMilliseconds(&random)
            let lower = randomMilliseconds(&random)
            let upper = lower + Int64(random.next() % 10_000_000)
            let goals = (0..<random.next() % 4).map { index in
                (scorer: "Player \(index) ü", minute: Int64(random.next() % 120), side: random.next() % 2 == 0 ? "home" : "away")
            }
            let lastScorer: String? = random.next() % 2 == 0 ? "Saka" : nil
            let home = Int64(random.next() % 10)

            var input: JSONObject = [
                "homeScore": random.next() % 2 == 0 ? .int(home) : .double(Double(home)),
                "awayScore": 0,
                "period": .string(periods[Int(random.next() % UInt64(periods.count))]),
                "minute": .int(Int64(random.next() % 130)),
                "kickoff": dateInput(kickoff, &random),
                "goals": .array(goals.map { ["scorer": .string($0.scorer), "minute": .int($0.minute), "side": .string($0.side)] }),
            ]
            if let lastScorer { input["lastScorer"] = .string(lastScorer) } else if random.next() % 2 == 0 { input["lastScorer"] = .null }
            switch random.next() % 4 {
            case 0: input["halfWindow"] = [dateInput(lower, &random), dateInput(upper, &random)]
            case 1: input["halfWindow"] = ["lower": dateInput(lower, &random), "upper": dateInput(upper, &random)]
            case 2: input["halfWindow"] = ["lowerBound": dateInput(lower, &random), "upperBound": dateInput(upper, &random)]
            default: if random.next() % 2 == 0 { input["halfWindow"] = .null }
            }

            let encoded: JSONValue
            do { encoded = try Fixtures.match.encodeContentState(.object(input)) } catch {
                Issue.record("\(error) for \(JSONValue.object(input))")
                continue
            }
            #expect(encoded.byteCount < 4096)
            let state = try JSONDecoder().decode(MatchAttributes.ContentState.self, from: encoded.jsonData)
            #expect(Int64(state.homeScore) == home)
            #expect(state.period.rawValue == input["period"]?.stringValue)
            #expect(state.lastScorer == lastScorer)
            #expect(milliseconds(state.kickoff) == kickoff)
            #expect(state.goals.map { Int64($0.minute) } == goals.map(\.minute))
            if let window = state.halfWindow {
                #expect(milliseconds(window.lowerBound) == lower && milliseconds(window.upperBound) == upper)
            } else {
                #expect(input["halfWindow"] == nil || input["halfWindow"] == .null)
            }
            // App form is a fixed point: re-reading stored state changes nothing.
            #expect(try Fixtures.match.contentState.encode(encoded, dateNumbers: .referenceDate) == encoded)
        }
    }

    /// Arbitrary JSON, including near-misses of a valid state, is refused with a path or accepted and decodable.
    @Test func arbitraryInputNeverCrashes() throws {
        var random = SplitMix64(seed: 9)
        let valid = Fixtures.json(
            #"""
            {"homeScore": 1, "awayScore": 0, "period": "firstHalf", "minute": 3, "kickoff": 1795977000,
             "halfWindow": [1795977000, 1795979700], "goals": [{"scorer": "A", "minute": 2, "side": "home"}]}
            """#)
        var accepted = 0
        for round in 0..<2000 {
            var input = valid.objectValue!
            let key = input.keys[Int(random.next() % UInt64(input.count))]
            input[key] = round % 5 == 0 ? nil : randomValue(depth: 3, &random)
            let candidate: JSONValue = round % 50 == 0 ? randomValue(depth: 0, &random) : .object(input)
            if let encoded = try? Fixtures.match.encodeContentState(candidate) {
                accepted += 1
                #expect(throws: Never.self) { try JSONDecoder().decode(MatchAttributes.ContentState.self, from: encoded.jsonData) }
            }
            _ = try? Fixtures.match.patchContentState(valid, with: candidate)
        }
        #expect(accepted > 50 && accepted < 1950, "accepted \(accepted)")
    }

    @Test func iso8601AgreesWithFoundation() {
        var random = SplitMix64(seed: 5)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for _ in 0..<500 {
            let milliseconds = randomMilliseconds(&random)
            let offsetMinutes = Int(random.next() % (2 * 14 * 60 + 1)) - 14 * 60
            formatter.timeZone = TimeZone(secondsFromGMT: offsetMinutes * 60)!
            let text = formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
            #expect(ActivityDate.parseISO8601(text) == milliseconds, "\(text)")
        }
    }

    private func randomMilliseconds(_ random: inout SplitMix64) -> Int64 {
        // 2000 ... 2100, to the millisecond.
        946_684_800_000 + Int64(random.next() % 3_155_760_000_000)
    }

    /// The same instant as ISO 8601 text (UTC or an offset, with or without fraction) or Unix seconds.
    private func dateInput(_ milliseconds: Int64, _ random: inout SplitMix64) -> JSONValue {
        switch random.next() % 3 {
        case 0:
            return milliseconds % 1000 == 0 ? .int(milliseconds / 1000) : .double(Double(milliseconds) / 1000)
        case 1:
            return .string(ActivityDate.formatISO8601(milliseconds: milliseconds))
        default:
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = milliseconds % 1000 == 0 ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
            formatter.timeZone = TimeZone(secondsFromGMT: (Int(random.next() % 25) - 12) * 3600 + 1800)!
            return .string(formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000)))
        }
    }
}
