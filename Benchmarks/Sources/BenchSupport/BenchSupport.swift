// What the release-mode benchmark drivers share: their flag parser, their error, a stop flag and an
// RSS sampler. Each driver prints key=value lines that its Scripts/bench.d script compares.
import Foundation
import Synchronization

/// Command-line flags as `--name value` pairs, plus bare `--switch`es.
public struct Flags {
    private var values: [String: String] = [:]
    private var switches: Set<String> = []

    public init(_ arguments: ArraySlice<String>, switches known: Set<String> = []) throws {
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            guard argument.hasPrefix("--") else { throw BenchError("unexpected argument \(argument)") }
            let name = String(argument.dropFirst(2))
            if known.contains(name) {
                switches.insert(name)
            } else if let value = iterator.next() {
                values[name] = value
            } else {
                throw BenchError("--\(name) needs a value")
            }
        }
    }

    /// The value of `--name`, if given.
    public func value(_ name: String) -> String? { values[name] }

    public func required(_ name: String) throws -> String {
        guard let value = values[name] else { throw BenchError("--\(name) is required") }
        return value
    }

    public func int(_ name: String, default fallback: Int) throws -> Int {
        try optionalInt(name) ?? fallback
    }

    /// The positive integer of `--name`, or nil when it is not given.
    public func optionalInt(_ name: String) throws -> Int? {
        guard let text = values[name] else { return nil }
        guard let value = Int(text), value > 0 else { throw BenchError("--\(name) takes a positive integer") }
        return value
    }

    public func isSet(_ name: String) -> Bool { switches.contains(name) }
}

/// A usage or setup error of the bench driver.
public struct BenchError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A flag shared between tasks: true while the run lasts.
public final class RunningFlag: Sendable {
    public let value = Atomic<Bool>(true)
    public init() {}
}

/// Samples the resident set size of this process (or of `processID`) every 100 ms on a thread of its own.
public final class RSSSampler: Sendable {
    private let samples = Mutex<[Int]>([])
    private let running = Atomic<Bool>(true)
    private let statm: String

    public init(processID: Int32? = nil) {
        statm = processID.map { "/proc/\($0)/statm" } ?? "/proc/self/statm"
    }

    public func start() {
        Thread.detachNewThread { [self] in
            while running.load(ordering: .relaxed) {
                let kib = RSSSampler.currentKiB(statm: statm)
                samples.withLock { $0.append(kib) }
                usleep(100_000)
            }
        }
    }

    public func stop() -> [Int] {
        running.store(false, ordering: .relaxed)
        return samples.withLock { $0 }
    }

    public static func currentKiB(statm path: String = "/proc/self/statm") -> Int {
        guard let statm = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        let pages = statm.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }
}

/// The figures every load driver prints: elapsed seconds, and the RSS maxima of the second and last thirds
/// of the samples (the benchmarks check that memory stays flat).
public func loadFigures(elapsed: Duration, rssSamples samples: [Int]) -> (seconds: Double, text: String) {
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let maxima = rssMaxima(samples)
    return (seconds, "rss_samples=\(samples.count) rss_max_second_third_kib=\(maxima.secondThird) rss_max_last_third_kib=\(maxima.lastThird)")
}

/// The maxima of the second and the last third of RSS samples (KiB).
public func rssMaxima(_ samples: [Int]) -> (secondThird: Int, lastThird: Int) {
    let third = samples.count / 3
    return (samples.dropFirst(third).prefix(third).max() ?? 0, samples.dropFirst(2 * third).max() ?? 0)
}

/// CPU time from /proc, in clock ticks: the machine's busy time (all but idle and iowait) and, per named
/// group, the user + system time of processes (a group may name a process and count its children too,
/// as PostgreSQL's backends are children of the postmaster). Take one before and one after a load.
public struct CPUTimes: Sendable {
    /// Busy ticks of the whole machine, summed over its cores.
    public var machineBusy: Int
    /// Ticks per group.
    public var groups: [String: Int]

    /// Reads now: `groups` maps a name to a process id, with `true` to add that process's children.
    public static func read(groups: [String: (processID: Int32, withChildren: Bool)]) -> CPUTimes {
        var times = CPUTimes(machineBusy: 0, groups: [:])
        if let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
        {
            let fields = line.split(separator: " ").dropFirst().compactMap { Int($0) }
            // user nice system idle iowait irq softirq steal …
            times.machineBusy = fields.enumerated().filter { $0.offset != 3 && $0.offset != 4 && $0.offset < 8 }.map(\.element).reduce(0, +)
        }
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { Int32($0) } ?? []
        var stats: [Int32: (parent: Int32, ticks: Int)] = [:]
        for process in processes {
            guard let text = try? String(contentsOfFile: "/proc/\(process)/stat", encoding: .utf8),
                let close = text.lastIndex(of: ")")
            else { continue }
            // After "pid (comm)": state ppid … utime (14th field of the line) stime (15th).
            let fields = text[text.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let parent = Int32(fields[1]), let user = Int(fields[11]), let system = Int(fields[12]) else { continue }
            stats[process] = (parent, user + system)
        }
        for (name, group) in groups {
            times.groups[name] = stats.filter { $0.key == group.processID || (group.withChildren && $0.value.parent == group.processID) }
                .map(\.value.ticks).reduce(0, +)
        }
        return times
    }

    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
    public static var ticksPerSecond: Int { sysconf(Int32(_SC_CLK_TCK)) }
}
