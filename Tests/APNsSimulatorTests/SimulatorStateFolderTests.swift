import Crypto
import Foundation
import MarqueeCore
import Testing

@testable import APNsSimulator

/// The state folder without sockets: generated identity reused across starts, channels saved and loaded.
@Suite struct SimulatorStateFolderTests {
    static func folder() -> String { NSTemporaryDirectory() + "marquee-simulator-state-\(UUID().uuidString.prefix(8))" }

    @Test func generatesOnceThenReuses() throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let configuration = SimulatorConfiguration(stateDirectory: folder)
        let first = try SimulatorFiles.prepare(configuration)
        #expect(first.keyID.count == 10 && first.teamID.count == 10 && first.keyID != first.teamID)
        #expect(URL(fileURLWithPath: first.signingKeyFile).lastPathComponent == "AuthKey_\(first.keyID).p8")
        let keyPermissions = try FileManager.default.attributesOfItem(atPath: first.signingKeyFile)[.posixPermissions] as? Int
        #expect(keyPermissions == 0o600)
        let certificate = try String(contentsOfFile: first.certificateFile, encoding: .utf8)
        let key = try first.signingKey()

        let second = try SimulatorFiles.prepare(configuration)
        #expect(second == first)
        #expect(try String(contentsOfFile: second.certificateFile, encoding: .utf8) == certificate)
        // The reused key still signs tokens the simulator trusts.
        let token = try SimulatorTestToken(key: key, keyID: second.keyID, teamID: second.teamID, issuedAt: Date())
        #expect(SimulatorProviderToken(jwt: token.jwt)?.isSigned(by: try second.trustedKey().key) == true)

        // A lost server certificate is issued again by the same CA.
        try FileManager.default.removeItem(atPath: first.certificateFile)
        let third = try SimulatorFiles.prepare(configuration)
        #expect(try String(contentsOfFile: third.certificateFile, encoding: .utf8) != certificate)
        #expect(third.caCertificateFile == first.caCertificateFile)
    }

    @Test func givenFilesAreUsedAsTheyAre() throws {
        var configuration = SimulatorConfiguration(stateDirectory: Self.folder())
        defer { try? FileManager.default.removeItem(atPath: configuration.stateDirectory) }
        configuration.certificateFile = "chain.pem"
        configuration.certificateKeyFile = "chain-key.pem"
        configuration.signingKeyFile = "AuthKey.p8"
        configuration.keyID = "ABCDEFGHIJ"
        configuration.teamID = "KLMNOPQRST"
        let files = try SimulatorFiles.prepare(configuration)
        #expect(files.caCertificateFile == nil && files.certificateFile == "chain.pem" && files.signingKeyFile == "AuthKey.p8")
        #expect(files.keyID == "ABCDEFGHIJ" && files.teamID == "KLMNOPQRST")
        #expect(throws: SimulatorStateError.self) { try files.trustedKey() }
    }

    @Test func channelsRoundTripAndAnUnreadableFileIsAnError() throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let files = try SimulatorFiles.prepare(SimulatorConfiguration(stateDirectory: folder))
        #expect(try files.loadChannels().isEmpty)
        let channels = [
            SimulatorChannel(
                bundleID: "com.example.a", id: "c2Vjb25k", storagePolicy: .noMessageStored, createdAt: Date(timeIntervalSince1970: 1_800_000_001)),
            SimulatorChannel(
                bundleID: "com.example.a", id: "Zmlyc3Q=", storagePolicy: .mostRecentMessageStored,
                createdAt: Date(timeIntervalSince1970: 1_800_000_000)),
        ]
        try files.saveChannels(channels)
        #expect(try files.loadChannels() == channels)
        try "{".write(toFile: files.channelsFile, atomically: true, encoding: .utf8)
        #expect(throws: SimulatorStateError.self) { try files.loadChannels() }
    }

    @Test func theWriterSavesTheEngineChannelsAfterChanges() async throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let files = try SimulatorFiles.prepare(SimulatorConfiguration(stateDirectory: folder))
        let writer = ChannelFileWriter(files: files, logger: nil)
        let key = try files.signingKey()
        let engine = SimulatorEngine(
            configuration: SimulatorConfiguration(), trustedKeys: [try files.trustedKey()], channelsChanged: { writer.channelsChanged() })
        writer.attach(engine)
        var connection = engine.makeConnectionState()
        let token = try SimulatorTestToken(key: key, keyID: files.keyID, teamID: files.teamID, issuedAt: Date())
        for _ in 0..<20 {
            var request = SimulatorTestRequest.create(.mostRecentMessageStored, bundleID: "com.example.a").request
            request.headers.add("authorization", token.authorization)
            request.headers.add("x-test", "1")
            #expect(engine.handle(request, on: .management, connection: &connection).response.status == 201)
        }
        await writer.flush()
        // createdAt goes through JSON seconds, so compare what identifies a channel.
        #expect(
            try files.loadChannels().map { [$0.id, $0.bundleID, "\($0.storagePolicy)"] }
                == engine.channels().map { [$0.id, $0.bundleID, "\($0.storagePolicy)"] })
        #expect(engine.channels().count == 20)
    }
}
