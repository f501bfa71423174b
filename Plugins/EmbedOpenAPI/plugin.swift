// Turns docs/openapi.json, the hand-edited OpenAPI document of the HTTP API, into a generated Swift source of
// the target that serves it, so `/openapi.json` and `marquee openapi` answer with exactly the file in docs/.
import Foundation
import PackagePlugin

@main
struct EmbedOpenAPI: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let document = context.package.directoryURL.appending(path: "docs").appending(path: "openapi.json")
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedOpenAPIDocument.swift")
        return [
            .buildCommand(
                displayName: "Embedding docs/openapi.json",
                executable: try context.tool(named: "SourceEmbedder").url,
                arguments: ["text", "embeddedOpenAPIDocument", output.path, document.path],
                inputFiles: [document],
                outputFiles: [output]
            )
        ]
    }
}
