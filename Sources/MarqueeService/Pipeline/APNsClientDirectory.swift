// One APNsClient per app (its signing key, team and hosts), made on first use and kept: connections to
// APNs are meant to last for hours, and one provider token per key is shared through one signer.
import APNs
import Crypto
import Foundation
import MarqueeCore
import MarqueeStore

/// The APNs clients of a process, by app id.
public actor APNsClientDirectory {
    private let apps: AppRepository
    private let signer = ProviderTokenSigner()
    /// The MARQUEE_APNS_* values in force (flags over the process environment).
    private let environment: [String: String]
    private var clients: [Int: APNsClient] = [:]

    public init(apps: AppRepository, environment: [String: String]) {
        self.apps = apps
        self.environment = environment
    }

    /// The client for `app`, made on first use from the app's row and key file.
    public func client(for app: PipelineApp) async throws -> APNsClient {
        if let client = clients[app.id] { return client }
        guard let stored = try await apps.find(id: app.id) else { throw APNsClientDirectoryError.appNotFound(app.id) }
        guard let environment = APNsEnvironment(parsing: stored.environment) else {
            throw APNsClientDirectoryError.invalidApp(app.id, "environment \(stored.environment)")
        }
        let pem = try await Self.readFile(stored.keyPath)
        let signingKey: APNsSigningKey
        do {
            signingKey = try APNsSigningKey(keyID: stored.keyID, teamID: stored.teamID, key: P256.SigningKey(pemRepresentation: pem))
        } catch {
            throw APNsClientDirectoryError.invalidApp(app.id, "signing key \(stored.keyPath): \(error)")
        }
        let endpoints = try APNsEndpoints.resolve(
            environment: environment, appPushURL: stored.pushURL,
            appManagementURL: stored.managementURL, processEnvironment: self.environment)
        // Another caller may have made one while this one read the key file.
        if let client = clients[app.id] { return client }
        let client = try APNsClient(signingKey: signingKey, endpoints: endpoints, signer: signer)
        clients[app.id] = client
        return client
    }

    /// Closes every client's connections.
    public func shutdown() async {
        let all = clients.values
        clients = [:]
        for client in all { await client.shutdown() }
    }

    /// Reads a file on a thread of its own: file reads never block Swift's cooperative pool.
    private static func readFile(_ path: String) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try String(contentsOfFile: path, encoding: .utf8) })
            }
        }
    }
}

/// An app's APNs client cannot be made; fix the app (`marquee app show`).
public enum APNsClientDirectoryError: Error, Sendable, CustomStringConvertible {
    case appNotFound(Int)
    case invalidApp(Int, String)

    public var description: String {
        switch self {
        case .appNotFound(let id): "app \(id) not found"
        case .invalidApp(let id, let detail): "app \(id): \(detail)"
        }
    }
}
