// serve's defaults are written once, in ServeConfiguration (and its PipelineSettings); `marquee serve --help`
// reads them there. docs/operations.md cannot, so this holds its tables of serve's flags to the same values.
import Foundation
import MarqueeCommandLine
import MarqueeService
import Testing

@testable import MarqueeCommands

@Suite struct ServeDefaultsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The default column of docs/operations.md's flag tables (section "Running"), by option name.
    static func documentedDefaults() throws -> [String: String] {
        let document = try String(contentsOf: root.appending(path: "docs/operations.md"), encoding: .utf8)
        guard let start = document.range(of: "\n## Running\n")?.upperBound else { return [:] }
        let section = document[start...].components(separatedBy: "\n## ").first ?? ""
        var defaults: [String: String] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| `--") {
            // `\|` separates choices inside a cell, not cells.
            let cells = line.replacing("\\|", with: "/").split(separator: "|", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 4, let name = cells[1].firstMatch(of: /^`--([a-z0-9-]+)/)?.1 else { continue }
            defaults[String(name)] = cells[3]
        }
        return defaults
    }

    @Test func serveReadsItsDefaultsFromServeConfiguration() {
        let defaults = Dictionary(
            uniqueKeysWithValues: ServeCommand.command.arguments.compactMap { argument in
                argument.defaultValue.map { (argument.name, $0) }
            })
        #expect(defaults["listen"] == ServeConfiguration.defaultListen)
        #expect(defaults["log-format"] == ServeConfiguration.defaultLogFormat.rawValue)
        #expect(defaults["log-level"] == ServeConfiguration.defaultLogLevel.rawValue)
        #expect(defaults["grace-period"] == "\(ServeConfiguration.defaultGracePeriodSeconds)")
        #expect(defaults["max-connections"] == "\(ServeConfiguration.defaultMaxConnections)")
        #expect(defaults["pipeline-connections"] == "\(ServeConfiguration.defaultPipelineConnections)")
        #expect(defaults["channel-quota"] == "\(PipelineSettings().channelQuota)")
    }

    @Test func docsOperationsGivesEveryDefaultOfServe() throws {
        let documented = try Self.documentedDefaults()
        #expect(documented.count >= 20, "docs/operations.md lists serve's flags in tables under Running")
        for argument in ServeCommand.command.arguments {
            guard let value = argument.defaultValue else { continue }
            #expect(
                documented[argument.name] == "`\(value)`",
                "docs/operations.md gives --\(argument.name) the default \(documented[argument.name] ?? "(no row)"), serve \(value)")
        }
    }
}
