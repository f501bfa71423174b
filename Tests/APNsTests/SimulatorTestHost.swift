import APNsSimulator
import Foundation

/// A simulator on loopback with a fresh state folder, for the client's tests against it.
enum SimulatorTestHost {
    static let bundleID = "com.example.live"

    /// A fresh state folder under the system temporary directory.
    static func stateFolder() -> String {
        NSTemporaryDirectory() + "marquee-simulator-test-\(UUID().uuidString.prefix(8))"
    }

    static func configuration(_ folder: String, _ configure: (inout SimulatorConfiguration) -> Void = { _ in }) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration(stateDirectory: folder)
        configuration.bundleIDs = [bundleID]
        configure(&configuration)
        return configuration
    }
}
