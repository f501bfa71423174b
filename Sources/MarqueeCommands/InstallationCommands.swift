// `marquee installation show|stats|import`: the audience registry, straight in the database (as `app` is).
// Tokens are shown cut to their first 8 characters, as the API shows them.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore
import Postgres

enum InstallationCommands {
    static let command = Command(
        "installation", summary: "Show installations and count the registry.", discussion: exitCodes,
        subcommands: [show, stats, importFile])

    static let exitCodes = ExitCode.help([.success, .failure, .usage, .unavailable])

    static let appArgument = Argument.option("app", value: "ID", help: "The app id (marquee app list).")

    static let show = Command(
        "show", summary: "Show one installation: its token, follows and newest activities.", discussion: exitCodes,
        arguments: [Database.option, .positional("id", help: "The app's installation id."), appArgument]
    ) { arguments in
        let installationID = try arguments.required("id")
        let app = try AppCommands.appOption(arguments)
        let record = try await Database.withPool(arguments) { pool in
            let installations = InstallationRepository(pool: pool)
            do {
                return try await installations.record(id: try await installations.find(installationID: installationID, appID: app).id)
            } catch let error as AudienceError {
                switch error {
                case .installationInSeveralApps:
                    throw CommandFailure("\(error); pass --app", exitCode: .failure, code: "conflict", field: "app")
                default:
                    throw CommandFailure("\(error)", exitCode: .failure, code: "not_found", field: "id")
                }
            }
        }
        let token = record.pushToStartToken
        let follows = record.follows.map { follow -> String in
            switch follow {
            case .event(let id, let external): "event \(id) (\(external))"
            case .topic(let topic): "topic \(topic)"
            }
        }
        let activities = record.activities.map { "\($0.activityID): event \($0.eventID), \($0.pushType.rawValue), \($0.state.rawValue)" }
        Terminal.emit(
            arguments,
            text: """
                installation  \(record.installationID)
                app           \(record.appID)
                os            \(record.osVersion ?? "-")
                app build     \(record.appBuild ?? "-")
                locale        \(record.locale ?? "-")
                enabled       \(record.liveActivitiesEnabled ? "yes" : "no")\(record.frequentPushesEnabled ? "" : " (frequent updates off)")
                token         \(token.map { String($0.token.prefix(8)) + "… seen " + $0.seenAt.ISO8601Format() + ($0.refusedReason.map { ", refused: \($0)" } ?? "") } ?? "none")
                follows       \(follows.isEmpty ? "nothing" : follows.joined(separator: ", "))
                activities    \(activities.isEmpty ? "none" : activities.joined(separator: "\n              "))
                registered    \(record.registeredAt.ISO8601Format())
                """, json: InstallationRoutes.json(record))
    }

