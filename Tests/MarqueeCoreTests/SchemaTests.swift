import Foundation
import MarqueeTestSupport
import Testing

@testable import MarqueeCore

@Suite struct SchemaFormatTests {
    @Test func readsTheFootballSchema() throws {
        let match = try ActivityType(jsonText: Fixtures.matchSchema)
        #expect(match.name == "MatchAttributes")
        #expect(match.attributes.fields.map(\.name) == ["homeTeam", "awayTeam", "competition", "kickoff"])
        #expect(
            match.contentState.fields.map(\.name) == ["homeScore", "awayScore", "period", "minute", "lastScorer", "kickoff", "halfWindow", "goals"])
        #expect(match.contentState.field(named: "homeScore")?.spec == FieldSpec(.int, significant: true))
        #expect(match.contentState.field(named: "lastScorer")?.spec == FieldSpec(.string, optional: true))
        #expect(match.contentState.field(named: "halfWindow")?.spec == FieldSpec(.dateRange, optional: true))
        guard case .array(let goal)? = match.contentState.field(named: "goals")?.spec.type,
            case .object(let goalSchema) = goal.type
        else {
            Issue.record("goals is not an array of objects")
            return
        }
        #expect(goalSchema.field(named: "side")?.spec.type == .enumeration(["home", "away"]))
    }

    @Test func canonicalFormRoundTrips() throws {
        for text in [Fixtures.matchSchema, Fixtures.flightSchema] {
            let type = try ActivityType(jsonText: text)
            #expect(try ActivityType(json: type.json) == type)
            #expect(try ActivityType(jsonText: type.json.jsonString).json.jsonString == type.json.jsonString)
        }
        #expect(Fixtures.flight.json["contentState"]?["delayMinutes"] == "int?")
        #expect(Fixtures.flight.json["contentState"]?["gate"] == ["type": "string", "significant": true])
    }

    /// Every schema in docs/schemas.md is a valid schema, so the documentation cannot drift from the code.
    @Test func documentedSchemasParse() throws {
        let text = try String(contentsOf: RepositoryCheckout.root.appending(path: "docs/schemas.md"), encoding: .utf8)
        let blocks = text.components(separatedBy: "```json\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        let schemas = blocks.filter { $0.contains("\"contentState\": {\n") }
        #expect(schemas.count == 2)
        for block in schemas {
            #expect(throws: Never.self) { try ActivityType(jsonText: block) }
        }
        #expect(try ActivityType(jsonText: schemas[0]) == Fixtures.match)
        #expect(try ActivityType(jsonText: schemas[1]) == Fixtures.flight)
    }

    @Test(arguments: [
        (#"[]"#, "(root)"),
        (#"{"attributes": {}, "contentState": {}}"#, "name"),
        (#"{"name": "9Bad", "attributes": {}, "contentState": {}}"#, "name"),
        (#"{"name": "A B", "attributes": {}, "contentState": {}}"#, "name"),
        (#"{"name": "A", "contentState": {}}"#, "attributes"),
        (#"{"name": "A", "attributes": {}}"#, "contentState"),
        (#"{"name": "A", "attributes": {}, "contentState": {}, "extra": 1}"#, "extra"),
        (#"{"name": "A", "attributes": [], "contentState": {}}"#, "attributes"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": "integer"}}"#, "contentState.x"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": "enum"}}"#, "contentState.x"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": 3}}"#, "contentState.x"),
        (#"{"name": "A", "attributes": {}, "contentState": {"": "int"}}"#, #"contentState[""]"#),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"optional": true}}}"#, "contentState.x.type"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "float"}}}"#, "contentState.x.type"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "int", "values": ["a"]}}}"#, "contentState.x.values"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "int", "sgnificant": true}}}"#, "contentState.x.sgnificant"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "int", "significant": "yes"}}}"#, "contentState.x.significant"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "enum"}}}"#, "contentState.x.values"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "enum", "values": []}}}"#, "contentState.x.values"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "enum", "values": ["a", 1]}}}"#, "contentState.x.values[1]"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "enum", "values": ["a", "a"]}}}"#, "contentState.x.values[1]"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "object"}}}"#, "contentState.x.fields"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "object", "fields": {"y": "nope"}}}}"#, "contentState.x.fields.y"),
        (#"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "array"}}}"#, "contentState.x.items"),
        (
            #"{"name": "A", "attributes": {}, "contentState": {"x": {"type": "array", "items": {"type": "int", "significant": true}}}}"#,
            "contentState.x.items"
        ),
        (#"{"name": "A", "attributes": {"k": "date??"}, "contentState": {}}"#, "attributes.k"),
        (#"{"name": "A", "attributes": {"k": {"type": "int", "eventKey": true}}, "contentState": {}}"#, "attributes.k.eventKey"),
        (
            #"{"name": "A", "attributes": {"k": {"type": "string", "eventKey": true}, "j": {"type": "string", "eventKey": true}}, "contentState": {}}"#,
            "attributes.j.eventKey"
        ),
        (#"{"name": "A", "attributes": {}, "contentState": {"k": {"type": "string", "eventKey": true}}}"#, "contentState.k.eventKey"),
        (
            #"{"name": "A", "attributes": {"o": {"type": "object", "fields": {"k": {"type": "string", "eventKey": true}}}}, "contentState": {}}"#,
            "attributes.o.fields.k.eventKey"
        ),
        (#"{"name": "A", "attributes": {"k": {"type": "string", "eventKey": 1}}, "contentState": {}}"#, "attributes.k.eventKey"),
    ])
    func refusesMalformedSchemasWithPath(text: String, path: String) {
        do {
            _ = try ActivityType(jsonText: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.path.description == path, "\(error)")
        }
    }

    @Test func oneStringAttributeMayBeTheEventKey() throws {
        let type = try ActivityType(
            jsonText: #"{"name": "A", "attributes": {"match": {"type": "string", "eventKey": true}, "home": "string"}, "contentState": {}}"#)
        #expect(type.eventKey == "match")
        #expect(type.json["attributes"]?["match"] == ["type": "string", "eventKey": true], "the flag survives storage")
        #expect(try ActivityType(json: type.json).eventKey == "match")
        #expect(try ActivityType(jsonText: #"{"name": "A", "attributes": {"home": "string"}, "contentState": {}}"#).eventKey == nil)
    }

    @Test func refusesNonJSONSchemaText() {
        #expect(throws: SchemaError.self) { try ActivityType(jsonText: "{name: 1}") }
    }
}
