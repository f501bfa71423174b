import Foundation
import Testing

@testable import MarqueeCore

@Suite struct JSONParsingTests {
    @Test func parsesEveryKindAndKeepsIntAndDoubleApart() throws {
        let value = try JSONValue(parsing: #" {"a": 1, "b": 1.0, "c": -0.5e1, "d": [true, false, null], "e": "x", "f": {}} "#)
        #expect(value["a"] == .int(1))
        #expect(value["b"] == .double(1.0))
        #expect(value["c"] == .double(-5))
        #expect(value["d"] == [true, false, nil])
        #expect(value["e"] == "x")
        #expect(value["f"] == .object([:]))
        #expect(value.objectValue?.keys == ["a", "b", "c", "d", "e", "f"])
    }

    @Test func topLevelScalarsAreJSONTexts() throws {
        #expect(try JSONValue(parsing: "42") == 42)
        #expect(try JSONValue(parsing: "\"s\"") == "s")
        #expect(try JSONValue(parsing: " null ") == nil)
    }

    @Test func integerEdges() throws {
        #expect(try JSONValue(parsing: "9223372036854775807") == .int(.max))
        #expect(try JSONValue(parsing: "-9223372036854775808") == .int(.min))
        // Past Int64 an integer becomes a double.
        #expect(try JSONValue(parsing: "9223372036854775808") == .double(9_223_372_036_854_775_808))
        #expect(try JSONValue(parsing: "-0") == .int(0))
        #expect(try JSONValue(parsing: "999999999999999999") == .int(999_999_999_999_999_999))
        #expect(try JSONValue(parsing: "-999999999999999999") == .int(-999_999_999_999_999_999))
        #expect(try JSONValue(parsing: "1000000000000000000") == .int(1_000_000_000_000_000_000))
        #expect(try JSONValue(parsing: "[0,-1,10]") == [0, -1, 10])
        #expect(try JSONValue(parsing: "1E2") == .double(100))
        #expect(try JSONValue(parsing: "1e-400") == .double(0))
    }

    @Test func stringEscapesAndUnicode() throws {
        let value = try JSONValue(parsing: #""a\"b\\c\/d\b\f\n\r\t\u00e9\u20AC\ud83d\ude00 é😀""#)
        #expect(value == .string("a\"b\\c/d\u{8}\u{c}\n\r\té€😀 é😀"))
        let nul = try JSONValue(parsing: #""a\u0000b""#)
        #expect(nul == .string("a\u{0}b"))
        #expect(nul.jsonString == #""a\u0000b""#)
    }

    @Test(arguments: [
        ("", JSONParseError.Reason.unexpectedEnd, 0),
        ("[1,]", .unexpectedCharacter(UInt8(ascii: "]")), 3),
        ("{\"a\":1,}", .unexpectedCharacter(UInt8(ascii: "}")), 7),
        ("01", .invalidNumber, 0),
        ("-", .invalidNumber, 0),
        ("1.", .invalidNumber, 0),
        (".5", .unexpectedCharacter(UInt8(ascii: ".")), 0),
        ("1e", .invalidNumber, 0),
        ("+1", .unexpectedCharacter(UInt8(ascii: "+")), 0),
        ("1e400", .numberOutOfRange, 0),
        ("NaN", .unexpectedCharacter(UInt8(ascii: "N")), 0),
        ("tru", .unexpectedEnd, 3),
        ("trux", .unexpectedCharacter(UInt8(ascii: "t")), 0),
        ("\"a\u{01}\"", .controlCharacterInString, 2),
        ("\"\\x\"", .invalidEscape, 1),
        ("\"\\u12G4\"", .invalidEscape, 5),
        ("\"\\ud800\"", .loneSurrogate, 1),
        ("\"\\udc00\"", .loneSurrogate, 1),
        ("\"\\ud800\\u0041\"", .loneSurrogate, 1),
        ("{\"a\":1,\"a\":2}", .duplicateKey("a"), 7),
        ("[1] 2", .trailingContent, 4),
        ("{'a':1}", .unexpectedCharacter(UInt8(ascii: "'")), 1),
        ("[1 2]", .unexpectedCharacter(UInt8(ascii: "2")), 3),
        ("/* c */ 1", .unexpectedCharacter(UInt8(ascii: "/")), 0),
        ("\u{FEFF}1", .unexpectedCharacter(0xEF), 0),
        ("\u{0B}1", .unexpectedCharacter(0x0B), 0),
    ])
    func refusesWithReasonAndOffset(text: String, reason: JSONParseError.Reason, offset: Int) {
        do {
            _ = try JSONValue(parsing: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.reason == reason, "\(text)")
            #expect(error.offset == offset, "\(text)")
        }
    }

    @Test func reportsLineAndColumn() {
        do {
            _ = try JSONValue(parsing: "{\n  \"a\": 1,\n  \"b\": tru\n}")
            Issue.record("accepted")
        } catch {
            #expect(error.line == 3)
            #expect(error.column == 8)
            #expect(error.description.contains("line 3, column 8"))
        }
    }

    @Test func refusesInvalidUTF8() {
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0xC3, 0xA9]] {
            #expect(throws: JSONParseError.self) { try JSONValue(parsing: bytes) }
        }
    }

    @Test func nestingIsCappedWithoutCrashing() throws {
        let ok = String(repeating: "[", count: JSONValue.maximumDepth) + String(repeating: "]", count: JSONValue.maximumDepth)
        #expect(throws: Never.self) { try JSONValue(parsing: ok) }
        for text in [
            String(repeating: "[", count: JSONValue.maximumDepth + 1) + String(repeating: "]", count: JSONValue.maximumDepth + 1),
            String(repeating: "[", count: 1_000_000),
            String(repeating: "{\"a\":", count: 200_000),
        ] {
            do {
                _ = try JSONValue(parsing: text)
                Issue.record("accepted")
            } catch {
                #expect(error.reason == .tooDeep(limit: JSONValue.maximumDepth))
            }
        }
    }

    @Test func randomMutationsNeverCrashAndAcceptanceImpliesFoundationAcceptance() {
        var random = SplitMix64(seed: 7)
        let seeds = [
            #"{"aps":{"timestamp":1,"content-state":{"a":[1,2.5,"x\u00e9",null,true]}}}"#,
            #"[{"k":-0.1e-2},"\\\"",{}]"#,
            "\"\u{1F600}\"",
        ].map { Array($0.utf8) }
        let alphabet = Array("{}[]\",:\\/-+.eE0123456789 \ntfnrulsa".utf8) + [0x00, 0x7F, 0xC3, 0xFF]
        var accepted = 0
        for round in 0..<4000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0..<(1 + Int(random.next() % 4)) {
                let index = Int(random.next() % UInt64(bytes.count + 1))
                let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                switch random.next() % 3 {
                case 0: bytes.insert(byte, at: index)
                case 1 where index < bytes.count: bytes[index] = byte
                default: if index < bytes.count { bytes.remove(at: index) }
                }
            }
            if let value = try? JSONValue(parsing: bytes) {
                accepted += 1
                // We are stricter than Foundation, never looser.
                #expect(
                    (try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)) != nil,
                    "\(String(decoding: bytes, as: UTF8.self))")
                #expect((try? JSONValue(parsing: value.jsonBytes)) == value)
            }
        }
        // Both outcomes must be exercised for the test to mean something.
        #expect(accepted > 200 && accepted < 3800, "accepted \(accepted)")
    }
}

