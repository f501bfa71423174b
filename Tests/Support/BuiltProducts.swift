// The tests that run the package's own executables (`marquee`, the source embedder) find them in `.build/debug`,
// where `swift build` puts them, or in the folder `MARQUEE_TEST_BIN_PATH` names: Scripts/sanitize builds under a
// scratch path of its own and points the tests at its sanitized binaries.
import Foundation

/// Where the tests find the package's built executables.
public enum BuiltProducts {
    /// The folder of the built executables: `MARQUEE_TEST_BIN_PATH`, else `.build/debug` under the root.
    public static let folder: URL = {
        if let path = ProcessInfo.processInfo.environment["MARQUEE_TEST_BIN_PATH"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        return RepositoryCheckout.root.appending(path: ".build/debug")
    }()

    /// The path of the built executable `product`.
    public static func path(of product: String) -> String { folder.appending(path: product).path }
}
