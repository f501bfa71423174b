import Foundation
import MarqueeTestSupport
import Testing

/// Code comments and docs cite the APNs facts as `docs/apns.md#anchor`: every cited anchor exists there.
@Suite struct APNsDocumentationTests {
    static let root = RepositoryCheckout.root

    @Test func everyCitedAnchorOfDocsAPNsExists() throws {
        let document = try String(contentsOf: Self.root.appending(path: "docs/apns.md"), encoding: .utf8)
        let anchors = Set(document.matches(of: /<a id="([a-z0-9-]+)"><\/a>/).map { String($0.1) })
        #expect(anchors.count > 20)
        var cited: [(file: String, anchor: String)] = []
        for folder in ["Sources", "Tests", "Scripts", "docs", "Benchmarks/Sources", "Benchmarks/Tests"] {
            let enumerator = FileManager.default.enumerator(at: Self.root.appending(path: folder), includingPropertiesForKeys: nil)
            while let url = enumerator?.nextObject() as? URL {
                guard ["swift", "md", "sh", ""].contains(url.pathExtension), url.lastPathComponent != "APNsDocumentationTests.swift",
                    let text = try? String(contentsOf: url, encoding: .utf8)
                else { continue }
                for line in text.split(separator: "\n") {
                    // The anchors after a citation on its line: `docs/apns.md#a, #b` or `(apns.md#a)` in docs/.
                    guard let start = line.range(of: "apns.md#")?.lowerBound else { continue }
                    for match in line[start...].matches(of: /#([a-z][a-z0-9-]*)/) { cited.append((url.lastPathComponent, String(match.1))) }
                }
            }
        }
        let readme = try String(contentsOf: Self.root.appending(path: "README.md"), encoding: .utf8)
        for match in readme.matches(of: /apns\.md#([a-z][a-z0-9-]*)/) { cited.append(("README.md", String(match.1))) }
        #expect(cited.count >= 20, "the code cites docs/apns.md")
        for (file, anchor) in cited { #expect(anchors.contains(anchor), "\(file) cites docs/apns.md#\(anchor), which has no such anchor") }
    }
}