@Suite struct JSONSerializationTests {
    @Test func compactAndInInsertionOrder() {
        let value: JSONValue = ["z": 1, "a": [1.5, "x", nil, false], "m": ["n": 3.0]]
        #expect(value.jsonString == #"{"z":1,"a":[1.5,"x",null,false],"m":{"n":3.0}}"#)
        #expect(value.byteCount == value.jsonString.utf8.count)
    }

    @Test func escapesOnlyWhatJSONRequires() {
        let value = JSONValue.string("q\"b\\s/é😀\n\r\t\u{8}\u{c}\u{1}\u{1F}")
        #expect(value.jsonString == #""q\"b\\s/é😀\n\r\t\b\f\u0001\u001f""#)
    }

    @Test func doublesUseShortestRoundTripForm() {
        let cases: [(Double, String)] = [
            (3, "3.0"), (0.1, "0.1"), (1e20, "1e+20"), (1e-7, "1e-07"), (-0.0, "-0.0"),
            (786_122_800.123, "786122800.123"), (.infinity, "null"), (.nan, "null"),
        ]
        for (double, text) in cases { #expect(JSONValue.double(double).jsonString == text) }
    }

    @Test func roundTripsRandomValuesAndFoundationReadsThem() throws {
        var random = SplitMix64(seed: 42)
        for _ in 0..<300 {
            let value = randomValue(depth: 0, &random)
            let parsed = try JSONValue(parsing: value.jsonBytes)
            #expect(parsed == value)
            #expect(parsed.jsonBytes == value.jsonBytes)
            #expect(throws: Never.self) { try JSONSerialization.jsonObject(with: value.jsonData, options: .fragmentsAllowed) }
        }
    }

    @Test func objectEqualityIgnoresOrder() {
        let ab: JSONValue = ["a": 1, "b": 2]
        let ba: JSONValue = ["b": 2, "a": 1]
        let int: JSONValue = ["a": 1]
        let double: JSONValue = ["a": 1.0]
        #expect(ab == ba)
        #expect(int != double)
    }

    @Test func objectMutationKeepsPlaces() {
        var object: JSONObject = ["a": 1, "b": 2, "c": 3]
        object["b"] = 20
        object["d"] = 4
        object["a"] = nil
        #expect(object.keys == ["b", "c", "d"])
        #expect(JSONValue.object(object).jsonString == #"{"b":20,"c":3,"d":4}"#)
        #expect(object.removeValue(forKey: "zz") == nil)
    }
}

@Suite struct JSONPathAndMergePatchTests {
    @Test func describesPaths() {
        #expect(JSONPath(["contentState", "homeScore"]).description == "contentState.homeScore")
        #expect(JSONPath(["goals", 2, "minute"]).description == "goals[2].minute")
        #expect(JSONPath(["a", "odd key", "9x"]).description == #"a["odd key"]["9x"]"#)
        #expect(JSONPath.root.description == "(root)")
        #expect(JSONPath(["a/b", "m~n", 0]).pointer == "/a~1b/m~0n/0")
        #expect(JSONPath.root.pointer == "")
    }

