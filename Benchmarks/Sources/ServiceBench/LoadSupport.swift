// The load driver's small tools: threads of its own, the wall clock it shares with PostgreSQL, and figures.
import Foundation
import Synchronization

/// Runs `body(index, count)` on `count` threads of their own and returns their results in index order.
func onThreads<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int, Int) -> T) async -> [T] {
    let results = Mutex<[Int: T]>([:])
    return await withCheckedContinuation { continuation in
        let remaining = Atomic<Int>(count)
        for index in 0..<count {
            Thread.detachNewThread {
                let result = body(index, count)
                results.withLock { $0[index] = result }
                if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                    continuation.resume(returning: results.withLock { values in (0..<count).map { values[$0]! } })
                }
            }
        }
    }
}

func wallNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}

func sleep(until deadline: Int64) {
    var target = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &target, nil) == EINTR {}
}

func iso8601(_ nanoseconds: Int64) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return formatter.string(from: Date(timeIntervalSince1970: Double(nanoseconds) / 1e9))
}

/// The first `"id": N` in a JSON answer (events and updates put their id first).
func firstID(in body: [UInt8]) -> Int? {
    let text = String(decoding: body, as: UTF8.self)
    guard let range = text.range(of: "\"id\":") else { return nil }
    let digits = text[range.upperBound...].drop { $0 == " " }.prefix { $0.isNumber }
    return Int(digits)
}

/// The position of the first element >= `value` in an ascending array.
func firstIndex(atLeast value: Int, in sorted: [Int]) -> Int? {
    var low = 0
    var high = sorted.count
    while low < high {
        let middle = (low + high) / 2
        if sorted[middle] < value { low = middle + 1 } else { high = middle }
    }
    return low < sorted.count ? low : nil
}

func ms(_ nanoseconds: Int64) -> String {
    let value = Double(nanoseconds) / 1e6
    return value < 10 ? String(format: "%.2f ms", value) : value < 1_000 ? String(format: "%.1f ms", value) : String(format: "%.3f s", value / 1_000)
}

func format(seconds nanoseconds: Int64) -> String { String(format: "%.1f s", Double(nanoseconds) / 1e9) }
