import Foundation
import Testing

@testable import Network

@Suite struct TLSClientTests {
    private func firstResult(_ connection: HTTP2ClientConnection) async -> Result<HTTPResponse, NetworkError> {
        do throws(NetworkError) {
            return .success(try await connection.send(HTTPRequest(method: "GET", path: "/small"), timeout: .seconds(10)))
        } catch {
            return .failure(error)
        }
    }

    @Test func aPeerCertifiedByAnotherCAIsRejected() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "tls-wrong-ca", caFile: ClientCertificates.shared.otherCAFile)
        defer { harness.loop.shutdown() }
        let result = await firstResult(harness.connect(to: peer))
        guard case .failure(.certificateRejected(let detail)) = result else {
            Issue.record("expected certificateRejected, got \(result)")
            return
        }
        #expect(detail.contains("certificate"))
        #expect(harness.events.all == [.closed(.certificateRejected(detail))])
    }

    @Test func aPeerWhoseCertificateNamesAnotherHostIsRejected() async throws {
        // The certificate names localhost and 127.0.0.1, not 127.0.0.2.
        let peer = try await ClientNGHTTPD.start(host: "127.0.0.2")
        let harness = try ClientHarness(name: "tls-wrong-host")
        defer { harness.loop.shutdown() }
        let result = await firstResult(harness.connect(to: peer))
        guard case .failure(.certificateRejected) = result else {
            Issue.record("expected certificateRejected, got \(result)")
            return
        }
    }

    @Test func theTestCAAndAHostNameVerify() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "tls-name")
        defer { harness.loop.shutdown() }
        // "localhost" goes through name resolution, SNI and host-name verification.
        let result = await firstResult(harness.connect(to: HTTP2Origin(host: "localhost", port: peer.port)))
        #expect(try result.get().status == 200)
    }

    @Test func insecureModeAcceptsAnyCertificate() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "tls-insecure", verification: .insecureNoVerification, caFile: nil)
        defer { harness.loop.shutdown() }
        #expect(try await firstResult(harness.connect(to: peer)).get().status == 200)
    }

    @Test func aPeerWithoutH2IsRefused() async throws {
        let peer = try await ClientNginx.start(http2: false)
        let harness = try ClientHarness(name: "tls-alpn")
        defer { harness.loop.shutdown() }
        let result = await firstResult(harness.connect(to: peer))
        guard case .failure(.alpnRefused) = result else {
            Issue.record("expected alpnRefused, got \(result)")
            return
        }
    }

    @Test func aRefusedConnectionIsARetryableConnectFailure() async throws {
        let harness = try ClientHarness(name: "tls-refused")
        defer { harness.loop.shutdown() }
        let (fd, port) = try #require(clientRefusingPort())
        defer { close(fd) }
        let result = await firstResult(harness.connect(to: HTTP2Origin(host: "127.0.0.1", port: port)))
        guard case .failure(let error) = result, case .connectFailed = error else {
            Issue.record("expected connectFailed, got \(result)")
            return
        }
        #expect(error.isRetryable)
    }

    @Test func aPeerThatHangsUpDuringTheHandshakeIsARetryableConnectFailure() async throws {
        // OpenSSL sees EOF where it wanted the ServerHello.
        let port = try #require(clientHangUpPeer())
        let harness = try ClientHarness(name: "tls-hang-up")
        defer { harness.loop.shutdown() }
        let result = await firstResult(harness.connect(to: HTTP2Origin(host: "127.0.0.1", port: port)))
        guard case .failure(let error) = result, case .connectFailed(let detail) = error else {
            Issue.record("expected connectFailed, got \(result)")
            return
        }
        #expect(error.isRetryable)
        #expect(detail.contains("closed during the TLS handshake"))
    }

    @Test func aMissingCAFileIsAnErrorThatNamesIt() {
        #expect(throws: NetworkError.self) {
            try TLSClientContext(configuration: TLSClientConfiguration(extraCAFile: "no/such/ca.pem"))
        }
    }
}
