// `marquee app add|list|show|remove`: apps, straight in the database. The signing key stays in its file
// (checked at add: exists, P-256 PKCS#8, permissions); only its path is stored and shown.
import APNs
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore
import Postgres

enum AppCommands {
    static let command = Command(
        "app", summary: "Add, list, show and remove apps.", discussion: exitCodes,
        subcommands: [add, list, show, remove])

    /// The exit codes of the app commands, for their `--help`.
    static let exitCodes = ExitCode.help([.success, .failure, .usage, .dataError, .noInput, .unavailable, .configuration])

    static let add = Command(
        "add", summary: "Add an app: a bundle id in one APNs environment, with its signing key.", discussion: exitCodes,
        arguments: [
            Database.option,
            .option("bundle", value: "ID", help: "The app's bundle id, e.g. com.example.scores.", required: true),
            .option(
                "environment", value: "ENV", help: "The APNs environment (sandbox is Apple's name for development).", required: true,
                choices: ["development", "sandbox", "production"]),
            .option("team-id", value: "TEAM", help: "The Apple developer team id (10 characters).", required: true),
            .option("key-id", value: "KEY", help: "The id of the APNs signing key (10 characters).", required: true),
            .option("key-file", value: "PATH", help: "The .p8 signing key file (read when needed, never stored).", required: true),
            .option("push-url", value: "URL", help: "Override Apple's push host (https://...), e.g. the simulator."),
            .option("manage-url", value: "URL", help: "Override Apple's channel management host (https://...)."),
        ]
    ) { arguments in
        let path = arguments.commandPath
        let bundle = try arguments.required("bundle")
        let teamID = try arguments.required("team-id")
        let keyID = try arguments.required("key-id")
        guard isBundleID(bundle) else {
            throw UsageError("--bundle takes a bundle id such as com.example.scores", commandPath: path)
        }
        guard isAppleID(teamID) else { throw UsageError("--team-id takes 10 upper-case letters and digits", commandPath: path) }
        guard isAppleID(keyID) else { throw UsageError("--key-id takes 10 upper-case letters and digits", commandPath: path) }
        for option in ["push-url", "manage-url"] {
            if let url = arguments.string(option), !(url.hasPrefix("https://") && URL(string: url)?.host != nil) {
                throw UsageError("--\(option) takes an https:// URL", commandPath: path)
            }
        }
        let keyFile: SigningKeyFile
        do {
            keyFile = try await SigningKeyFile.check(path: try arguments.required("key-file"))
        } catch let error as SigningKeyFile.Problem {
            switch error {
            case .unreadable: throw CommandFailure(error.description, exitCode: .noInput, code: "key_file_unreadable", field: "key-file")
            case .invalidKey: throw CommandFailure(error.description, exitCode: .dataError, code: "invalid_key", field: "key-file")
            }
        }
        if keyFile.isReadableByOthers {
            Terminal.error("marquee: warning: \(keyFile.path) is readable by group or others; run 'chmod 600 \(keyFile.path)'")
        }
        let environment = APNsEnvironment(parsing: try arguments.required("environment")) == .production ? "production" : "development"
        let app = NewApp(
            bundleID: bundle, environment: environment, teamID: teamID, keyID: keyID,
            keyPath: keyFile.path, pushURL: arguments.string("push-url"), managementURL: arguments.string("manage-url"))
        let stored = try await Database.withPool(arguments) { pool in
            do {
                return try await AppRepository(pool: pool).add(app)
            } catch let error as PostgresError where error.sqlState == .uniqueViolation {
                throw CommandFailure(
                    "\(bundle) (\(app.environment)) is already added; see 'marquee app list'",
                    exitCode: .failure, code: "conflict", field: "bundle")
            }
        }
        Terminal.emit(
            arguments, text: String(stored.id), json: appJSON(stored),
            note: "added app \(stored.id): \(stored.bundleID) (\(stored.environment))")
    }

    static let list = Command("list", summary: "List apps.", discussion: exitCodes, arguments: [Database.option]) { arguments in
        let apps = try await Database.withPool(arguments) { pool in try await AppRepository(pool: pool).list() }
        Terminal.emit(
            arguments,
            text: Terminal.table(
                ["ID", "BUNDLE", "ENVIRONMENT", "TEAM", "KEY", "PUSH URL"],
                apps.map { [String($0.id), $0.bundleID, $0.environment, $0.teamID, $0.keyID, $0.pushURL ?? "-"] }),
            json: ["apps": .array(apps.map(appJSON))])
    }

    static let show = Command(
        "show", summary: "Show one app.", discussion: exitCodes,
        arguments: [Database.option, .positional("id", help: "The app id (marquee app list).")]
    ) { arguments in
        let id = try appID(arguments)
        guard let app = try await Database.withPool(arguments, { pool in try await AppRepository(pool: pool).find(id: id) }) else {
            throw notFound(id)
        }
        Terminal.emit(
            arguments,
            text: """
                id           \(app.id)
                bundle       \(app.bundleID)
                environment  \(app.environment)
                team id      \(app.teamID)
                key id       \(app.keyID)
                key file     \(app.keyPath)
                push url     \(app.pushURL ?? "(Apple's)")
                manage url   \(app.managementURL ?? "(Apple's)")
                created      \(app.createdAt.ISO8601Format())
                """, json: appJSON(app))
    }

