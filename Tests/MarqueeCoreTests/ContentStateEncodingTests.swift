import Foundation
import Testing

@testable import MarqueeCore

@Suite struct ContentStateEncodingTests {
    let decoder = JSONDecoder()

    @Test func footballStateDecodesInTheAppWithPlainJSONDecoder() throws {
        let ingested = Fixtures.json(
            #"""
            {
              "goals": [{"scorer": "Saka", "minute": 12, "side": "home"}, {"scorer": "Mbappé", "minute": 44.0, "side": "away"}],
              "homeScore": 1, "awayScore": 1, "period": "halfTime", "minute": 45,
              "lastScorer": "Mbappé",
              "kickoff": "2026-11-29T19:45:00.250+01:00",
              "halfWindow": {"lower": 1795977900, "upper": "2026-11-29T19:32:00Z"}
            }
            """#)
        let encoded = try Fixtures.match.encodeContentState(ingested)
        let state = try decoder.decode(MatchAttributes.ContentState.self, from: encoded.jsonData)

        #expect(state.homeScore == 1 && state.awayScore == 1 && state.minute == 45)
        #expect(state.period == .halfTime)
        #expect(state.lastScorer == "Mbappé")
        #expect(state.goals == [.init(scorer: "Saka", minute: 12, side: .home), .init(scorer: "Mbappé", minute: 44, side: .away)])
        #expect(milliseconds(state.kickoff) == milliseconds(isoDate("2026-11-29T19:45:00.250+01:00")))
        #expect(milliseconds(state.kickoff) == 1_795_977_900_250)
        #expect(milliseconds(state.halfWindow!.lowerBound) == 1_795_977_900_000)
        #expect(milliseconds(state.halfWindow!.upperBound) == milliseconds(isoDate("2026-11-29T19:32:00Z")))

        // Keys come out in declaration order (Foundation's JSONEncoder on Linux uses hash order; any order decodes).
        #expect(encoded.objectValue?.keys == ["homeScore", "awayScore", "period", "minute", "lastScorer", "kickoff", "halfWindow", "goals"])
        #expect(encoded["goals"]?.arrayValue?[1]["minute"] == .int(44))
    }

    @Test func outputEqualsWhatTheAppsJSONEncoderWrites() throws {
        let kickoff = Date(timeIntervalSince1970: 1_795_459_500.25)
        let appState = MatchAttributes.ContentState(
            homeScore: 2, awayScore: 0, period: .secondHalf, minute: 61, lastScorer: nil, kickoff: kickoff,
            halfWindow: Date(timeIntervalSince1970: 1_795_462_200)...Date(timeIntervalSince1970: 1_795_465_020.5),
            goals: [])
        let appJSON = try JSONValue(parsing: try JSONEncoder().encode(appState))
        let ingested = Fixtures.json(
            #"""
            {"homeScore": 2, "awayScore": 0, "period": "secondHalf", "minute": 61, "lastScorer": null,
             "kickoff": 1795459500.25, "halfWindow": [1795462200, "2026-11-23T20:17:00.500Z"], "goals": []}
            """#)
        let ours = try Fixtures.match.encodeContentState(ingested)
        // JSONEncoder writes whole doubles without ".0" and keys in hash order; compare keys as sets, numbers as numbers.
        #expect(Set(ours.objectValue!.keys) == Set(appJSON.objectValue!.keys))
        for key in appJSON.objectValue!.keys {
            #expect(Self.numbersAsDoubles(ours[key]!) == Self.numbersAsDoubles(appJSON[key]!), "\(key)")
        }
        #expect(try decoder.decode(MatchAttributes.ContentState.self, from: ours.jsonData) == appState)
    }

    @Test func flightStateAndAttributesDecode() throws {
        let flight = Fixtures.flight
        let state = try flight.encodeContentState(
            Fixtures.json(
                #"""
                {"gate": "B32", "status": "boarding",
                 "boarding": {"lowerBound": "2026-11-29T07:05:00-05:00", "upperBound": "2026-11-29T07:35:00.999-05:00"},
                 "departure": 1795435800}
                """#))
        let decoded = try decoder.decode(FlightAttributes.ContentState.self, from: state.jsonData)
        #expect(decoded.gate == "B32" && decoded.status == .boarding && decoded.delayMinutes == nil)
        #expect(milliseconds(decoded.boarding.lowerBound) == milliseconds(isoDate("2026-11-29T07:05:00-05:00")))
        #expect(milliseconds(decoded.boarding.upperBound) == milliseconds(isoDate("2026-11-29T07:35:00.999-05:00")))
        #expect(milliseconds(decoded.departure) == 1_795_435_800_000)
        #expect(state["delayMinutes"] == nil)

        let attributes = try flight.encodeAttributes(["flightNumber": "UA 1234", "origin": "SFO", "destination": "JFK"])
        #expect(
            try decoder.decode(FlightAttributes.self, from: attributes.jsonData)
                == FlightAttributes(flightNumber: "UA 1234", origin: "SFO", destination: "JFK"))
    }

    @Test func datesAreWrittenAsReferenceDateSeconds() throws {
        let state = try Fixtures.flight.encodeContentState(
            Fixtures.json(
                #"""
                {"gate": "A1", "status": "scheduled", "boarding": ["2001-01-01T00:00:01Z", "2001-01-01T00:00:02.25Z"],
                 "departure": "2026-11-29T15:00:00.123456789Z"}
                """#))
        #expect(state["boarding"] == [1.0, 2.25])
        // Rounded to the millisecond, written with at most three decimals.
        #expect(state["departure"]?.jsonString == "817657200.123")
    }

    @Test(arguments: [
        ("2026-11-29T18:30:00Z", Int64(1_795_977_000_000)),
        ("2026-11-29t18:30:00z", 1_795_977_000_000),
        ("2026-11-29 18:30:00+00:00", 1_795_977_000_000),
        ("2026-11-29T19:30:00+01:00", 1_795_977_000_000),
        ("2026-11-29T13:00:00-05:30", 1_795_977_000_000),
        ("2026-11-29T18:30:00.5Z", 1_795_977_000_500),
        ("2026-11-29T18:30:00.0004Z", 1_795_977_000_000),
        ("2026-11-29T18:30:00.0005Z", 1_795_977_000_001),
        ("2026-11-29T18:30:59.9999Z", 1_795_977_060_000),
        ("2024-02-29T00:00:00Z", 1_709_164_800_000),
        ("1970-01-01T00:00:00Z", 0),
    ])
    func parsesISO8601(text: String, expected: Int64) {
        #expect(ActivityDate.parseISO8601(text) == expected)
    }

    @Test(arguments: [
        "2026-11-29T18:30:00", "2026-11-29", "2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2026-11-31T00:00:00Z",
        "2026-11-29T24:00:00Z", "2026-11-29T18:60:00Z", "2026-11-29T18:30:60Z", "2026-11-29T18:30:00.Z",
        "2026-11-29T18:30:00.1234567890Z", "2026-11-29T18:30:00+0100", "2026-11-29T18:30:00+24:00", "26-11-29T18:30:00Z",
        "1969-12-31T23:59:59Z", "2200-01-01T00:00:00Z", "2026-11-29T18:30:00Z ", "٢٠٢٦-11-29T18:30:00Z",
    ])
    func refusesBadISO8601(text: String) {
        #expect(ActivityDate.parseISO8601(text) == nil)
    }

    @Test func formatsISO8601() {
        #expect(ActivityDate.formatISO8601(milliseconds: 1_795_977_000_050) == "2026-11-29T18:30:00.050Z")
        #expect(ActivityDate.formatISO8601(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(ActivityDate.formatISO8601(milliseconds: -1) == "1969-12-31T23:59:59.999Z")
        var random = SplitMix64(seed: 3)
        for _ in 0..<500 {
            let value = Int64(random.next() % UInt64(ActivityDate.acceptedRange.upperBound))
            #expect(ActivityDate.parseISO8601(ActivityDate.formatISO8601(milliseconds: value)) == value)
        }
    }

    @Test(arguments: [
        (
            #"{"awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": []}"#,
            "contentState.homeScore", ValidationError.Kind.missingField
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "possession": 50}"#,
            "contentState.possession", .unknownField
        ),
        (
            #"{"homeScore": "1", "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": []}"#,
            "contentState.homeScore", .wrongType(expected: "int", found: "string")
        ),
        (
            #"{"homeScore": 1.5, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": []}"#,
            "contentState.homeScore", .wrongType(expected: "int", found: "double")
        ),
        (
            #"{"homeScore": null, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": []}"#,
            "contentState.homeScore", .wrongType(expected: "int", found: "null")
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "FirstHalf", "minute": 1, "kickoff": 0, "goals": []}"#,
            "contentState.period",
            .notInEnum("FirstHalf", allowed: ["scheduled", "firstHalf", "halfTime", "secondHalf", "extraTime", "penalties", "fullTime"])
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": "yesterday", "goals": []}"#,
            "contentState.kickoff", .badDate
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 1795458600000, "goals": []}"#,
            "contentState.kickoff", .badDate
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": true, "goals": []}"#,
            "contentState.kickoff", .wrongType(expected: "date", found: "bool")
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "halfWindow": [2, 1]}"#,
            "contentState.halfWindow", .invertedDateRange
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "halfWindow": [1]}"#,
            "contentState.halfWindow", .wrongType(expected: #"dateRange ([lower, upper] or {"lower", "upper"})"#, found: "array")
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "halfWindow": {"lower": 1}}"#,
            "contentState.halfWindow.upper", .missingField
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "halfWindow": {"lower": 1, "upper": 2, "mid": 1}}"#,
            "contentState.halfWindow.mid", .unknownField
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [], "halfWindow": [1, "x"]}"#,
            "contentState.halfWindow[1]", .badDate
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [{"scorer": "A", "minute": "5", "side": "home"}]}"#,
            "contentState.goals[0].minute", .wrongType(expected: "int", found: "string")
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": [null]}"#,
            "contentState.goals[0]", .wrongType(expected: "object", found: "null")
        ),
        (
            #"{"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 1, "kickoff": 0, "goals": {}}"#,
            "contentState.goals", .wrongType(expected: "array", found: "object")
        ),
        (#"[1]"#, "contentState", .wrongType(expected: "object", found: "array")),
    ])
    func refusesBadValuesNamingTheField(text: String, path: String, kind: ValidationError.Kind) {
        do {
            _ = try Fixtures.match.encodeContentState(Fixtures.json(text))
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.path.description == path)
            #expect(error.kind == kind)
            #expect(error.description.hasPrefix(path + ": "))
        }
    }

    @Test func patchesMergeIntoThePreviousState() throws {
        let match = Fixtures.match
        let previous = try match.encodeContentState(
            Fixtures.json(
                #"""
                {"homeScore": 0, "awayScore": 0, "period": "firstHalf", "minute": 10, "kickoff": "2026-11-29T18:45:00Z",
                 "halfWindow": ["2026-11-29T18:45:00Z", "2026-11-29T19:30:00Z"], "goals": []}
                """#))
        // A stored state goes through text and back, as it would through the database.
        let stored = try JSONValue(parsing: previous.jsonString)

        let next = try match.patchContentState(
            stored,
            with: Fixtures.json(
                #"""
                {"homeScore": 1, "minute": 12.0, "lastScorer": "Saka", "goals": [{"scorer": "Saka", "minute": 12, "side": "home"}]}
                """#))
        let state = try decoder.decode(MatchAttributes.ContentState.self, from: next.jsonData)
        #expect(state.homeScore == 1 && state.minute == 12 && state.lastScorer == "Saka" && state.goals.count == 1)
        #expect(milliseconds(state.kickoff) == milliseconds(isoDate("2026-11-29T18:45:00Z")))
        #expect(next["halfWindow"] == previous["halfWindow"])
        #expect(match.significantChanges(from: stored, to: next).map(\.description) == ["contentState.homeScore"])

        // null removes an optional field; a required one cannot be removed.
        let cleared = try match.patchContentState(next, with: ["lastScorer": nil, "halfWindow": nil])
        #expect(cleared["lastScorer"] == nil && cleared["halfWindow"] == nil)
        #expect(throws: ValidationError(.wrongType(expected: "int", found: "null"), at: ["contentState", "homeScore"])) {
            try match.patchContentState(next, with: ["homeScore": nil])
        }
        #expect(throws: ValidationError(.unknownField, at: ["contentState", "extra"])) {
            try match.patchContentState(next, with: ["extra": 1])
        }
        // A patch that leaves the state incomplete is refused when the whole is checked.
        #expect(throws: ValidationError(.missingField, at: ["contentState", "homeScore"])) {
            try match.patchContentState(["awayScore": 0], with: ["minute": 1])
        }
    }

    @Test func significantChanges() throws {
        let flight = Fixtures.flight
        let base = try flight.encodeContentState(
            Fixtures.json(
                #"""
                {"gate": "B32", "status": "scheduled", "boarding": [1795435800, 1795437600], "departure": 1795438800}
                """#))
        let moved = try flight.patchContentState(base, with: ["boarding": [1_795_436_000, 1_795_437_600], "delayMinutes": 5])
        #expect(flight.significantChanges(from: base, to: moved).isEmpty)
        let gate = try flight.patchContentState(base, with: ["gate": "C4", "status": "delayed"])
        #expect(flight.significantChanges(from: base, to: gate).map(\.description) == ["contentState.gate", "contentState.status"])
        #expect(flight.significantChanges(from: nil, to: base).map(\.description) == ["contentState.gate", "contentState.status"])

        // Significance inside a nested object, and a whole significant array.
        let schema = try ObjectSchema(
            json: Fixtures.json(
                #"""
                {"score": {"type": "object", "fields": {"home": {"type": "int", "significant": true}, "note": "string"}},
                 "cards": {"type": "array", "items": "string", "significant": true}}
                """#))
        let a: JSONValue = ["score": ["home": 1, "note": "x"], "cards": ["A"]]
        #expect(schema.significantChanges(from: a, to: ["score": ["home": 1, "note": "y"], "cards": ["A"]]).isEmpty)
        #expect(
            schema.significantChanges(from: a, to: ["score": ["home": 2, "note": "x"], "cards": ["A", "B"]])
                == [["score", "home"], ["cards"]])
    }

    @Test func nestedObjectsMergeFieldByField() throws {
        let type = ActivityType(
            name: "Scoreboard", attributes: ObjectSchema([]),
            contentState: try ObjectSchema(
                json: Fixtures.json(
                    #"""
                    {"score": {"type": "object", "fields": {"home": {"type": "int", "significant": true}, "note": "string?"}},
                     "updated": "date"}
                    """#)))
        let previous = try type.encodeContentState(["score": ["home": 1, "note": "x"], "updated": "2026-11-29T18:30:00Z"])
        let next = try type.patchContentState(previous, with: ["score": ["home": 2]])
        #expect(next == ["score": ["home": 2, "note": "x"], "updated": previous["updated"]!])
        #expect(type.significantChanges(from: previous, to: next) == [["contentState", "score", "home"]])
        #expect(throws: ValidationError(.wrongType(expected: "int", found: "string"), at: ["contentState", "score", "home"])) {
            try type.patchContentState(previous, with: ["score": ["home": "2"]])
        }
        #expect(throws: ValidationError(.unknownField, at: ["contentState", "score", "away"])) {
            try type.patchContentState(previous, with: ["score": ["away": 2]])
        }
    }

    @Test func optionalArrayItemsAcceptNull() throws {
        let schema = try ObjectSchema(json: ["list": ["type": "array", "items": "int?"]])
        #expect(try schema.encode(["list": [1, nil, 3.0]]) == ["list": [1, nil, 3]])
        struct App: Decodable { var list: [Int?] }
        let decoded = try JSONDecoder().decode(App.self, from: try schema.encode(["list": [1, nil]]).jsonData)
        #expect(decoded.list == [1, nil])
    }

    private static func numbersAsDoubles(_ value: JSONValue) -> JSONValue {
        switch value {
        case .int(let int): .double(Double(int))
        case .array(let array): .array(array.map(numbersAsDoubles))
        case .object(let object):
            .object(object.reduce(into: JSONObject()) { $0[$1.key] = numbersAsDoubles($1.value) })
        default: value
        }
    }
}
