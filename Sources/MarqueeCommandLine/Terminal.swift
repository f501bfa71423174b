// Writing to the terminal: results to stdout, messages and progress to stderr.
import Foundation
import MarqueeCore

/// Standard output and error, unbuffered by line.
public enum Terminal {
    /// Writes a line to standard output.
    public static func print(_ line: String) { write(line, to: STDOUT_FILENO) }

    /// Writes a line to standard error (also the sink of `serve`'s and the simulator's logs).
    public static func error(_ line: String) { write(line, to: STDERR_FILENO) }

    /// One write(2) per line as a rule (a line is never interleaved with another writer's at a pipe's
    /// atomic size), retried for what a signal or a full pipe left unwritten; no Foundation buffer or lock.
    private static func write(_ line: String, to descriptor: Int32) {
        var text = line
        text.append("\n")
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }  // closed or broken: nothing more can go there
                offset += written
            }
        }
    }

    /// Prints a result: `json` with --json, else the human text. Standard output carries only the data (a key,
    /// an id, rows, a record), so `KEY=$(marquee key create ...)` captures the key alone; an empty `text` prints
    /// nothing there. A `note` for a person (what was done, a hint, where to go on) goes to standard error, and
    /// only without --json.
    public static func emit(
        _ arguments: ParsedArguments, text: @autoclosure () -> String, json: @autoclosure () -> JSONValue,
        note: @autoclosure () -> String? = nil
    ) {
        guard !arguments.json else { return print(json().jsonString) }
        let data = text()
        if !data.isEmpty { print(data) }
        if let note = note() { error(note) }
    }

    /// Whether standard error is a terminal (progress bars draw only there).
    public static var standardErrorIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    /// Formats rows as aligned columns under a header.
    public static func table(_ header: [String], _ rows: [[String]]) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0.indices.contains(column) ? $0[column].count : 0 }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}

/// A progress bar on standard error for long CLI work; silent when stderr is not a terminal or with --json.
public final class ProgressBar: @unchecked Sendable {
    private let total: Int
    private let label: String
    private let enabled: Bool
    private let lock = NSLock()
    private var done = 0
    private var lastDrawn = -1

    public init(total: Int, label: String, enabled: Bool = Terminal.standardErrorIsTerminal) {
        self.total = max(total, 1)
        self.label = label
        self.enabled = enabled
    }

    /// Adds `count` finished items and redraws when the shown percentage changes.
    public func advance(by count: Int = 1) {
        lock.lock()
        defer { lock.unlock() }
        done = min(total, done + count)
        let percent = done * 100 / total
        guard enabled, percent != lastDrawn else { return }
        lastDrawn = percent
        FileHandle.standardError.write(Data("\r\(label) [\(Self.bar(done: done, total: total))] \(percent)% \(done)/\(total)".utf8))
    }

    /// The inside of a bar: `done` of `total` as `#`, the rest as spaces, `width` characters in all.
    public static func bar(done: Int, total: Int, width: Int = 30) -> String {
        let filled = total > 0 ? min(width, max(0, done) * width / total) : 0
        return String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
    }

    /// Ends the bar's line.
    public func finish() {
        lock.lock()
        defer { lock.unlock() }
        if enabled && lastDrawn >= 0 { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// A status line on standard error that a long wait redraws: in place on a terminal, else one line per `show`
/// (a log keeps every poll). Silent when disabled (with --json).
public final class StatusLine: @unchecked Sendable {
    /// Whether the line is redrawn in place (standard error is a terminal).
    public let inPlace: Bool
    private let enabled: Bool
    private let lock = NSLock()
    private var drawn = false

    public init(inPlace: Bool = Terminal.standardErrorIsTerminal, enabled: Bool = true) {
        self.inPlace = inPlace
        self.enabled = enabled
    }

    /// Shows `line`: over the previous one on a terminal (clearing what it leaves of it), else as a line of its own.
    public func show(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        guard enabled else { return }
        if inPlace {
            FileHandle.standardError.write(Data("\r\(line)\u{1B}[K".utf8))
            drawn = true
        } else {
            Terminal.error(line)
        }
    }

    /// Ends a line drawn in place, so what follows starts on a line of its own; safe to call more than once.
    public func finish() {
        lock.lock()
        defer { lock.unlock() }
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
        drawn = false
    }
}

/// Destructive commands ask a person first; scripts say `--yes`.
public enum Confirmation {
    /// The `--yes` flag of a destructive command.
    public static let flag = Argument.flag("yes", help: "Do not ask for confirmation (scripts); required when stdin is not a terminal.")

    /// Returns when `--yes` was given or a person at the terminal answered y; otherwise throws (exit 64 without
    /// a terminal, 1 when the person said no), before anything was changed.
    public static func require(_ arguments: ParsedArguments, _ question: String) async throws {
        if arguments.flag("yes") { return }
        guard isatty(STDIN_FILENO) == 1, isatty(STDERR_FILENO) == 1, !arguments.json else {
            // "Delete channel 1 at APNs?" asks a person; a script is told what needs --yes, without the question mark.
            let action = question.hasSuffix("?") ? String(question.dropLast()) : question
            throw UsageError(
                "\(action): pass --yes to confirm (stdin is not a terminal to ask on)", field: "yes",
                commandPath: arguments.commandPath)
        }
        FileHandle.standardError.write(Data("\(question) [y/N] ".utf8))
        // Read on a thread of its own: a person may take a while, and the cooperative pool must not wait.
        let answer = await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: readLine() ?? "") }
        }
        guard ["y", "yes"].contains(answer.trimmingCharacters(in: .whitespaces).lowercased()) else {
            throw CommandFailure("not confirmed; nothing changed", exitCode: .failure, code: "not_confirmed")
        }
    }
}
