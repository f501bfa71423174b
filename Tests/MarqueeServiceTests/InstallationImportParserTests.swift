import Foundation
import MarqueeCore
import MarqueeStore
import Testing

@testable import MarqueeService

/// The import file's rows, without a database: both formats, and the rules they share with the API.
struct InstallationImportParserTests {
    static let token = String(repeating: "Ab", count: 32)
    static let now = Date(iso8601: "2026-12-01T12:00:00Z")!

    static func parse(_ format: InstallationImportFormat, _ lines: [String]) -> [Result<ImportedInstallation, InstallationImportProblem>] {
        var parser = InstallationImportParser(format: format, now: now)
        return lines.enumerated().compactMap { index, line in parser.parse(Array(line.utf8)[...], line: index + 1) }
    }

    static func problem(_ result: Result<ImportedInstallation, InstallationImportProblem>) -> InstallationImportProblem? {
        if case .failure(let problem) = result { problem } else { nil }
    }

    @Test func csvRowsTakeTheHeadersColumnsAndLeaveEmptyCellsAlone() throws {
        let results = Self.parse(
            .csv,
            [
                "installationId,pushToStartToken,osVersion,appBuild,locale,frequentPushesEnabled,liveActivitiesEnabled,events,eventIds,topics,registeredAt",
                "phone-1,\(Self.token),17.2.1,412,\"en,GB\",false,1,match-1;match-2;match-1,7,team:a; team:b,2026-11-01T10:00:00Z\r",
                "   ",
                "phone-2,,,,,,,,,,2026-11-01T10:00:00.250Z",
            ])
        #expect(results.count == 2, "the header and the blank line give no row")
        let first = try results[0].get()
        #expect(first.line == 2 && first.installationID == "phone-1" && first.pushToStartToken == Self.token.lowercased())
        #expect(first.osVersion == "17.2.1" && first.appBuild == "412" && first.locale == "en,GB")
        #expect(first.frequentPushesEnabled == false && first.liveActivitiesEnabled == true)
        #expect(first.follows == ImportedFollows(events: [.externalID("match-1"), .externalID("match-2"), .id(7)], topics: ["team:a", "team:b"]))
        let second = try results[1].get()
        #expect(second.line == 4 && second.pushToStartToken == nil && second.osVersion == nil && second.frequentPushesEnabled == nil)
        #expect(second.follows == ImportedFollows(), "with follow columns in the header, empty cells mean following nothing")
        let withoutFollows = try Self.parse(.csv, ["registeredAt,installationId", "2026-11-01T10:00:00Z,phone-3"])[0].get()
        #expect(withoutFollows.follows == nil, "without follow columns the stored follows stay")
    }

    @Test func csvProblemsNameTheLineAndTheField() {
        let header = "installationId,pushToStartToken,osVersion,events,eventIds,registeredAt"
        let cases: [(String, String?)] = [
            ("phone,abc,,,,2026-11-01T10:00:00Z", "pushToStartToken"),
            ("phone,,17.x,,,2026-11-01T10:00:00Z", "osVersion"),
            ("phone,,,,seven,2026-11-01T10:00:00Z", "eventIds"),
            (",,,,,2026-11-01T10:00:00Z", "installationId"),
            ("phone,,,,,yesterday", "registeredAt"),
            ("phone,,,,,2026-12-02T12:00:00Z", "registeredAt"),
            ("phone,,,,2026-11-01T10:00:00Z", nil),
            ("\"phone,,,,,2026-11-01T10:00:00Z", nil),
            ("\"phone\"x,,,,,2026-11-01T10:00:00Z", nil),
            (
                "phone,,,\(Array(repeating: "m", count: 501).enumerated().map { "m\($0.offset)" }.joined(separator: ";")),,2026-11-01T10:00:00Z",
                "follows"
            ),
        ]
        for (line, field) in cases {
            let results = Self.parse(.csv, [header, line])
            let problem = Self.problem(results[0])
            #expect(problem?.line == 2 && problem?.field == field, "\(line): \(String(describing: problem))")
        }
    }