    static let remove = Command(
        "remove", summary: "Remove an app and everything of it (attribute types, events, tokens).",
        discussion: """
            Refused while the app has channels at APNs: they would hold its quota forever, and a reconcile (which
            works per app) could no longer see them. --delete-channels deletes them at APNs first (an open one
            included: its running activities stop getting updates), then removes the app. Asks for confirmation
            on a terminal; scripts pass --yes.

            \(exitCodes)
            """,
        arguments: [
            Database.option, .positional("id", help: "The app id (marquee app list)."),
            .flag("delete-channels", help: "Delete the app's channels at APNs first, then remove the app."),
            Confirmation.flag,
        ]
    ) { arguments in
        let id = try appID(arguments)
        let removed = try await Database.withPool(arguments) { pool -> StoredApp in
            let apps = AppRepository(pool: pool)
            guard let app = try await apps.find(id: id) else {
                throw notFound(id)
            }
            let channels = ChannelRepository(pool: pool)
            var atAPNs = try await channels.atAPNs(appID: id)
            if !atAPNs.isEmpty && !arguments.flag("delete-channels") {
                throw CommandFailure(
                    """
                    app \(id) has \(atAPNs.count) channel(s) at APNs (\(summary(atAPNs))): removing the app would leave them holding \
                    its quota, out of reach of reconcile; add --delete-channels to delete them at APNs first
                    """, exitCode: .failure, code: "app_has_channels", field: "delete-channels")
            }
            try await Confirmation.require(
                arguments,
                atAPNs.isEmpty
                    ? "Remove app \(id) (\(app.bundleID), \(app.environment)) and all of its events?"
                    : "Delete \(atAPNs.count) channel(s) of app \(id) at APNs, then remove it and all of its events?")
            if !atAPNs.isEmpty {
                try await deleteAtAPNs(atAPNs, pool: pool, arguments: arguments)
                atAPNs = try await channels.atAPNs(appID: id)
                guard atAPNs.isEmpty else {
                    throw CommandFailure(
                        """
                        \(atAPNs.count) channel(s) of app \(id) could not be deleted at APNs (\(summary(atAPNs))); the app is kept. \
                        See 'marquee channel show ID' for each one's last error
                        """, exitCode: .unavailable, code: "channels_not_deleted")
                }
            }
            guard let removed = try await apps.remove(id: id) else {
                throw notFound(id)
            }
            return removed
        }
        Terminal.emit(
            arguments, text: "", json: appJSON(removed), note: "removed app \(removed.id): \(removed.bundleID) (\(removed.environment))")
    }

    /// "open 2, ended 1"
    private static func summary(_ channels: [ChannelRecord]) -> String {
        Dictionary(grouping: channels, by: \.state.rawValue).sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.count)" }
            .joined(separator: ", ")
    }

    /// Deletes channels at APNs as an operator's `channel delete --force` does (the scheduler's lifecycle steps,
    /// each recorded), with the app's own key and hosts; a progress bar on a terminal.
    private static func deleteAtAPNs(_ channels: [ChannelRecord], pool: PostgresPool, arguments: ParsedArguments) async throws {
        let environment = ProcessInfo.processInfo.environment.filter { $0.key.hasPrefix("MARQUEE_APNS_") }
        let clients = APNsClientDirectory(apps: AppRepository(pool: pool), environment: environment)
        let scheduler = ChannelScheduler(
            pool: pool, apns: APNsClientGateway { app in try await clients.client(for: app) }, catalog: PostgresPipelineCatalog(pool: pool),
            configuration: ChannelSchedulerConfiguration(instance: "marquee-app-remove-\(getpid())"),
            metrics: PipelineMetrics(registry: MetricsRegistry()), logger: Logger(level: .warning, sink: Terminal.error))
        let progress = ProgressBar(total: channels.count, label: "deleting channels", enabled: Terminal.standardErrorIsTerminal && !arguments.json)
        for channel in channels {
            do {
                _ = try await scheduler.deleteChannel(id: channel.id, force: true)
            } catch let error as ChannelSchedulerError {
                Terminal.error("marquee: channel \(channel.id): \(error)")
            }
            progress.advance()
        }
        progress.finish()
        await clients.shutdown()
    }

    /// The refusal of every app command given an id that names no app.
    static func notFound(_ id: Int) -> CommandFailure {
        CommandFailure("no app with id \(id)", exitCode: .failure, code: "not_found", field: "id")
    }

    /// `--app ID`, when given: a positive app id (see 'marquee app list').
    static func appOption(_ arguments: ParsedArguments) throws -> Int? {
        guard let text = arguments.string("app") else { return nil }
        guard let id = Int(text), id > 0 else {
            throw UsageError(
                "--app takes an app id, a positive whole number (see 'marquee app list')", field: "app", commandPath: arguments.commandPath)
        }
        return id
    }

    static func appID(_ arguments: ParsedArguments) throws -> Int {
        guard let id = Int(try arguments.required("id")), id > 0 else {
            throw UsageError("an app id is a positive whole number (see 'marquee app list')", field: "id", commandPath: arguments.commandPath)
        }
        return id
    }

    static func appJSON(_ app: StoredApp) -> JSONValue {
        guard case .object(var object) = AppRoutes.json(app) else { return .null }
        object["keyFile"] = .string(app.keyPath)
        return .object(object)
    }

    static func isBundleID(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return text.count <= 255 && parts.count >= 2
            && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") } }
    }

    static func isAppleID(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) }
    }
}
