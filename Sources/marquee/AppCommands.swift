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
    static let command = Command("app", summary: "Add, list, show and remove apps.", discussion: exitCodes,
                                 subcommands: [add, list, show, remove])

    /// The exit codes of the app commands, for their `--help`.
    static let exitCodes = "Exit codes:\n" + ([.success, .failure, .usage, .dataError, .noInput, .unavailable, .configuration] as [ExitCode])
        .map { "  \(String($0.rawValue).padding(toLength: 3, withPad: " ", startingAt: 0)) \($0.meaning)" }.joined(separator: "\n")

    static let add = Command(
        "add", summary: "Add an app: a bundle id in one APNs environment, with its signing key.", discussion: exitCodes,
        arguments: [
            Database.option,
            .option("bundle", value: "ID", help: "The app's bundle id, e.g. com.example.scores.", required: true),
            .option("environment", value: "ENV", help: "The APNs environment (sandbox is Apple's name for development).", required: true,
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
        let app = NewApp(bundleID: bundle, environment: environment, teamID: teamID, keyID: keyID,
                         keyPath: keyFile.path, pushURL: arguments.string("push-url"), managementURL: arguments.string("manage-url"))
        let stored = try await Database.withPool(arguments) { pool in
            do {
                return try await AppRepository(pool: pool).add(app)
            } catch let error as PostgresError where error.sqlState == .uniqueViolation {
                throw CommandFailure("\(bundle) (\(app.environment)) is already added; see 'marquee app list'",
                                     exitCode: .failure, code: "conflict", field: "bundle")
            }
        }
        Terminal.emit(arguments, text: "added app \(stored.id): \(stored.bundleID) (\(stored.environment))", json: appJSON(stored))
    }

    static let list = Command("list", summary: "List apps.", discussion: exitCodes, arguments: [Database.option]) { arguments in
        let apps = try await Database.withPool(arguments) { pool in try await AppRepository(pool: pool).list() }
        Terminal.emit(arguments, text: Terminal.table(
            ["ID", "BUNDLE", "ENVIRONMENT", "TEAM", "KEY", "PUSH URL"],
            apps.map { [String($0.id), $0.bundleID, $0.environment, $0.teamID, $0.keyID, $0.pushURL ?? "-"] }),
                      json: ["apps": .array(apps.map(appJSON))])
    }

    static let show = Command("show", summary: "Show one app.", discussion: exitCodes,
                              arguments: [Database.option, .positional("id", help: "The app id (marquee app list).")]) { arguments in
        let id = try appID(arguments)
        guard let app = try await Database.withPool(arguments, { pool in try await AppRepository(pool: pool).find(id: id) }) else {
            throw CommandFailure("no app with id \(id)", exitCode: .failure, code: "not_found", field: "id")
        }
        Terminal.emit(arguments, text: """
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
        arguments: [Database.option, .positional("id", help: "The app id (marquee app list).")]
    ) { arguments in
        let id = try appID(arguments)
        guard let app = try await Database.withPool(arguments, { pool in try await AppRepository(pool: pool).remove(id: id) }) else {
            throw CommandFailure("no app with id \(id)", exitCode: .failure, code: "not_found", field: "id")
        }
        Terminal.emit(arguments, text: "removed app \(app.id): \(app.bundleID) (\(app.environment))", json: appJSON(app))
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