    @Test func aBadHeaderRefusesEveryLine() {
        for header in ["installationId,color,registeredAt", "installationId,pushToStartToken", "installationId,registeredAt,installationId"] {
            let results = Self.parse(.csv, [header, "phone,2026-11-01T10:00:00Z"])
            #expect(results.count == 2 && Self.problem(results[0])?.line == 1 && Self.problem(results[1])?.line == 2, "\(header)")
        }
    }

    @Test func jsonLinesUseTheAPIsFieldsAndItsRules() throws {
        let results = Self.parse(
            .jsonl,
            [
                #"{"installationId": "phone-1", "pushToStartToken": "\#(Self.token)", "osVersion": "18.1", "appBuild": null, "follows": {"events": [{"event": 4}, {"externalId": "m"}, {"event": 4}], "topics": ["t"]}, "registeredAt": "2026-11-01T10:00:00Z"}"#,
                #"{"installationId": "phone-2", "registeredAt": "2026-11-01T10:00:00Z", "follows": null}"#,
                #"{"installationId": "phone-3", "registeredAt": "2026-11-01T10:00:00Z", "colour": "red"}"#,
                #"{"installationId": "phone-4", "registeredAt": "2026-11-01T10:00:00Z", "follows": {"events": [{"event": 1, "externalId": "m"}]}}"#,
                #"{"installationId": "phone-5"}"#,
                #"{"installationId": "phone-6", "registeredAt": "2026-11-01T10:00:00Z", "locale": ""}"#,
                #"{"installationId": "phone-7", "#,
                "[1, 2]",
            ])
        let first = try results[0].get()
        #expect(first.pushToStartToken == Self.token.lowercased() && first.osVersion == "18.1" && first.appBuild == nil)
        #expect(first.follows == ImportedFollows(events: [.id(4), .externalID("m")], topics: ["t"]))
        #expect(try results[1].get().follows == nil, "null follows leave the stored ones alone")
        let fields = results.dropFirst(2).map { Self.problem($0)?.field }
        #expect(fields == ["colour", "follows.events[0]", "registeredAt", "locale", nil, nil], "\(results.dropFirst(2).map { Self.problem($0) })")
        #expect(results.dropFirst(2).map { Self.problem($0)?.line } == [3, 4, 5, 6, 7, 8])
    }

    @Test func cellsFollowRFC4180OnOneLine() throws {
        func cells(_ line: String) throws -> [String] { try InstallationImportParser.cells(Array(line.utf8)[...]).get() }
        #expect(try cells(#"a,"b,c","d ""e""",,"#) == ["a", "b,c", #"d "e""#, "", ""])
        #expect(try cells("") == [""])
        #expect(try cells(#"a"b,"","""""#) == [#"a"b"#, "", #"""#], "a quote inside an unquoted cell is text")
        #expect(throws: CSVLineError.self) { try cells(#""a"b"#) }
        #expect(throws: CSVLineError.self) { try cells(#"a,"b"#) }
    }

    @Test func theLineReaderNumbersLinesAcrossBlocks() throws {
        let url = FileManager.default.temporaryDirectory.appending(path: "marquee-lines-\(UUID().uuidString)")
        let long = String(repeating: "x", count: 3 << 20)
        try Data("one\n\(long)\nthree".utf8).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        var reader = LineReader(handle: try FileHandle(forReadingFrom: url))
        var lines: [(Int, Int)] = []
        while let line = try reader.next() { lines.append((reader.line, line.count)) }
        #expect(lines.map(\.0) == [1, 2, 3] && lines.map(\.1) == [3, 3 << 20, 5])
        #expect(reader.bytesRead == 3 + 1 + (3 << 20) + 1 + 5)
    }
}
