// Turns the top-level VERSION file and the commit checked out into a generated Swift source of the target that
// prints them (`marquee --version`). The command's inputs are VERSION, .git/HEAD and the ref HEAD names (its
// loose file, or packed-refs), so a build runs it again only after a commit or a checkout; a tree without .git
// (a tarball) embeds the commit `unknown`.
import Foundation
import PackagePlugin

@main
struct EmbedVersion: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL
        let version = root.appending(path: "VERSION")
        let git = root.appending(path: ".git")
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedVersion.swift")
        return [
            .buildCommand(
                displayName: "Embedding VERSION and the commit",
                executable: try context.tool(named: "SourceEmbedder").url,
                arguments: ["version", output.path, version.path, git.path],
                inputFiles: [version] + Self.gitInputs(git),
                outputFiles: [output]
            )
        ]
    }

    /// .git/HEAD, and the files that hold the commit of the ref it names; none without .git.
    static func gitInputs(_ git: URL) -> [URL] {
        let head = git.appending(path: "HEAD")
        guard let text = try? String(contentsOf: head, encoding: .utf8) else { return [] }
        var inputs = [head]
        if text.hasPrefix("ref: ") {
            let ref = text.dropFirst(5).trimmingCharacters(in: .whitespacesAndNewlines)
            for candidate in [git.appending(path: ref), git.appending(path: "packed-refs")]
            where FileManager.default.fileExists(atPath: candidate.path) {
                inputs.append(candidate)
            }
        }
        return inputs
    }
}
