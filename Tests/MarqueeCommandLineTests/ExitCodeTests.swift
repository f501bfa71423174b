import Foundation
import MarqueeCommandLine
import Testing

@Suite struct ExitCodeTests {
    @Test func oneMeaningPerCodeAndSeventyFiveIsATemporaryFailure() {
        #expect(ExitCode.temporaryFailure.rawValue == 75 && ExitCode.temporaryFailure.meaning.hasPrefix("temporary failure"))
        #expect(ExitCode.failure.rawValue == 1 && ExitCode.failure.meaning.contains("409"))
        #expect(ExitCode.allCases.filter { $0.meaning.contains("409") } == [.failure], "a conflict has one code")
    }

    @Test func helpListsTheGivenCodesWrappedAtOneHundredColumns() {
        let help = ExitCode.help([.success, .failure, .temporaryFailure])
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.first == "Exit codes:")
        #expect(lines.allSatisfy { $0.count <= 100 }, "\(help)")
        #expect(lines.contains("  0   success"))
        #expect(lines.contains { $0.hasPrefix("  1   refused: ") } && lines.contains { $0.hasPrefix("  75  temporary failure") })
        #expect(lines.filter { $0.hasPrefix("      ") }.count >= 1, "a long meaning continues indented")
        #expect(!help.contains("64 "))
    }
}

@Suite struct ExitCodeDocumentationTests {
    /// The README's exit-code table is this enum's, row for row (backticks aside), so the two cannot drift apart.
    @Test func theReadmeTableIsTheEnum() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let rows = readme.split(separator: "\n").compactMap { line -> (Int32, String)? in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 4, let code = Int32(cells[1]), ExitCode(rawValue: code) != nil else { return nil }
            return (code, cells[2].replacingOccurrences(of: "`", with: ""))
        }
        #expect(rows.map(\.0) == ExitCode.allCases.map(\.rawValue))
        for (code, meaning) in rows { #expect(meaning == ExitCode(rawValue: code)?.meaning, "exit \(code)") }
    }
}
