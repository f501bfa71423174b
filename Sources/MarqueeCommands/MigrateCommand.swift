// `marquee migrate`: applies the embedded Sql/ migrations, or with --check lists what is pending.
import MarqueeCommandLine
import MarqueeCore
import MarqueeStore

enum MigrateCommand {
    static let command = Command(
        "migrate", summary: "Apply pending database migrations.",
        discussion: "Safe to run from several instances at once. With --check nothing is applied; the exit code is 1 when migrations are pending.",
        arguments: [Database.option, .flag("check", help: "List pending migrations without applying them.")]
    ) { arguments in
        try await Database.withPool(arguments) { pool in
            let runner = MigrationRunner(pool: pool)
            do {
                if arguments.flag("check") {
                    let pending = try await runner.pendingMigrations()
                    guard pending.isEmpty else {
                        throw CommandFailure("pending migrations: " + pending.joined(separator: ", "), exitCode: .failure, code: "pending")
                    }
                    Terminal.emit(arguments, text: "schema is current", json: ["pending": []])
                    return
                }
                let applied = try await runner.migrate()
                Terminal.emit(
                    arguments,
                    text: applied.isEmpty ? "schema is current; nothing applied" : "applied: " + applied.joined(separator: ", "),
                    json: ["applied": .array(applied.map(JSONValue.string))])
            } catch let error as MigrationError {
                throw CommandFailure("\(error)", exitCode: .failure, code: "migration_failed")
            }
        }
    }
}
