// `marquee key create|list|revoke`: API keys, straight in the database. The key text is printed once by
// `create`; only its salted hash is stored.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore

enum KeyCommands {
    static let command = Command("key", summary: "Create, list and revoke API keys.", discussion: exitCodes, subcommands: [create, list, revoke])

    /// The exit codes of the key commands, for their `--help`.
    static let exitCodes = ExitCode.help([.success, .failure, .usage, .unavailable])

    static let create = Command(
        "create", summary: "Create an API key and print it (once).",
        discussion: """
            Scopes: ingest (feed ingesters), tokens (app backends), admin (everything). With --app the key sees only that
            app's events and installations: give each app's backend a tokens key of its own. The key is shown only now;
            store it in a secret store. Standard output carries the key alone: KEY=$(marquee key create ...).

            A tokens key for an app's backend needs the app first ('marquee app add' prints its id):
              APP=$(marquee app add ...); marquee key create --scope tokens --app "$APP" --name backend

            \(exitCodes)
            """,
        arguments: [
            Database.option,
            .option(
                "scope", value: "SCOPE", help: "What the key may do (repeatable).", required: true,
                choices: APIScope.allCases.map(\.rawValue), repeatable: true),
            .option("name", value: "NAME", help: "A label for the key, e.g. who uses it.", default: "unnamed"),
            .option("app", value: "ID", help: "Limit the key to one app (marquee app list); default: every app."),
        ]
    ) { arguments in
        let scopes = Array(Set(arguments.strings("scope"))).sorted()
        let app = try AppCommands.appOption(arguments)
        let name = try arguments.required("name")
        guard !name.isEmpty, name.count <= 200 else {
            throw UsageError("--name takes 1 to 200 characters", commandPath: arguments.commandPath)
        }
        let key = NewAPIKey.generate()
        let stored = try await Database.withPool(arguments) { [app] pool in
            if let app, try await AppRepository(pool: pool).find(id: app) == nil {
                throw CommandFailure("no app with id \(app)", exitCode: .failure, code: "not_found", field: "app")
            }
            return try await APIKeyRepository(pool: pool).create(
                keyID: key.id, name: name, scopes: scopes, salt: key.salt, hash: key.hash,
                appID: app)
        }
        var json = keyJSON(stored).objectValue ?? [:]
        json["key"] = .string(key.text)
        Terminal.emit(
            arguments, text: key.text, json: .object(json),
            note: "id \(stored.keyID), scopes \(scopes.joined(separator: ",")): this key is shown only once.")
    }

    static let list = Command(
        "list", summary: "List API keys (never their secrets).", discussion: exitCodes,
        arguments: [Database.option, .flag("active", help: "Leave out revoked keys.")]
    ) { arguments in
        let keys = try await Database.withPool(arguments) { pool in
            try await APIKeyRepository(pool: pool).list(includeRevoked: !arguments.flag("active"))
        }
        Terminal.emit(
            arguments,
            text: Terminal.table(
                ["ID", "NAME", "SCOPES", "APP", "CREATED", "LAST USED", "REVOKED"],
                keys.map { key in
                    [
                        key.keyID, key.name, key.scopes.joined(separator: ","), key.appID.map(String.init) ?? "all", key.createdAt.ISO8601Format(),
                        key.lastUsedAt?.ISO8601Format() ?? "-", key.revokedAt?.ISO8601Format() ?? "-",
                    ]
                }), json: ["keys": .array(keys.map(keyJSON))])
    }

    static let revoke = Command(
        "revoke", summary: "Revoke an API key by its id.",
        discussion: "Running servers cache verified keys for up to 10 seconds: a revoked key stops working within that time.\n\n\(exitCodes)",
        arguments: [Database.option, .positional("id", help: "The key id (12 hex characters, as in mq_<id>_...).")]
    ) { arguments in
        let id = try arguments.required("id")
        guard id.count == 12, id.allSatisfy(\.isHexDigit) else {
            throw UsageError("a key id is 12 hex characters, e.g. 3f9a0c1b2d4e", field: "id", commandPath: arguments.commandPath)
        }
        guard let revoked = try await Database.withPool(arguments, { pool in try await APIKeyRepository(pool: pool).revoke(keyID: id) }) else {
            throw CommandFailure("no API key with id \(id)", exitCode: .failure, code: "not_found", field: "id")
        }
        Terminal.emit(arguments, text: "", json: keyJSON(revoked), note: "revoked API key \(revoked.keyID) (\(revoked.name))")
    }

    static func keyJSON(_ key: StoredAPIKey) -> JSONValue {
        [
            "id": .string(key.keyID),
            "name": .string(key.name),
            "scopes": .array(key.scopes.map(JSONValue.string)),
            "app": key.appID.map { .int(Int64($0)) } ?? .null,
            "createdAt": .string(key.createdAt.ISO8601Format()),
            "lastUsedAt": key.lastUsedAt.map { .string($0.ISO8601Format()) } ?? .null,
            "revokedAt": key.revokedAt.map { .string($0.ISO8601Format()) } ?? .null,
        ]
    }
}
