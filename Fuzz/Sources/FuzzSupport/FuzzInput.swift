import Foundation
// What every harness does with libFuzzer's bytes, and the properties they check. A harness is an executable whose
// main calls `fuzz` with its body; libFuzzer (linked without its own main) then runs it on each input, and takes
// its command line (`-max_total_time=30`, a corpus folder, a crash file to replay). A harness fails by trapping
// (`check`), which libFuzzer reports as a crash and saves the input of.
import FuzzDriver
import MarqueeCore

/// The harness's body: libFuzzer's callback is a C function, which cannot capture it.
nonisolated(unsafe) private var harnessBody: ((FuzzInput) -> Void)?

/// Runs libFuzzer on `body` with this process's arguments, and exits with its status.
public func fuzz(_ body: @escaping (FuzzInput) -> Void) -> Never {
    harnessBody = body
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    let status = LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        harnessBody?(FuzzInput(data, size))
        return 0
    }
    exit(status)
}

/// One input from libFuzzer.
public struct FuzzInput {
    public let bytes: [UInt8]

    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    }

    /// The input cut at its first zero byte into two documents (the second empty without one): a target and a
    /// patch, or a schema and a value.
    public var halves: (first: [UInt8], second: [UInt8]) {
        guard let zero = bytes.firstIndex(of: 0) else { return (bytes, []) }
        return (Array(bytes[..<zero]), Array(bytes[(zero + 1)...]))
    }
}

/// Traps with `message` unless `condition` holds: a property of the code under test failed.
public func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("property failed: \(message())") }
}

/// The text of a value must parse back to the same value and print the same text again.
public func checkRoundTrip(_ value: JSONValue) {
    let text = value.jsonBytes
    let again: JSONValue
    do {
        again = try JSONValue(parsing: text)
    } catch {
        fatalError("property failed: the printed text of a value does not parse (\(error)): \(value.jsonString)")
    }
    check(again == value, "a value's printed text parses to another value: \(value.jsonString)")
    check(again.jsonBytes == text, "a value printed twice gives two texts: \(value.jsonString)")
}

/// The match type of docs/schemas.md: required and optional fields, an enum, dates, a date range, an array of
/// objects: what the update and schema harnesses validate against.
public let matchType: ActivityType = {
    let document = """
        {"name": "MatchAttributes",
         "attributes": {"homeTeam": "string", "awayTeam": "string", "competition": "string", "kickoff": "date"},
         "contentState": {
           "homeScore": {"type": "int", "significant": true}, "awayScore": {"type": "int", "significant": true},
           "period": {"type": "enum", "values": ["scheduled", "firstHalf", "halfTime", "secondHalf", "fullTime"], "significant": true},
           "minute": "int", "lastScorer": "string?", "kickoff": "date", "halfWindow": "dateRange?",
           "goals": {"type": "array", "items": {"type": "object", "fields": {
             "scorer": "string", "minute": "int", "side": {"type": "enum", "values": ["home", "away"]}}}}}}
        """
    do { return try ActivityType(json: try JSONValue(parsing: document)) } catch { fatalError("the match type: \(error)") }
}()

/// A state of `matchType` in app form, for patches to apply to.
public let matchState: JSONValue = {
    let state = """
        {"homeScore": 1, "awayScore": 0, "period": "firstHalf", "minute": 23, "lastScorer": "Kane",
         "kickoff": "2026-06-14T19:00:00Z", "goals": [{"scorer": "Kane", "minute": 12, "side": "home"}]}
        """
    do { return try matchType.encodeContentState(try JSONValue(parsing: state)) } catch { fatalError("the match state: \(error)") }
}()
