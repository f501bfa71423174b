import MarqueeCore
import Testing

@Suite struct JSONObjectTests {
    /// Objects switch to a key index past a dozen members; both forms must behave the same.
    @Test(arguments: [3, 12, 13, 40])
    func membersKeepOrderAcrossSetRemoveAndReplace(count: Int) throws {
        var object = JSONObject()
        for n in 0..<count { object["k\(n)"] = .int(Int64(n)) }
        #expect(object.keys == (0..<count).map { "k\($0)" })
        object["k1"] = "replaced"
        #expect(object.keys[1] == "k1" && object["k1"] == "replaced")
        #expect(object.removeValue(forKey: "k0") == .int(0))
        #expect(object.removeValue(forKey: "missing") == nil)
        #expect(object["k0"] == nil)
        object["k0"] = true
        #expect(object.keys.first == "k1" && object.keys.last == "k0")
        #expect(object["k\(count - 1)"] == .int(Int64(count - 1)))
        #expect(object.count == count)
        #expect(Array(object.map(\.key)) == object.keys)
    }

    @Test func equalityIgnoresOrderAndRepresentation() throws {
        var forward = JSONObject()
        var backward = JSONObject()
        for n in 0..<20 { forward["k\(n)"] = .int(Int64(n)) }
        for n in (0..<20).reversed() { backward["k\(n)"] = .int(Int64(n)) }
        #expect(forward == backward)
        backward["k5"] = 6
        #expect(forward != backward)
        var small: JSONObject = ["a": 1, "b": 2]
        #expect(small == ["b": 2, "a": 1])
        small["c"] = 3
        #expect(small != ["a": 1, "b": 2])
    }

    @Test func parsingRefusesDuplicateKeysInLargeObjects() {
        let members = (0..<30).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: "{\(members),\"k7\":0}") }
        #expect((try? JSONValue(parsing: "{\(members)}"))?.objectValue?.count == 30)
    }
}
