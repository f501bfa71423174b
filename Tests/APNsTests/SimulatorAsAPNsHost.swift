import APNs
import APNsSimulator
import Crypto
import Foundation

// The simulator knows nothing of Marquee's APNs module; these say how the client reaches it and signs for it.

extension APNsSimulator {
    /// Where a Marquee APNs client sends to reach this simulator, trusting its CA.
    var endpoints: APNsEndpoints {
        APNsEndpoints(
            push: APNsEndpoint(host: configuration.host, port: pushPort),
            management: APNsEndpoint(host: configuration.host, port: managementPort),
            extraTrustedCAFile: files.caCertificateFile)
    }
}

extension SimulatorFiles {
    /// The key the simulator trusts, as the APNs client signs with it.
    func apnsSigningKey() throws -> APNsSigningKey {
        try APNsSigningKey(keyID: keyID, teamID: teamID, key: signingKey())
    }
}

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
