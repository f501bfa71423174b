import MarqueeCore
import Testing

@testable import APNsSimulator

/// The simulator's allocation-free payload check must give the parser's answer whenever it gives one.
@Suite struct PayloadScannerTests {
    /// What the simulator answered before the scanner: the parser's verdict.
    static func parserAccepts(_ payload: [UInt8]) -> Bool {
        (try? JSONValue(parsing: payload))?["aps"]?.objectValue != nil
    }

    static func verdict(_ text: String) -> PayloadVerdict { PayloadScanner.verdict(Array(text.utf8)) }

    static let accepted: [String] = [
        #"{"aps":{}}"#,
        #" {"aps" : {"alert":"hi"} } "#,
        "\t\r\n{\"aps\":{\"a\":[1,2.5,-0,0.25,true,false,null,\"x\"]}}\n",
        #"{"aps":{"timestamp":1800000000,"event":"update","content-state":{"score":"1-0"}},"extra":[{},[]]}"#,
        #"{"x":"caf\u00e9 \"quoted\" \\ \/ \b\f\n\r\t","aps":{"e":"😀 \ud83d\ude00"}}"#,
        "{\"aps\":{\"t\":\"Zürich – 東京 \u{7F}\"}}",
        #"{"aps":{"n":123456789012345678901234567890}}"#,
        #"{"a":{"b":1},"b":{"a":1},"aps":{"a":{"a":{"a":1}}}}"#,
    ]

    static let rejected: [String] = [
        "", " ", "[]", "null", #""aps""#, "{}", #"{"aps":[]}"#, #"{"aps":"{}"}"#, #"{"aps":null}"#, #"{"x":{"aps":{}}}"#,
        #"{"aps":{}"#, #"{"aps":{}}}"#, #"{"aps":{}} x"#, #"{"aps":{},}"#, #"{"aps":{"a":[1,]}}"#, #"{"aps" {}}"#,
        #"{aps:{}}"#, #"{'aps':{}}"#, #"{"aps":{"a":01}}"#, #"{"aps":{"a":1.}}"#, #"{"aps":{"a":-}}"#, #"{"aps":{"a":+1}}"#,
        #"{"aps":{"a":.5}}"#, #"{"aps":{"a":tru}}"#, #"{"aps":{"a":nul}}"#, #"{"aps":{"a":True}}"#,
        #"{"aps":{"a":"\x"}}"#, #"{"aps":{"a":"\u12"}}"#, #"{"aps":{"a":"\ud83d"}}"#, #"{"aps":{"a":"\ude00"}}"#,
        #"{"aps":{"a":"\ud83d\u0041"}}"#, "{\"aps\":{\"a\":\"tab\there\"}}", "{\"aps\":{\"a\":\"line\nbreak\"}}",
        #"{"aps":{},"aps":{}}"#, #"{"aps":{"a":1,"a":2}}"#, #"{"aps":{"a":{"b":1,"b":1}}}"#,
        "\u{FEFF}{\"aps\":{}}",
    ]

    /// The parser decides these: escaped or non-ASCII keys, exponents, very long numbers.
    static let undecided: [String] = [
        #"{"\u0061ps":{}}"#, #"{"ap\u0073":{},"aps":{}}"#, #"{"é":1,"aps":{}}"#, #"{"aps":{"a":1e3}}"#,
        #"{"aps":{"a":1e400}}"#, "{\"aps\":{\"a\":1\(String(repeating: "0", count: 400))}}",
    ]