    static let stats = Command(
        "stats", summary: "Count installations by OS major version, token state, enablement and follows; activities; token refusals.",
        discussion: exitCodes, arguments: [Database.option, appArgument]
    ) { arguments in
        let app = try AppCommands.appOption(arguments)
        let stats = try await Database.withPool(arguments) { pool in try await AudienceRepository(pool: pool).stats(appID: app) }
        let total = stats.installations.reduce(0) { $0 + $1.count }
        /// The groups' counts summed by `key`, sorted by key.
        func totals<Group>(_ groups: [Group], by key: (Group) -> String, count: (Group) -> Int) -> [(String, Int)] {
            Dictionary(grouping: groups, by: key).map { ($0.key, $0.value.reduce(0) { $0 + count($1) }) }.sorted { $0.0 < $1.0 }
        }
        func count(_ key: (AudienceStats.InstallationGroup) -> String) -> [(String, Int)] { totals(stats.installations, by: key, count: \.count) }
        let byOS = count { $0.osMajor.map { "iOS \($0)" } ?? "unknown" }
        let byToken = count { $0.token }
        let byEnabled = count { $0.enabled ? "enabled" : "disabled" }
        let byFollows = count { $0.follows == true ? "following" : "following nothing" }
        let activities = totals(stats.activities, by: { "\($0.state.rawValue) \($0.pushType.rawValue)" }, count: \.count)
        let refusals = totals(stats.invalidations, by: { "\($0.reason) \($0.outcome.rawValue)" }, count: \.count)
        func lines(_ title: String, _ rows: [(String, Int)]) -> String {
            "\(title):\n"
                + (rows.isEmpty
                    ? "  none"
                    : rows.map { "  \($0.0.padding(toLength: 24, withPad: " ", startingAt: 0)) \($0.1)" }
                        .joined(separator: "\n"))
        }
        func json(_ rows: [(String, Int)]) -> JSONValue {
            var object = JSONObject()
            for (key, value) in rows { object[key] = .int(Int64(value)) }
            return .object(object)
        }
        Terminal.emit(
            arguments,
            text: [
                "installations: \(total)", lines("by OS", byOS), lines("by token", byToken),
                lines("by enablement", byEnabled), lines("by follows", byFollows),
                lines("activities", activities), lines("token refusals", refusals),
            ].joined(separator: "\n"),
            json: [
                "installations": .int(Int64(total)), "byOS": json(byOS), "byToken": json(byToken), "byEnablement": json(byEnabled),
                "byFollows": json(byFollows), "activities": json(activities), "tokenRefusals": json(refusals),
            ])
    }

    static let importFile = Command(
        "import", summary: "Load registrations exported from another system (CSV or JSON Lines) into an app.",
        discussion: """
            Each row is an installation: installationId and registeredAt (ISO 8601, when the app last registered) are
            required; pushToStartToken, osVersion, appBuild, locale, frequentPushesEnabled, liveActivitiesEnabled and the
            follows are optional, and an empty one leaves the stored value alone. CSV has a header naming its columns;
            events (external ids), eventIds and topics are lists separated by ';', and with any of them in the header a
            row's follows replace the installation's. JSON Lines uses the API's field names, with "follows":
            {"events": [{"event": 42} | {"externalId": "..."}], "topics": [...]}.

            A row changes an installation only if its registeredAt is newer than the installation's last registration,
            so importing an old dump again changes nothing. A token moves from another installation of the app that
            registered it earlier; a token APNs invalidated after the row's time is left out. Everything is applied in
            one transaction: bad rows are listed with their line numbers and nothing is imported, unless --skip-bad.

            """ + ExitCode.help([.success, .failure, .usage, .dataError, .noInput, .unavailable]),
        arguments: [
            Database.option, .positional("file", help: "The file to import."),
            .option("app", value: "ID", help: "The app the installations belong to (marquee app list).", required: true),
            .option(
                "format", value: "FORMAT", help: "csv or jsonl; by default from the file name (.jsonl and .ndjson are JSON Lines).",
                choices: InstallationImportFormat.allCases.map(\.rawValue)),
            .flag("skip-bad", help: "Import the good rows and report the bad ones, instead of importing nothing."),
            .option(
                "previous-token-retention", value: "SECONDS",
                help: "Keep a token that a row replaces this long, to match a late 410 (as serve's flag).",
                default: String(Int(AudienceSettings().previousTokenRetention))),
        ]
    ) { arguments in
        let path = try arguments.required("file")
        guard let app = try AppCommands.appOption(arguments) else {
            throw UsageError("--app is required", field: "app", commandPath: arguments.commandPath)
        }
        let format = arguments.string("format").flatMap(InstallationImportFormat.init(rawValue:)) ?? InstallationImportFormat(fileName: path)
        let retention = try arguments.seconds("previous-token-retention", in: 0...(365 * 86400)) ?? AudienceSettings().previousTokenRetention
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw CommandFailure("cannot read \(path)", exitCode: .noInput, code: "unreadable_file", field: "file")
        }
        defer { try? handle.close() }
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let showProgress = Terminal.standardErrorIsTerminal && !arguments.json
        let started = Date()
        let (summary, problems) = try await Database.withPool(arguments) { pool in
            do {
                return try await InstallationImporter(pool: pool).importInstallations(
                    appID: app, skipBad: arguments.flag("skip-bad"), previousTokenRetention: retention
                ) { sink in
                    let progress = ProgressBar(total: size, label: "reading \(path)", enabled: showProgress)
                    var reader = LineReader(handle: handle)
                    var parser = InstallationImportParser(format: format)
                    var problems: [InstallationImportProblem] = []
                    var reported = 0
                    while let bytes = try reader.next() {
                        switch parser.parse(bytes, line: reader.line) {
                        case .success(let row)?: try await sink.write(row)
                        case .failure(let problem)?: problems.append(problem)
                        case nil: break
                        }
                        if reader.bytesRead - reported >= 1 << 20 {
                            progress.advance(by: reader.bytesRead - reported)
                            reported = reader.bytesRead
                        }
                    }
                    progress.advance(by: reader.bytesRead - reported)
                    progress.finish()
                    if showProgress { Terminal.error("applying the rows in one transaction…") }
                    return problems
                }
            } catch InstallationImportError.unknownApp(let id) {
                throw CommandFailure("no app with id \(id)", exitCode: .failure, code: "not_found", field: "app")
            } catch InstallationImportError.badRows(let problems, let rows) {
                throw CommandFailure(
                    "\(problems.count) problems in \(Set(problems.map(\.line)).count) of \(rows) rows; nothing was imported (--skip-bad imports the rest):\n"
                        + ImportText.problems(problems),
                    exitCode: .dataError, code: "bad_rows", field: "file", details: ["problems": ImportText.json(problems)])
            }
        }
        let seconds = Date().timeIntervalSince(started)
        Terminal.emit(
            arguments, text: ImportText.summary(summary, problems: problems, seconds: seconds),
            json: [
                "rows": .int(Int64(summary.rows)), "badRows": .int(Int64(summary.badRows)), "created": .int(Int64(summary.created)),
                "updated": .int(Int64(summary.updated)), "unchanged": .int(Int64(summary.unchanged)),
                "tokensStored": .int(Int64(summary.tokensStored)), "tokensMoved": .int(Int64(summary.tokensMoved)),
                "tokensLeftOut": .int(Int64(summary.tokensLeftOut)), "follows": .int(Int64(summary.follows)),
                "seconds": .double(seconds), "problems": ImportText.json(problems),
            ])
    }
}

