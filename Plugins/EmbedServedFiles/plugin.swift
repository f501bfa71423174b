// Turns the files `serve` answers with into generated Swift sources of the target that serves them: docs/openapi.json,
// the hand-edited OpenAPI document of the HTTP API (so `/openapi.json` and `marquee openapi` answer with exactly the
// file in docs/), and StatusPage/*, the status page's HTML, CSS and script (`GET /status`), so the binary is
// self-contained and each file stays its one source of truth.
import Foundation
import PackagePlugin

@main
struct EmbedServedFiles: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL
        let tool = try context.tool(named: "SourceEmbedder").url
        let document = root.appending(path: "docs").appending(path: "openapi.json")
        let openAPIOutput = context.pluginWorkDirectoryURL.appending(path: "EmbeddedOpenAPIDocument.swift")
        let pageFiles =
            ((try? FileManager.default.contentsOfDirectory(at: root.appending(path: "StatusPage"), includingPropertiesForKeys: nil)) ?? [])
            .filter { ["html", "css", "js"].contains($0.pathExtension) }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let pageOutput = context.pluginWorkDirectoryURL.appending(path: "EmbeddedStatusPage.swift")
        return [
            .buildCommand(
                displayName: "Embedding docs/openapi.json",
                executable: tool,
                arguments: ["text", "embeddedOpenAPIDocument", openAPIOutput.path, document.path],
                inputFiles: [document],
                outputFiles: [openAPIOutput]
            ),
            .buildCommand(
                displayName: "Embedding \(pageFiles.count) files of StatusPage/",
                executable: tool,
                arguments: ["files", "embeddedStatusPage", pageOutput.path] + pageFiles.map(\.path),
                inputFiles: pageFiles,
                outputFiles: [pageOutput]
            ),
        ]
    }
}
