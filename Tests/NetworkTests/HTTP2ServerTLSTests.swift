import Foundation
import Network
import Testing

private struct OKHandler: HTTP2RequestHandler {
    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply {
        .response(HTTPResponse(status: 200, body: Array("ok".utf8)))
    }
}

@Suite struct HTTP2ServerTLSTests {
    /// Root CA -> intermediate CA -> leaf, in a new folder the caller removes; the server is given the leaf and
    /// the intermediate as PEM text.
    private static func makeChain() async throws -> URL {
        let folder = try ServerTestTools.temporaryFolder()
        try "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
            .write(to: folder.appendingPathComponent("ca.cnf"), atomically: true, encoding: .utf8)
        try "subjectAltName=IP:127.0.0.1\n".write(to: folder.appendingPathComponent("leaf.cnf"), atomically: true, encoding: .utf8)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        let steps: [[String]] = [
            ["req", "-x509"] + key + ["-keyout", "root.key", "-out", "root.pem", "-days", "2", "-subj", "/CN=Root"],
            ["req"] + key + ["-keyout", "mid.key", "-out", "mid.csr", "-subj", "/CN=Intermediate"],
            [
                "x509", "-req", "-in", "mid.csr", "-CA", "root.pem", "-CAkey", "root.key", "-CAcreateserial",
                "-out", "mid.pem", "-days", "2", "-extfile", "ca.cnf",
            ],
            ["req"] + key + ["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=leaf"],
            [
                "x509", "-req", "-in", "leaf.csr", "-CA", "mid.pem", "-CAkey", "mid.key", "-CAcreateserial",
                "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.cnf",
            ],
        ]
        for step in steps {
            let result = try await ServerTestTools.run("openssl", step, in: folder)
            try #require(result.status == 0, "\(result.all)")
        }
        return folder
    }

    @Test func sendsTheIntermediateCertificatesFromPEMText() async throws {
        let folder = try await Self.makeChain()
        defer { try? FileManager.default.removeItem(at: folder) }
        func text(_ name: String) throws -> String { try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8) }
        let tls = try TLSServerContext(certificateChainPEM: text("leaf.pem") + text("mid.pem"), privateKeyPEM: text("leaf.key"))
        let group = EventLoopGroup(loopCount: 1, name: "tls-test")
        let server = try HTTP2Server(configuration: HTTP2ServerConfiguration(), tls: tls, group: group, handler: OKHandler())
        // curl trusts only the root: verification needs the intermediate from the server.
        let result = try await ServerTestTools.run(
            "curl",
            [
                "-sS", "--http2", "--cacert", folder.appendingPathComponent("root.pem").path,
                "--max-time", "10", "https://127.0.0.1:\(server.port)/",
            ])
        await server.shutdown()
        group.shutdown()
        #expect(result.output == "ok", "\(result.all)")
    }

    @Test func refusesTLSBelowVersion12() async throws {
        let certificates = try await ServerTestCertificates.shared.value
        let group = EventLoopGroup(loopCount: 1, name: "tls-test")
        let server = try HTTP2Server(configuration: HTTP2ServerConfiguration(), tls: certificates.context(), group: group, handler: OKHandler())
        let old = try await ServerTestTools.run(
            "curl",
            [
                "-sS", "--http2", "--cacert", certificates.caFile, "--tlsv1.1", "--tls-max", "1.1",
                "--max-time", "10", "https://127.0.0.1:\(server.port)/",
            ])
        let current = try await ServerTestTools.run(
            "curl",
            [
                "-sS", "--http2", "--cacert", certificates.caFile, "--tlsv1.2", "--tls-max", "1.2",
                "--max-time", "10", "https://127.0.0.1:\(server.port)/",
            ])
        await server.shutdown()
        group.shutdown()
        #expect(old.status != 0, "\(old.all)")
        #expect(current.output == "ok", "\(current.all)")
    }

    @Test func rejectsMismatchedOrMissingPEM() async throws {
        let folder = try await Self.makeChain()
        defer { try? FileManager.default.removeItem(at: folder) }
        func text(_ name: String) throws -> String { try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8) }
        #expect(throws: NetworkError.self) { try TLSServerContext(certificateChainPEM: text("leaf.pem"), privateKeyPEM: text("mid.key")) }
        #expect(throws: NetworkError.self) { try TLSServerContext(certificateChainPEM: "not a certificate", privateKeyPEM: text("leaf.key")) }
        #expect(throws: NetworkError.self) { try TLSServerContext(certificateChainPEM: text("leaf.pem"), privateKeyPEM: "") }
        #expect(throws: NetworkError.self) {
            try TLSServerContext(certificateChainFile: folder.appendingPathComponent("missing.pem").path, privateKeyFile: "missing.key")
        }
    }
}
