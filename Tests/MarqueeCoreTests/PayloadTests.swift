import Foundation
import Testing

@testable import MarqueeCore

@Suite struct PayloadTests {
    let state: JSONValue = ["homeScore": 1, "awayScore": 0]

    @Test func updateWithAlertAndSoundInsideAlert() {
        let payload = LiveActivityPayload.update(
            timestamp: 1_795_977_000, contentState: state, staleDate: Date(timeIntervalSince1970: 1_795_977_900.9),
            relevanceScore: 100,
            alert: LiveActivityAlert(title: .plain("Goal!"), body: .plain("Saka scores"), sound: "default"))
        #expect(
            payload.json.jsonString == #"""
                {"aps":{"timestamp":1795977000,"event":"update","content-state":{"homeScore":1,"awayScore":0},"stale-date":1795977900,"relevance-score":100,"alert":{"title":"Goal!","body":"Saka scores","sound":"default"}}}
                """#)
    }

    @Test func localizedAlertAndFractionalRelevance() {
        let payload = LiveActivityPayload.update(
            timestamp: 1, contentState: state, relevanceScore: 12.5,
            alert: LiveActivityAlert(title: .localized(key: "GOAL_TITLE", arguments: ["Saka"]), body: .localized(key: "GOAL_BODY")))
        #expect(
            payload.json["aps"]?["alert"] == [
                "title": ["loc-key": "GOAL_TITLE", "loc-args": ["Saka"]],
                "body": ["loc-key": "GOAL_BODY", "loc-args": []],
            ])
        #expect(payload.json["aps"]?["relevance-score"] == .double(12.5))
        #expect(payload.json["aps"]?["alert"]?["sound"] == nil)
    }

    @Test func endWithDismissalDateAndOptionalState() {
        let end = LiveActivityPayload.end(timestamp: 5, dismissalDate: Date(timeIntervalSince1970: 100))
        #expect(end.json.jsonString == #"{"aps":{"timestamp":5,"event":"end","dismissal-date":100}}"#)
        let final = LiveActivityPayload.end(timestamp: 6, contentState: state, dismissalDate: Date(timeIntervalSince1970: 0))
        #expect(final.json["aps"]?["content-state"] == state)
        #expect(final.json["aps"]?["dismissal-date"] == 0)
    }

    @Test func startCarriesAttributesAndSubscription() {
        let alert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("Arsenal v PSG"))
        let channel = LiveActivityPayload.start(
            timestamp: 7, attributesType: "MatchAttributes", attributes: ["homeTeam": "Arsenal"], contentState: state,
            alert: alert, subscription: .channel("dHN0LXNyY2gtY2hubA=="))
        #expect(
            channel.json.jsonString == #"""
                {"aps":{"timestamp":7,"event":"start","content-state":{"homeScore":1,"awayScore":0},"alert":{"title":"Kick-off","body":"Arsenal v PSG"},"attributes-type":"MatchAttributes","attributes":{"homeTeam":"Arsenal"},"input-push-channel":"dHN0LXNyY2gtY2hubA=="}}
                """#)
        let token = LiveActivityPayload.start(
            timestamp: 7, attributesType: "MatchAttributes", attributes: [:], contentState: state, alert: alert,
            subscription: .pushToken)
        #expect(token.json["aps"]?["input-push-token"] == .int(1))
        #expect(token.json["aps"]?["input-push-channel"] == nil)
    }

    @Test func theAppDecodesContentStateFromTheWholePayload() throws {
        let contentState = try Fixtures.flight.encodeContentState(
            Fixtures.json(
                #"""
                {"gate": "B32", "status": "delayed", "boarding": ["2026-11-29T07:05:00Z", "2026-11-29T07:35:00Z"],
                 "delayMinutes": 20, "departure": "2026-11-29T08:00:00.125Z"}
                """#))
        let body = LiveActivityPayload.update(timestamp: 9, contentState: contentState).bytes
        struct Envelope: Decodable {
            struct APS: Decodable {
                var timestamp: Int
                var contentState: FlightAttributes.ContentState
                enum CodingKeys: String, CodingKey {
                    case timestamp
                    case contentState = "content-state"
                }
            }
            var aps: APS
        }
        let decoded = try JSONDecoder().decode(Envelope.self, from: Data(body))
        #expect(decoded.aps.timestamp == 9)
        #expect(decoded.aps.contentState.delayMinutes == 20)
        #expect(milliseconds(decoded.aps.contentState.departure) == milliseconds(isoDate("2026-11-29T08:00:00.125Z")))
    }

    @Test func sizeLimits() throws {
        func payload(bodyLength: Int) -> LiveActivityPayload {
            .update(timestamp: 1_795_977_000, contentState: ["text": .string(String(repeating: "x", count: bodyLength))])
        }
        let overhead = payload(bodyLength: 0).bytes.count
        let deviceMax = payload(bodyLength: 4096 - overhead)
        #expect(deviceMax.bytes.count == 4096)
        #expect(try deviceMax.body(within: .ingest).count == 4096)

        let over = payload(bodyLength: 4097 - overhead)
        #expect(throws: PayloadTooLarge(size: 4097, limit: 4096)) { try over.body(within: .device) }
        #expect(try over.body(within: .broadcast).count == 4097)
        let overBroadcast = payload(bodyLength: 5121 - overhead)
        #expect(throws: PayloadTooLarge(size: 5121, limit: 5120)) { try overBroadcast.body(within: .broadcast) }
        #expect(PayloadTooLarge(size: 4097, limit: 4096).description.contains("4097 bytes"))

        // Multi-byte characters count as bytes, as APNs counts them.
        let wide = LiveActivityPayload.update(timestamp: 1, contentState: ["t": .string(String(repeating: "é", count: 2100))])
        #expect(throws: PayloadTooLarge.self) { try wide.body(within: .device) }
    }
}

@Suite struct AlertInputTests {
    @Test func readsPlainAndLocalizedAlerts() throws {
        let plain = try LiveActivityAlert(json: ["title": "Goal!", "body": "Saka 12'", "sound": "default"])
        #expect(plain == LiveActivityAlert(title: .plain("Goal!"), body: .plain("Saka 12'"), sound: "default"))
        #expect(try LiveActivityAlert(json: plain.json) == plain)

        let localized = try LiveActivityAlert(json: [
            "title": ["loc-key": "GOAL", "loc-args": ["Saka"]], "body": ["loc-key": "SCORE"], "sound": nil,
        ])
        #expect(localized == LiveActivityAlert(title: .localized(key: "GOAL", arguments: ["Saka"]), body: .localized(key: "SCORE")))
        // The API's spelling (an update's alert and a start alert alike), the same alert (issue 48).
        let camel = try LiveActivityAlert(json: ["title": ["locKey": "GOAL", "locArgs": ["Saka"]], "body": ["locKey": "SCORE"]])
        #expect(camel == localized)
        #expect(throws: ValidationError.self) { try LiveActivityAlert(json: ["title": ["locKey": "A", "loc-key": "B"], "body": "b"]) }
    }

    static let badAlerts: [(JSONValue, String, ValidationError.Kind)] = [
        (["body": "b"], "alert.title", .missingField),
        (["title": "t", "body": "b", "badge": 1], "alert.badge", .unknownField),
        (["title": 1, "body": "b"], "alert.title", .wrongType(expected: #"string or {"loc-key", "loc-args"}"#, found: "int")),
        (["title": "t", "body": ["loc-args": []]], "alert.body.loc-key", .missingField),
        (["title": "t", "body": ["loc-key": "K", "loc-args": [1]]], "alert.body.loc-args[0]", .wrongType(expected: "string", found: "int")),
        (["title": "t", "body": "b", "sound": ["critical": 1]], "alert.sound", .wrongType(expected: "string", found: "object")),
        ("text", "alert", .wrongType(expected: "object", found: "string")),
    ]

    @Test(arguments: badAlerts)
    func refusesBadAlerts(json: JSONValue, path: String, kind: ValidationError.Kind) {
        do {
            _ = try LiveActivityAlert(json: json)
            Issue.record("accepted \(json)")
        } catch {
            #expect(error.path.description == path)
            #expect(error.kind == kind)
        }
    }
}
