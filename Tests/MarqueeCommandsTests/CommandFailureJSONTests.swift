import MarqueeCommandLine
import MarqueeCore
import Testing

@Suite struct CommandFailureJSONTests {
    /// `--json` errors have the API's shape: `field` is always there, `null` when no argument is at fault.
    @Test func fieldIsNullWhenNoArgumentIsAtFault() {
        let unreachable = CommandFailure("cannot reach the database", exitCode: .unavailable, code: "database_unavailable")
        #expect(unreachable.json == ["error": ["code": "database_unavailable", "message": "cannot reach the database", "field": .null]])
        #expect(unreachable.json.jsonString.contains(#""field":null"#), "\(unreachable.json.jsonString)")
        let named = CommandFailure("no app with id 9", code: "not_found", field: "id")
        #expect(named.json["error"]?["field"] == "id")
    }
}
