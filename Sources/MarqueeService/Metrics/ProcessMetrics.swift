// The process basics Prometheus expects from every exporter, sampled when /metrics is scraped.
import Foundation

/// Samples resident memory, CPU time, open file descriptors and start time into gauges.
public struct ProcessMetrics: Sendable {
    private let residentMemory: Gauge
    private let cpuSeconds: Gauge
    private let openFileDescriptors: Gauge
    private let startTime: Gauge

    public init(registry: MetricsRegistry, startedAt: Date = Date()) {
        residentMemory = registry.gauge("process_resident_memory_bytes", help: "Resident memory size in bytes.")
        cpuSeconds = registry.gauge("process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.")
        openFileDescriptors = registry.gauge("process_open_fds", help: "Number of open file descriptors.")
        startTime = registry.gauge("process_start_time_seconds", help: "Start time of the process since the Unix epoch in seconds.")
        startTime.set(startedAt.timeIntervalSince1970.rounded())
    }

    /// Reads the current figures. The /proc reads are in-memory pseudo-files and do not block on a disk.
    public func sample() {
        var usage = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &usage) == 0 {
            let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
            cpuSeconds.set(user + system)
        }
        if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Double($0) })
        {
            residentMemory.set(pages * Double(sysconf(Int32(_SC_PAGESIZE))))
        }
        if let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            openFileDescriptors.set(Double(descriptors.count))
        }
    }
}
