// What docs/ says of the commands holds (issue 48): the simulator has no --log-format, states read back from
// jsonb may not keep declaration order, and reconcile's columns are explained where they are printed.
import Foundation
import MarqueeCommandLine
import Testing

@testable import MarqueeCommands

@Suite struct DocsMatchTheCodeTests {
    static func document(_ path: String) throws -> String {
        try String(contentsOf: ServeDefaultsTests.root.appending(path: path), encoding: .utf8)
    }

    @Test func theSimulatorHasNoLogFormatAndTheDocsSayNone() throws {
        guard case .help(let help) = try CommandParser(root: marqueeCommand, environment: [:]).parse(["simulator", "--help"]) else {
            Issue.record("simulator --help is not help")
            return
        }
        #expect(!help.contains("--log-format"))
        let operations = try Self.document("docs/operations.md")
        #expect(!operations.contains("`serve` and the simulator log to stderr, one line per record, `logfmt` by default"))
        #expect(operations.contains("(it has no `--log-format`)"))
    }

    @Test func schemasDoesNotPromiseDeclarationOrderOfStoredStates() throws {
        let schemas = try Self.document("docs/schemas.md")
        #expect(!schemas.contains("Marquee writes keys in that order, so its output is deterministic"))
        #expect(schemas.contains("`jsonb`"))
    }

    @Test func reconcilesColumnsAreExplained() throws {
        guard case .help(let help) = try CommandParser(root: marqueeCommand, environment: [:]).parse(["channel", "reconcile", "--help"]) else {
            Issue.record("channel reconcile --help is not help")
            return
        }
        for column in ["UNRECORDED", "UNKNOWN", "MISSING", "RESURRECTED", "DELETED"] {
            #expect(help.contains("  \(column)  ") || help.contains("  \(column) "), "reconcile --help does not explain \(column)")
        }
        let api = try Self.document("docs/api.md")
        #expect(api.contains("`resurrected` (channel ids deleted here that Apple still lists"))
    }
}
