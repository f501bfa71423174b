// The simulator's state folder: the CA, the server certificate, the .p8 key it trusts (with its key and
// team ids) and the channels. Files found there are reused, missing ones are generated, so a restarted
// simulator keeps its identity (clients keep trusting its CA and signing with its key) and its channels.
// Everything here blocks on the file system: call it from a thread of its own, never the cooperative pool.
import Crypto
import Foundation
import MarqueeCore
import Synchronization

/// Reading or writing the state folder failed; the text names the file and what to do.
public struct SimulatorStateError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The files a simulator runs from, found or generated in its state folder, and the ids of its trusted key.
public struct SimulatorFiles: Sendable, Hashable {
    public var stateDirectory: String
    /// The CA that signed the generated server certificate (trust it: `curl --cacert`, `MARQUEE_APNS_CA_FILE`);
    /// nil when the certificate was given.
    public var caCertificateFile: String?
    /// PEM server certificate chain and its key.
    public var certificateFile: String
    public var certificateKeyFile: String
    /// The `.p8` key whose tokens the simulator trusts, with its ids.
    public var signingKeyFile: String
    public var keyID: String
    public var teamID: String
    /// Where the channels are kept across restarts.
    public var channelsFile: String

    /// Reuses or generates every file the configuration does not name. Blocking.
    public static func prepare(_ configuration: SimulatorConfiguration) throws(SimulatorStateError) -> SimulatorFiles {
        let folder = URL(fileURLWithPath: configuration.stateDirectory, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw SimulatorStateError("cannot create the state folder \(folder.path): \(error.localizedDescription)")
        }
        func path(_ name: String) -> String { folder.appendingPathComponent(name).path }

        var caFile: String?
        let certificateFile: String
        let certificateKeyFile: String
        if let given = configuration.certificateFile, let key = configuration.certificateKeyFile {
            (certificateFile, certificateKeyFile) = (given, key)
        } else {
            caFile = path("ca.pem")
            (certificateFile, certificateKeyFile) = (path("server.pem"), path("server-key.pem"))
            try generateCertificates(caFile: caFile!, caKeyFile: path("ca-key.pem"), certificateFile: certificateFile, keyFile: certificateKeyFile)
        }

        let signingKeyFile: String
        let keyID: String
        let teamID: String
        if let given = configuration.signingKeyFile, let givenKeyID = configuration.keyID, let givenTeamID = configuration.teamID {
            (signingKeyFile, keyID, teamID) = (given, givenKeyID, givenTeamID)
        } else {
            (signingKeyFile, keyID, teamID) = try generateSigningKey(in: folder)
        }
        return SimulatorFiles(
            stateDirectory: folder.path, caCertificateFile: caFile, certificateFile: certificateFile,
            certificateKeyFile: certificateKeyFile, signingKeyFile: signingKeyFile, keyID: keyID, teamID: teamID,
            channelsFile: path("channels.json"))
    }

    /// The trusted key, read from `signingKeyFile`. Blocking.
    public func trustedKey() throws(SimulatorStateError) -> SimulatorTrustedKey {
        let pem = try Self.read(signingKeyFile)
        do {
            return SimulatorTrustedKey(keyID: keyID, teamID: teamID, key: try P256.SigningKey(pemRepresentation: pem).publicKey)
        } catch {
            throw SimulatorStateError("\(signingKeyFile) is not a P-256 .p8 key: \(error)")
        }
    }

    /// The private key whose tokens the simulator trusts (sign with it as `keyID` of `teamID`), for clients and tests
    /// that should sign as the trusted key. Blocking.
    public func signingKey() throws(SimulatorStateError) -> P256.SigningKey {
        let pem = try Self.read(signingKeyFile)
        do {
            return try P256.SigningKey(pemRepresentation: pem)
        } catch {
            throw SimulatorStateError("\(signingKeyFile) with key id \(keyID) and team id \(teamID) cannot sign: \(error)")
        }
    }

    // MARK: - Generation

