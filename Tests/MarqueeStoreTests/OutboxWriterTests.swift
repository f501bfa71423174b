import Foundation
import MarqueeTestSupport
import Testing

/// `OutboxWriter` is the one writer of `updates` and `outbox`: no other source file inserts into either table.
@Suite struct OutboxWriterTests {
    @Test func noSQLOutsideTheWriterInsertsIntoUpdatesOrOutbox() throws {
        let sources = RepositoryCheckout.root.appending(path: "Sources")
        let insert = try Regex(#"(?i)insert\s+into\s+(outbox|updates)\b"#)
        var writers: [String] = []
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            if text.contains(insert) { writers.append(file.lastPathComponent) }
        }
        #expect(writers == ["OutboxWriter.swift"])
    }
}
