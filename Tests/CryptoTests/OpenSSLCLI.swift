import Foundation
import MarqueeTestSupport

/// Runs the `openssl` command-line tool in a temporary folder, so tests can check interoperability.
struct OpenSSLCLI {
    let folder: URL

    struct Outcome {
        let status: Int32
        let output: String
    }

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("crypto-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: folder) }

    func path(_ name: String) -> String { folder.appendingPathComponent(name).path }

    func write(_ name: String, _ text: String) throws { try write(name, Array(text.utf8)) }
    func write(_ name: String, _ bytes: [UInt8]) throws { try Data(bytes).write(to: folder.appendingPathComponent(name)) }
    func read(_ name: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: folder.appendingPathComponent(name))) }
    func readText(_ name: String) throws -> String { String(decoding: try read(name), as: UTF8.self) }

    /// Runs `openssl arguments...` with the folder as working directory; output is stdout and stderr together.
    @discardableResult
    func run(_ arguments: String...) throws -> Outcome { try run(arguments) }

    @discardableResult
    func run(_ arguments: [String]) throws -> Outcome {
        let outcome = try ChildProcess.runBlocking("openssl", arguments, directory: folder.path, stderr: .standardOutput)
        return Outcome(status: outcome.status, output: outcome.stdout)
    }
}
