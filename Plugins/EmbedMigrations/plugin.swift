// Turns the top-level Sql/*.sql files into one generated Swift source of the target that uses it,
// so the `marquee` binary carries its migrations and Sql/ stays their one source of truth.
import Foundation
import PackagePlugin

@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let sqlDirectory = context.package.directoryURL.appending(path: "Sql")
        let files = (try? FileManager.default.contentsOfDirectory(at: sqlDirectory, includingPropertiesForKeys: nil)) ?? []
        // Numbered files only: schema.sql is the generated picture of the schema, not a migration.
        let migrations = files.filter { $0.pathExtension == "sql" && $0.lastPathComponent.first?.isNumber == true }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(migrations.count) migrations from Sql/",
                executable: try context.tool(named: "SourceEmbedder").url,
                arguments: ["migrations", output.path] + migrations.map(\.path),
                inputFiles: migrations,
                outputFiles: [output]
            )
        ]
    }
}
