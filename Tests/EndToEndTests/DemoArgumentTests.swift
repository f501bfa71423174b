import Foundation
import MarqueeTestSupport
import Testing

/// `Scripts/demo` checks its arguments before it installs or builds anything: a bad one is a message and 64.
@Suite struct DemoArgumentTests {
    static let script = RepositoryCheckout.root.appending(path: "Scripts/demo").path

    /// Runs `Scripts/demo arguments...` and returns its exit status and standard error.
    static func demo(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let demo = try await ChildProcess.run("bash", [script] + arguments, stdout: .discarded)
        return (demo.status, demo.stderr)
    }

    /// `--fans` with no value exited 1 with bash's "parameter null or not set" (issue 48).
    @Test func aFlagWithoutItsValueIsAUsageError() async throws {
        for (arguments, message) in [
            (["--fans"], "demo: --fans needs a value"), (["--speed"], "demo: --speed needs a value"),
            (["--fans", "many"], "demo: --fans takes a whole number"), (["--colour"], "demo: unknown argument --colour"),
        ] {
            let result = try await Self.demo(arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }
}