    @Test func documentedCasesGetTheirVerdict() {
        for text in Self.accepted { #expect(Self.verdict(text) == .apsObject, "\(text)") }
        for text in Self.rejected { #expect(Self.verdict(text) == .rejected, "\(text)") }
        for text in Self.undecided { #expect(Self.verdict(text) == .undecided, "\(text)") }
    }

    @Test func invalidUTF8InStringsIsRejected() {
        let sequences: [[UInt8]] = [
            [0x80], [0xC0, 0xAF], [0xC1, 0xBF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF0, 0x80, 0x80, 0xAF],
            [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xFF], [0xC3], [0xE2, 0x82], [0xC3, 0x22],
        ]
        for sequence in sequences {
            let payload = Array(#"{"aps":{"a":""#.utf8) + sequence + Array(#""}}"#.utf8)
            #expect(PayloadScanner.verdict(payload) == .rejected, "\(sequence)")
            #expect(!Self.parserAccepts(payload), "\(sequence)")
        }
        let valid: [[UInt8]] = [
            [0xC2, 0x80], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80], [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF],
        ]
        for sequence in valid {
            let payload = Array(#"{"aps":{"a":""#.utf8) + sequence + Array(#""}}"#.utf8)
            #expect(PayloadScanner.verdict(payload) == .apsObject, "\(sequence)")
        }
    }

    @Test func nestingStopsWhereTheParserStops() {
        /// The top-level object, `aps`, then objects inside `aps`: `levels` objects open at the innermost.
        func nested(_ levels: Int) -> [UInt8] {
            Array((#"{"aps":"# + String(repeating: #"{"a":"#, count: levels - 2) + "{}" + String(repeating: "}", count: levels - 1)).utf8)
        }
        let deepest = nested(JSONValue.maximumDepth)
        #expect(Self.parserAccepts(deepest) && PayloadScanner.verdict(deepest) == .apsObject)
        let tooDeep = nested(JSONValue.maximumDepth + 1)
        #expect(!Self.parserAccepts(tooDeep) && PayloadScanner.verdict(tooDeep) == .rejected)
    }

    @Test func manyKeysInOneObjectAreLeftToTheParser() {
        let keys = (0..<PayloadScanner.keyCapacity + 1).map { #""k\#($0)":\#($0)"# }.joined(separator: ",")
        #expect(Self.verdict(#"{"aps":{\#(keys)}}"#) == .undecided)
        let fewer = (0..<PayloadScanner.keyCapacity - 1).map { #""k\#($0)":\#($0)"# }.joined(separator: ",")
        #expect(Self.verdict(#"{"aps":{\#(fewer)}}"#) == .apsObject)
    }

    /// Every case above, and thousands of seeded mutations of them: a verdict, when given, is the parser's.
    @Test func verdictsAgreeWithTheParser() {
        var random = SeededRandom(seed: 0x5EED)
        let alphabet = Array(#"{}[]":,\ u0aps1-.eE"#.utf8) + [0x00, 0x0A, 0x80, 0xC3, 0xA9, 0xED, 0xF0, 0x9F, 0xFF]
        var decided = 0
        var checked = 0
        for base in (Self.accepted + Self.rejected + Self.undecided).map({ Array($0.utf8) }) {
            var variants = [base]
            for _ in 0..<300 where !base.isEmpty {
                var bytes = base
                for _ in 0...Int.random(in: 0...2, using: &random) {
                    let index = Int.random(in: 0..<bytes.count, using: &random)
                    switch Int.random(in: 0..<4, using: &random) {
                    case 0: bytes[index] = alphabet.randomElement(using: &random)!
                    case 1: bytes.insert(alphabet.randomElement(using: &random)!, at: index)
                    case 2: if bytes.count > 1 { bytes.remove(at: index) }
                    default: bytes = Array(bytes[..<index])
                    }
                    if bytes.isEmpty { break }
                }
                variants.append(bytes)
            }
            for payload in variants {
                checked += 1
                let verdict = PayloadScanner.verdict(payload)
                guard verdict != .undecided else { continue }
                decided += 1
                #expect((verdict == .apsObject) == Self.parserAccepts(payload), "\(String(decoding: payload, as: UTF8.self))")
            }
        }
        // Mutations of small texts are mostly decided; a scanner that always gave up would pass the loop above.
        #expect(decided > checked * 3 / 4)
    }
}