    private static func generateCertificates(caFile: String, caKeyFile: String, certificateFile: String, keyFile: String) throws(SimulatorStateError)
    {
        let manager = FileManager.default
        do {
            let authority: CertificateAuthority
            if manager.fileExists(atPath: caFile), manager.fileExists(atPath: caKeyFile) {
                authority = try CertificateAuthority(certificatePEM: try read(caFile), keyPEM: try read(caKeyFile))
            } else {
                authority = try CertificateAuthority.generate(commonName: "Marquee APNs simulator CA")
                try write(authority.certificatePEM, to: caFile, secret: false)
                try write(authority.keyPEM, to: caKeyFile, secret: true)
                // A new CA invalidates any server certificate left from an older one.
                try? manager.removeItem(atPath: certificateFile)
            }
            guard !manager.fileExists(atPath: certificateFile) || !manager.fileExists(atPath: keyFile) else { return }
            let server = try authority.issueServerCertificate(
                commonName: "localhost", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1", "::1"])
            try write(server.keyPEM, to: keyFile, secret: true)
            try write(server.certificatePEM, to: certificateFile, secret: false)
        } catch let error as SimulatorStateError {
            throw error
        } catch {
            throw SimulatorStateError(
                "cannot make the simulator's certificates in \(URL(fileURLWithPath: caFile).deletingLastPathComponent().path): \(error)")
        }
    }

    /// `key.json` names the generated key's ids; the key itself is `AuthKey_<KEYID>.p8`, as Apple names downloads.
    private static func generateSigningKey(in folder: URL) throws(SimulatorStateError) -> (file: String, keyID: String, teamID: String) {
        struct Identity: Codable {
            var keyID: String
            var teamID: String
        }
        let identityFile = folder.appendingPathComponent("key.json").path
        if FileManager.default.fileExists(atPath: identityFile) {
            guard let identity = try? JSONDecoder().decode(Identity.self, from: Data(try read(identityFile).utf8)) else {
                throw SimulatorStateError("\(identityFile) is not {\"keyID\":…,\"teamID\":…}; delete it to generate a new key")
            }
            let file = folder.appendingPathComponent("AuthKey_\(identity.keyID).p8").path
            guard FileManager.default.fileExists(atPath: file) else {
                throw SimulatorStateError("\(file) is missing; delete \(identityFile) to generate a new key")
            }
            return (file, identity.keyID, identity.teamID)
        }
        let identity = Identity(keyID: randomAppleID(), teamID: randomAppleID())
        let file = folder.appendingPathComponent("AuthKey_\(identity.keyID).p8").path
        do {
            try write(try P256.SigningKey.generate().pemRepresentation, to: file, secret: true)
        } catch let error as SimulatorStateError {
            throw error
        } catch {
            throw SimulatorStateError("cannot generate a signing key: \(error)")
        }
        let json = (try? JSONEncoder().encode(identity)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        try write(json, to: identityFile, secret: false)
        return (file, identity.keyID, identity.teamID)
    }

    /// Ten upper-case letters and digits, like Apple's key and team ids.
    static func randomAppleID() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String(SecureRandom.bytes(10).map { alphabet[Int($0) % alphabet.count] })
    }

    // MARK: - Files

    static func read(_ path: String) throws(SimulatorStateError) -> String {
        do { return try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw SimulatorStateError("cannot read \(path): \(error.localizedDescription)")
        }
    }

    /// Writes through a temporary file and a rename, so a crash never leaves half a file.
    static func write(_ text: String, to path: String, secret: Bool) throws(SimulatorStateError) {
        let temporary = path + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
        let created = FileManager.default.createFile(
            atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: secret ? 0o600 : 0o644])
        guard created, rename(temporary, path) == 0 else {
            try? FileManager.default.removeItem(atPath: temporary)
            throw SimulatorStateError("cannot write \(path)")
        }
    }

    // MARK: - Channels

    private struct ChannelFile: Codable {
        var version = 1
        var channels: [SimulatorChannel]
    }

    /// The channels saved in `channelsFile`; none when it does not exist yet. Blocking.
    public func loadChannels() throws(SimulatorStateError) -> [SimulatorChannel] {
        guard FileManager.default.fileExists(atPath: channelsFile) else { return [] }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        guard let file = try? decoder.decode(ChannelFile.self, from: Data(try Self.read(channelsFile).utf8)) else {
            throw SimulatorStateError("\(channelsFile) is not a simulator channel file; move it away to start without channels")
        }
        return file.channels
    }

    /// Replaces `channelsFile` atomically. Blocking.
    public func saveChannels(_ channels: [SimulatorChannel]) throws(SimulatorStateError) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        guard let data = try? encoder.encode(ChannelFile(channels: channels)) else {
            throw SimulatorStateError("cannot encode the channels")
        }
        try Self.write(String(decoding: data, as: UTF8.self), to: channelsFile, secret: false)
    }
}

/// Saves the engine's channels on a queue of its own after each change, coalescing bursts: a write takes the
/// channels as they are when it runs, so changes that arrive while one is queued ride along with it.
final class ChannelFileWriter: Sendable {
    private let files: SimulatorFiles
    private let logger: Logger?
    private let queue = DispatchQueue(label: "marquee-simulator-channels")
    private let state = Mutex<(engine: SimulatorEngine?, queued: Bool)>((nil, false))

    init(files: SimulatorFiles, logger: Logger?) {
        self.files = files
        self.logger = logger
    }

    /// The engine whose channels are written; set once it exists.
    func attach(_ engine: SimulatorEngine) { state.withLock { $0.engine = engine } }

    /// Called by the engine after a change; returns at once.
    func channelsChanged() {
        let first = state.withLock { state -> Bool in
            defer { state.queued = true }
            return !state.queued
        }
        guard first else { return }
        queue.async { self.writeNow() }
    }

    private func writeNow() {
        guard
            let engine = state.withLock({ state -> SimulatorEngine? in
                state.queued = false
                return state.engine
            })
        else { return }
        do { try files.saveChannels(engine.channels()) } catch {
            logger?.error("cannot save the simulator's channels", ["error": .string(error.description)])
        }
    }

    /// Waits until every write asked for so far is done.
    func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async { continuation.resume() }
        }
    }
}
