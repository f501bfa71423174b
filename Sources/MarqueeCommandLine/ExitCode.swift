// The one exit-code table of `marquee`: every command exits with one of these codes and means the same by
// it (after BSD's sysexits where one fits). A command's `--help` lists the codes it uses from here, and the
// README's table is this one.
import Foundation

/// The exit codes of every `marquee` command.
public enum ExitCode: Int32, Sendable, CaseIterable {
    /// Success.
    case success = 0
    /// The operation ran and was refused: an APNs rejection, a conflict (409 from the API), not found in
    /// the database, pending migrations.
    case failure = 1
    /// The command line is wrong.
    case usage = 64
    /// Input data is invalid: a payload, a key file's contents, a request body the API refused (400, 413, 422).
    case dataError = 65
    /// An input file cannot be read, or the API has no such thing (404).
    case noInput = 66
    /// A service (database, API, APNs) cannot be reached, or the API answered 5xx.
    case unavailable = 69
    /// A bug in Marquee.
    case software = 70
    /// A temporary failure after retries (429, 5xx, timeouts): try again later.
    case temporaryFailure = 75
    /// Not allowed: a missing or wrong API key, a scope that does not cover the command, or a refused provider token.
    case permissionDenied = 77
    /// Configuration is missing or invalid (a schema behind the build, a `--listen` address in use).
    case configuration = 78
    /// Interrupted by Ctrl-C (128 + SIGINT), after saying how far it got.
    case interrupted = 130

    /// One line each, for `--help` and the README.
    public var meaning: String {
        switch self {
        case .success: "success"
        case .failure:
            "refused: APNs rejected the request (its reason is shown), a conflict (409: the thing exists already, "
                + "or its state does not allow this), not found in the database, pending migrations"
        case .usage: "the command line is wrong (an unknown flag, bad JSON, a date that does not parse, an unreadable @FILE)"
        case .dataError:
            "input data is invalid: a payload (not JSON, over its size limit), a key file that is not a key (app add), "
                + "or a request the API refused (400, 413, 422)"
        case .noInput:
            "an input file cannot be read (a key or payload file; for apns also a .p8 that is not a P-256 key), "
                + "or the API has no such thing (404)"
        case .unavailable: "a service cannot be reached (database, API, APNs: connection, TLS, certificate): check the URL and that it runs"
        case .software: "internal error"
        case .temporaryFailure: "temporary failure: the API or APNs answered 429 or 5xx, or did not answer in time (after retries): try again later"
        case .permissionDenied:
            "not allowed: the API key is missing or wrong (401) or lacks the scope (403), "
                + "or APNs refused the provider token (403)"
        case .configuration:
            "configuration is missing or invalid (serve --no-migrate on a schema that is behind, serve --listen on an address in use)"
        case .interrupted: "interrupted (Ctrl-C during event list --all, which says where to resume, or event starts --follow)"
        }
    }

    /// The `Exit codes:` block of a `--help`: `codes` (the ones a command uses), each meaning wrapped at 100 columns.
    public static func help(_ codes: [ExitCode] = allCases) -> String {
        "Exit codes:\n"
            + codes.map { code in
                var lines = ["  " + String(code.rawValue).padding(toLength: 4, withPad: " ", startingAt: 0)]
                for word in code.meaning.split(separator: " ") {
                    if lines[lines.count - 1].count + 1 + word.count > 100 { lines.append("      ") }
                    lines[lines.count - 1] += (lines[lines.count - 1].hasSuffix(" ") ? "" : " ") + word
                }
                return lines.joined(separator: "\n")
            }.joined(separator: "\n")
    }
}
