import Foundation
import MarqueeTestSupport
import Testing

/// docs/monitoring/: the Grafana dashboard and the alert rules name only metrics a running serve exposes.
/// (Grafana is not packaged in Debian; promtool checks the rules themselves in Scripts/monitoring-check.)
@Suite(.enabled(if: MarqueeProcess.available))
struct MonitoringFilesTests {
    static let folder = RepositoryCheckout.root.appending(path: "docs/monitoring")

    /// Every metric name in the dashboard's and the rules' expressions (`marquee_…`, `process_…`), by file.
    static func metricNames() throws -> [String: Set<String>] {
        var names: [String: Set<String>] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".json") || file.hasSuffix(".yml") {
            let text = try String(contentsOf: folder.appending(path: file), encoding: .utf8)
            names[file] = Set(text.matches(of: /\b(?:marquee|process)_[a-z0-9_]*[a-z0-9]\b/).map { String($0.0) })
        }
        return names
    }

    /// The metrics /metrics declares (`# TYPE name kind`), with their kinds.
    static func exposed(_ metrics: String) -> [String: String] {
        var kinds: [String: String] = [:]
        for match in metrics.matches(of: /(?m)^# TYPE ([a-z0-9_]+) ([a-z]+)$/) { kinds[String(match.1)] = String(match.2) }
        return kinds
    }

    /// A name an expression may use: a declared metric, or a histogram's `_bucket`, `_sum` or `_count` series.
    static func isServed(_ name: String, in kinds: [String: String]) -> Bool {
        if kinds[name] != nil { return true }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            if kinds[String(name.dropLast(suffix.count))] == "histogram" { return true }
        }
        return false
    }

    @Test func everyMetricTheDashboardAndTheRulesUseIsOnMetrics() async throws {
        let names = try Self.metricNames()
        #expect(Set(names.keys).isSuperset(of: ["marquee-dashboard.json", "marquee-alerts.yml"]))
        #expect(names["marquee-dashboard.json", default: []].count >= 30)
        #expect(names["marquee-alerts.yml", default: []].count >= 10)
        let (serve, port) = try await MarqueeProcess.serve(databaseURL: try await TestDatabase.freshURL("e2e"))
        let metrics = try await LoopbackHTTP.request(port: port, "GET", "/metrics")
        serve.signal(SIGTERM)
        _ = await serve.wait()
        let kinds = Self.exposed(metrics.text)
        #expect(kinds["marquee_scheduler_leader"] == "gauge")
        // The check itself: a name /metrics lacks is refused.
        #expect(!Self.isServed("marquee_no_such_metric", in: kinds))
        #expect(!Self.isServed("marquee_outbox_backlog_bucket", in: kinds))
        #expect(Self.isServed("marquee_broadcast_latency_seconds_bucket", in: kinds))
        for (file, used) in names.sorted(by: { $0.key < $1.key }) {
            for name in used.sorted() {
                #expect(Self.isServed(name, in: kinds), "\(file) uses \(name), which /metrics of a running serve does not have")
            }
        }
    }
}
