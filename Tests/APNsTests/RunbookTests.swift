import APNs
import Foundation
import Testing

/// docs/operations.md's runbook covers every APNs reason Marquee knows and every alert of docs/monitoring/, each with
/// what it means, what Marquee does and what the operator does.
@Suite struct RunbookTests {
    static func text(_ path: String) throws -> String {
        try String(contentsOf: APNsDocumentationTests.root.appending(path: path), encoding: .utf8)
    }

    /// The lines of `document` after the heading line `start`, to the next heading of its level or above.
    static func section(_ document: String, _ start: String) throws -> String {
        let lines = document.split(separator: "\n", omittingEmptySubsequences: false)
        let begin = try #require(lines.firstIndex { $0 == start }, "no heading '\(start)'")
        let level = start.prefix { $0 == "#" }.count
        let end =
            lines[(begin + 1)...].firstIndex { line in
                let hashes = line.prefix { $0 == "#" }.count
                return hashes > 0 && hashes <= level && line.dropFirst(hashes).hasPrefix(" ")
            } ?? lines.endIndex
        return "\n" + lines[(begin + 1)..<end].joined(separator: "\n")
    }

    @Test func everyAPNsReasonHasAnEntryWithItsStatusAndThreeParts() throws {
        let table = try Self.section(try Self.text("docs/operations.md"), "### APNs reasons")
        var rows: [String: [String]] = [:]
        for line in table.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            rows[cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = Array(cells.dropFirst())
        }
        #expect(rows.count >= 40)
        for (reason, text, status) in APNsReason.documented {
            guard let cells = rows[text] else {
                Issue.record("the runbook has no entry for \(text)")
                continue
            }
            #expect(APNsReason(text) == reason)
            #expect(cells.count == 4, "\(text): status, means, Marquee does, you do")
            #expect(cells.first == String(status), "\(text) is a \(status)")
            #expect(cells.dropFirst().allSatisfy { !$0.isEmpty }, "\(text) has an empty part")
        }
        let known = Set(APNsReason.documented.map(\.text))
        for reason in rows.keys { #expect(known.contains(reason), "the runbook names \(reason), which APNsReason does not know") }
    }

    @Test func everyAlertHasAnEntryItsRuleLinksTo() throws {
        let rules = try Self.text("docs/monitoring/marquee-alerts.yml")
        let operations = try Self.text("docs/operations.md")
        let alerts = rules.matches(of: /- alert: ([A-Za-z0-9]+)/).map { String($0.1) }
        #expect(alerts.count >= 10)
        let links = rules.matches(of: /runbook: "docs\/operations\.md#([a-z0-9-]+)"/).map { String($0.1) }
        #expect(links == alerts.map { $0.lowercased() }, "each rule links to its own entry")
        let section = try Self.section(operations, "### Alerts")
        let entries = section.matches(of: /\n#### ([A-Za-z0-9]+)\n/).map { String($0.1) }
        #expect(Set(entries) == Set(alerts), "one entry per alert, none for an alert that is gone")
        for alert in alerts {
            #expect(section.contains("<a id=\"\(alert.lowercased())\"></a>\n#### \(alert)\n"), "\(alert) has no anchor")
            let entry = try Self.section(section, "#### \(alert)")
            for part in ["**Means.**", "**Marquee does.**", "**You do.**"] {
                #expect(entry.contains(part), "\(alert)'s entry lacks \(part)")
            }
        }
    }
}
