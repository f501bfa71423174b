// Tests wait for conditions, never for a fixed time: a wait that polls returns as soon as what it waits for has
// happened, and its deadline is generous, because under the whole suite on a busy 2-core machine one step can
// take many seconds. A fixed sleep stays only where the wait itself is the behaviour under test, and says so.
import Foundation

/// Polls `condition` every `interval` until it holds or `timeout` passes; returns whether it held.
public func eventually(
    within timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while try await !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: interval)
    }
    return true
}

/// A condition a test waited for did not hold in time; the text names it.
public struct ConditionTimeout: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Polls `condition` until it holds; throws `ConditionTimeout`, naming `what`, if it has not after `timeout`.
public func waitUntil(
    _ what: String, within timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async throws {
    guard try await eventually(within: timeout, every: interval, condition) else {
        throw ConditionTimeout("timed out after \(timeout) waiting until \(what)")
    }
}
