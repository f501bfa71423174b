// Prometheus metrics without a client library: counters, gauges and histograms with labels, rendered in
// the text exposition format (version 0.0.4). Each metric keeps its series behind one Mutex; updates are
// a dictionary lookup and an add, cheap enough for the request path.
import Foundation
import Synchronization

/// Label values of one series, in the order of the metric's label names.
public typealias LabelValues = [String]

/// The set of metrics a process exposes at `/metrics`.
public final class MetricsRegistry: Sendable {
    private let metrics = Mutex<[any RenderableMetric]>([])

    public init() {}

    /// Registers a counter; names should end in `_total`.
    public func counter(_ name: String, help: String, labels: [String] = []) -> Counter {
        register(Counter(name: name, help: help, labelNames: labels))
    }

    /// Registers a gauge.
    public func gauge(_ name: String, help: String, labels: [String] = []) -> Gauge {
        register(Gauge(name: name, help: help, labelNames: labels))
    }

    /// Registers a histogram with the given upper bounds (seconds for latencies).
    public func histogram(_ name: String, help: String, labels: [String] = [], buckets: [Double] = Histogram.latencyBuckets) -> Histogram {
        register(Histogram(name: name, help: help, labelNames: labels, buckets: buckets))
    }

    private func register<Metric: RenderableMetric>(_ metric: Metric) -> Metric {
        metrics.withLock { $0.append(metric) }
        return metric
    }

    /// The text exposition of every metric.
    public func render() -> String {
        var output = ""
        for metric in metrics.withLock({ $0 }) { metric.render(into: &output) }
        return output
    }
}

protocol RenderableMetric: Sendable {
    func render(into output: inout String)
}

/// A value that only goes up.
public final class Counter: RenderableMetric {
    let name: String
    let help: String
    let labelNames: [String]
    private let series = Mutex<[LabelValues: Double]>([:])

    init(name: String, help: String, labelNames: [String]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
    }

    /// Adds `amount` to the series with these label values (in label-name order).
    public func increment(_ labels: LabelValues = [], by amount: Double = 1) {
        precondition(labels.count == labelNames.count, "\(name) takes labels \(labelNames)")
        series.withLock { $0[labels, default: 0] += amount }
    }

    /// The current value of one series (for tests and status).
    public func value(_ labels: LabelValues = []) -> Double { series.withLock { $0[labels] ?? 0 } }

    func render(into output: inout String) {
        renderSimple(&output, name: name, help: help, type: "counter", labelNames: labelNames, series: series.withLock { $0 })
    }
}

/// A value that goes up and down.
public final class Gauge: RenderableMetric {
    let name: String
    let help: String
    let labelNames: [String]
    private let series = Mutex<[LabelValues: Double]>([:])

    init(name: String, help: String, labelNames: [String]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
    }

    /// Sets one series.
    public func set(_ value: Double, _ labels: LabelValues = []) {
        precondition(labels.count == labelNames.count, "\(name) takes labels \(labelNames)")
        series.withLock { $0[labels] = value }
    }

    /// Replaces every series at once (for gauges sampled from the database).
    public func replaceAll(_ values: [LabelValues: Double]) {
        series.withLock { $0 = values }
    }

    /// The current value of one series.
    public func value(_ labels: LabelValues = []) -> Double? { series.withLock { $0[labels] } }

    func render(into output: inout String) {
        renderSimple(&output, name: name, help: help, type: "gauge", labelNames: labelNames, series: series.withLock { $0 })
    }
}

/// Observations counted into cumulative buckets, with their sum and count.
public final class Histogram: RenderableMetric {
    /// Upper bounds in seconds from 1 ms to 30 s.
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    struct Series {
        var bucketCounts: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0
    }

    let name: String
    let help: String
    let labelNames: [String]
    let buckets: [Double]
    private let series = Mutex<[LabelValues: Series]>([:])

    init(name: String, help: String, labelNames: [String], buckets: [Double]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.buckets = buckets.sorted()
    }

    /// Records one observation.
    public func observe(_ value: Double, _ labels: LabelValues = []) {
        precondition(labels.count == labelNames.count, "\(name) takes labels \(labelNames)")
        let index = buckets.firstIndex { value <= $0 } ?? buckets.count
        series.withLock { all in
            var entry = all[labels] ?? Series(bucketCounts: Array(repeating: 0, count: buckets.count + 1))
            entry.bucketCounts[index] += 1
            entry.sum += value
            entry.count += 1
            all[labels] = entry
        }
    }

    /// The number of observations in one series.
    public func count(_ labels: LabelValues = []) -> UInt64 { series.withLock { $0[labels]?.count ?? 0 } }

    func render(into output: inout String) {
        writeHeader(&output, name: name, help: help, type: "histogram")
        for (labels, entry) in series.withLock({ $0 }).sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            var cumulative: UInt64 = 0
            for (index, bound) in (buckets + [.infinity]).enumerated() {
                cumulative += entry.bucketCounts[index]
                let le = bound.isInfinite ? "+Inf" : number(bound)
                output += "\(name)_bucket\(labelText(labelNames + ["le"], labels + [le])) \(cumulative)\n"
            }
            output += "\(name)_sum\(labelText(labelNames, labels)) \(number(entry.sum))\n"
            output += "\(name)_count\(labelText(labelNames, labels)) \(entry.count)\n"
        }
    }
}

/// Renders a metric whose series are one number each (counters and gauges).
private func renderSimple(
    _ output: inout String, name: String, help: String, type: String, labelNames: [String], series: [LabelValues: Double]
) {
    writeHeader(&output, name: name, help: help, type: type)
    for (labels, value) in series.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
        output += "\(name)\(labelText(labelNames, labels)) \(number(value))\n"
    }
}

private func writeHeader(_ output: inout String, name: String, help: String, type: String) {
    output += "# HELP \(name) \(help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n"))\n"
    output += "# TYPE \(name) \(type)\n"
}

private func labelText(_ names: [String], _ values: LabelValues) -> String {
    guard !names.isEmpty else { return "" }
    let pairs = zip(names, values).map { name, value in
        let escaped = value.replacingOccurrences(of: "\\", with: "\\\\")
            .replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
        return "\(name)=\"\(escaped)\""
    }
    return "{" + pairs.joined(separator: ",") + "}"
}

private func number(_ value: Double) -> String {
    if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
    if value.isNaN { return "NaN" }
    if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
    return "\(value)"
}
