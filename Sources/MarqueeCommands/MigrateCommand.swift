// `marquee migrate`: applies the embedded Sql/ migrations, or with --check lists what is pending.
import MarqueeCommandLine
import MarqueeCore
import MarqueeStore

enum MigrateCommand {
    static let command = Command(
        "migrate", summary: "Apply pending database migrations.",
        discussion: """
            Safe to run from several instances at once. Prints the names of the migrations it applied, one a line (with
            --check, those pending: nothing is applied, and the exit code is 1 when any are).

            \(ExitCode.help([.success, .failure, .usage, .unavailable]))
            """,
        arguments: [Database.option, .flag("check", help: "List pending migrations without applying them.")]
    ) { arguments in
        try await Database.withPool(arguments) { pool in
            let runner = MigrationRunner(pool: pool)
            do {
                if arguments.flag("check") {
                    // The pending list is the data: one name a line on standard output, then the refusal (exit 1).
                    let pending = try await runner.pendingMigrations()
                    guard pending.isEmpty else {
                        if !arguments.json { Terminal.print(pending.joined(separator: "\n")) }
                        throw CommandFailure(
                            "\(pending.count) pending migration(s): " + pending.joined(separator: ", ") + "; apply them with 'marquee migrate'",
                            exitCode: .failure, code: "pending", details: ["pending": .array(pending.map(JSONValue.string))])
                    }
                    Terminal.emit(arguments, text: "", json: ["pending": []], note: "schema is current")
                    return
                }
                let applied = try await runner.migrate()
                Terminal.emit(
                    arguments, text: applied.joined(separator: "\n"), json: ["applied": .array(applied.map(JSONValue.string))],
                    note: applied.isEmpty ? "schema is current; nothing applied" : "applied \(applied.count) migration(s)")
            } catch let error as MigrationError {
                throw CommandFailure("\(error)", exitCode: .failure, code: "migration_failed")
            }
        }
    }
}
