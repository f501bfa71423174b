import APNs
import APNsSimulator
import Crypto

// The simulator knows nothing of Marquee's APNs module; these say how the client reaches it and signs for it.
// Shared by the test targets that run the client against the simulator (MarqueeTestSupport).

extension APNsSimulator {
    /// Where a Marquee APNs client sends to reach this simulator, trusting its CA.
    public var endpoints: APNsEndpoints {
        APNsEndpoints(
            push: APNsEndpoint(host: configuration.host, port: pushPort),
            management: APNsEndpoint(host: configuration.host, port: managementPort),
            extraTrustedCAFile: files.caCertificateFile)
    }
}

extension SimulatorFiles {
    /// The key the simulator trusts, as the APNs client signs with it.
    public func apnsSigningKey() throws -> APNsSigningKey {
        try APNsSigningKey(keyID: keyID, teamID: teamID, key: signingKey())
    }
}