    @Test func looksUpPaths() {
        let value: JSONValue = ["a": ["b": [10, 20]]]
        #expect(value[JSONPath(["a", "b", 1])] == 20)
        #expect(value[JSONPath(["a", "b", 2])] == nil)
        #expect(value[JSONPath(["a", "x"])] == nil)
        #expect(value[JSONPath.root] == value)
    }

    /// The examples of RFC 7396, appendix A.
    @Test(arguments: [
        (#"{"a":"b"}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
        (#"{"a":"b"}"#, #"{"b":"c"}"#, #"{"a":"b","b":"c"}"#),
        (#"{"a":"b"}"#, #"{"a":null}"#, #"{}"#),
        (#"{"a":"b","b":"c"}"#, #"{"a":null}"#, #"{"b":"c"}"#),
        (#"{"a":["b"]}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
        (#"{"a":"c"}"#, #"{"a":["b"]}"#, #"{"a":["b"]}"#),
        (#"{"a":{"b":"c"}}"#, #"{"a":{"b":"d","c":null}}"#, #"{"a":{"b":"d"}}"#),
        (#"{"a":[{"b":"c"}]}"#, #"{"a":[1]}"#, #"{"a":[1]}"#),
        (#"["a","b"]"#, #"["c","d"]"#, #"["c","d"]"#),
        (#"{"a":"b"}"#, #"["c"]"#, #"["c"]"#),
        (#"{"a":"foo"}"#, "null", "null"),
        (#"{"a":"foo"}"#, #""bar""#, #""bar""#),
        (#"{"e":null}"#, #"{"a":1}"#, #"{"e":null,"a":1}"#),
        (#"[1,2]"#, #"{"a":"b","c":null}"#, #"{"a":"b"}"#),
        (#"{}"#, #"{"a":{"bb":{"ccc":null}}}"#, #"{"a":{"bb":{}}}"#),
    ])
    func mergePatch(target: String, patch: String, result: String) throws {
        let merged = try JSONValue(parsing: target).merging(patch: try JSONValue(parsing: patch))
        #expect(merged.jsonString == result)
    }
}

/// A small deterministic generator for reproducible random tests.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func randomValue(depth: Int, _ random: inout SplitMix64) -> JSONValue {
    let pick = random.next() % (depth > 4 ? 5 : 7)
    switch pick {
    case 0: return nil
    case 1: return .bool(random.next() % 2 == 0)
    case 2: return .int(Int64(bitPattern: random.next()) >> Int64(random.next() % 64))
    case 3:
        let double = Double(bitPattern: random.next())
        return .double(double.isFinite ? double : Double(random.next() % 1000) / 7)
    case 4:
        let scalars: [Unicode.Scalar] = ["a", "Z", "\"", "\\", "/", "\n", "\u{0}", "\u{1F}", "é", "€", "😀", "\u{2028}", " "]
        var string = String.UnicodeScalarView()
        for _ in 0..<random.next() % 8 { string.append(scalars[Int(random.next() % UInt64(scalars.count))]) }
        return .string(String(string))
    case 5: return .array((0..<random.next() % 4).map { _ in randomValue(depth: depth + 1, &random) })
    default:
        var object = JSONObject()
        for index in 0..<random.next() % 4 { object["k\(index)\(random.next() % 3)"] = randomValue(depth: depth + 1, &random) }
        return .object(object)
    }
}