/// The import's report as text and JSON.
enum ImportText {
    /// At most this many problems are listed in text; --json lists them all.
    static let shownProblems = 50

    static func problems(_ problems: [InstallationImportProblem]) -> String {
        var lines = problems.prefix(shownProblems).map { "  \($0)" }
        if problems.count > shownProblems { lines.append("  … and \(problems.count - shownProblems) more (--json lists every one)") }
        return lines.joined(separator: "\n")
    }

    static func json(_ problems: [InstallationImportProblem]) -> JSONValue {
        .array(
            problems.map { problem in
                ["line": .int(Int64(problem.line)), "field": problem.field.map(JSONValue.string) ?? .null, "message": .string(problem.message)]
            })
    }

    static func summary(_ summary: InstallationImportSummary, problems: [InstallationImportProblem], seconds: Double) -> String {
        var lines = [
            "imported \(summary.rows - summary.badRows) of \(summary.rows) rows in \(String(format: "%.1f", seconds)) s: \(summary.created) created, "
                + "\(summary.updated) updated, \(summary.unchanged) unchanged (not newer than what is stored)",
            "tokens: \(summary.tokensStored) stored (\(summary.tokensMoved) moved from another installation), \(summary.tokensLeftOut) left out "
                + "(held by a newer registration, or invalidated since)",
            "follows: \(summary.follows) written",
        ]
        if !problems.isEmpty { lines.append("bad rows skipped: \(summary.badRows)\n" + Self.problems(problems)) }
        return lines.joined(separator: "\n")
    }
}
