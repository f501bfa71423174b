import Crypto
import Testing

@Suite struct CertificateAuthorityTests {
    @Test func serverCertificateVerifiesAndCarriesItsNames() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let authority = try CertificateAuthority.generate(commonName: "Marquee Test CA")
        let issued = try authority.issueServerCertificate(
            commonName: "localhost", dnsNames: ["localhost", "apns.test"], ipAddresses: ["127.0.0.1", "::1"])
        try cli.write("ca.pem", authority.certificatePEM)
        try cli.write("server.pem", issued.certificatePEM)
        try cli.write("server.key", issued.keyPEM)

        let verify = try cli.run("verify", "-purpose", "sslserver", "-CAfile", "ca.pem", "server.pem")
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.output.contains("server.pem: OK"))

        // What a TLS client checks: chain, server purpose, and the name or address it connected to.
        for target in [["-verify_hostname", "localhost"], ["-verify_ip", "127.0.0.1"], ["-verify_ip", "::1"]] {
            let check = try cli.run(["verify", "-purpose", "sslserver", "-CAfile", "ca.pem"] + target + ["server.pem"])
            #expect(check.status == 0, "\(target): \(check.output)")
        }
        #expect(try cli.run(["verify", "-CAfile", "ca.pem", "-verify_hostname", "other.example", "server.pem"]).status != 0)

        let names = try cli.run("x509", "-in", "server.pem", "-noout", "-ext", "subjectAltName")
        #expect(names.status == 0, "\(names.output)")
        for expected in ["DNS:localhost", "DNS:apns.test", "IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1"] {
            #expect(names.output.contains(expected), "\(names.output)")
        }
        let hosts = try cli.run("x509", "-in", "server.pem", "-noout", "-checkhost", "localhost", "-checkip", "127.0.0.1")
        #expect(hosts.output.contains("does match"), "\(hosts.output)")
        #expect(!hosts.output.contains("NOT"), "\(hosts.output)")
        let strangers = try cli.run("x509", "-in", "server.pem", "-noout", "-checkhost", "other.example", "-checkip", "10.0.0.1")
        #expect(strangers.output.contains("Hostname other.example does NOT match"), "\(strangers.output)")
        #expect(strangers.output.contains("IP 10.0.0.1 does NOT match"), "\(strangers.output)")

        let text = try cli.run("x509", "-in", "server.pem", "-noout", "-text")
        #expect(text.output.contains("ecdsa-with-SHA256"))
        #expect(text.output.contains("prime256v1"))
        #expect(text.output.contains("CA:FALSE"))

        // The issued key belongs to the issued certificate.
        let certificateKey = try cli.run("x509", "-in", "server.pem", "-noout", "-pubkey")
        let privateKey = try cli.run("pkey", "-in", "server.key", "-pubout")
        #expect(certificateKey.output == privateKey.output)
        #expect(issued.keyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func anotherAuthorityDoesNotVouchForTheCertificate() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let issued = try CertificateAuthority.generate(commonName: "A")
            .issueServerCertificate(commonName: "localhost", dnsNames: ["localhost"])
        try cli.write("other.pem", try CertificateAuthority.generate(commonName: "B").certificatePEM)
        try cli.write("server.pem", issued.certificatePEM)
        #expect(try cli.run("verify", "-CAfile", "other.pem", "server.pem").status != 0)
    }

    @Test func authorityIsACAAndReloadsFromPEM() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let authority = try CertificateAuthority.generate(commonName: "Marquee Test CA")
        try cli.write("ca.pem", authority.certificatePEM)
        let text = try cli.run("x509", "-in", "ca.pem", "-noout", "-text")
        #expect(text.output.contains("CA:TRUE"))
        #expect(text.output.contains("Certificate Sign"))
        #expect(try cli.run("verify", "-CAfile", "ca.pem", "ca.pem").status == 0)

        let reloaded = try CertificateAuthority(certificatePEM: authority.certificatePEM, keyPEM: authority.keyPEM)
        try cli.write("server.pem", try reloaded.issueServerCertificate(commonName: "x", dnsNames: [], ipAddresses: ["127.0.0.1"]).certificatePEM)
        #expect(try cli.run("verify", "-CAfile", "ca.pem", "server.pem").status == 0)
    }

    @Test func mismatchedOrMalformedInputIsRefused() throws {
        let authority = try CertificateAuthority.generate(commonName: "CA")
        let otherKey = try P256.SigningKey.generate().pemRepresentation
        #expect(throws: CryptoError.self) { try CertificateAuthority(certificatePEM: authority.certificatePEM, keyPEM: otherKey) }
        #expect(throws: CryptoError.self) { try CertificateAuthority(certificatePEM: "nope", keyPEM: authority.keyPEM) }
        for name in ["bad,name", "DNS:x", "", "a..b", "-lead.example", "space name"] {
            #expect(throws: CryptoError.self, "\(name)") {
                try authority.issueServerCertificate(commonName: "x", dnsNames: [name])
            }
        }
        for address in ["127.0.0.256", "localhost", "1.2.3.4,IP:5.6.7.8", ""] {
            #expect(throws: CryptoError.self, "\(address)") {
                try authority.issueServerCertificate(commonName: "x", dnsNames: [], ipAddresses: [address])
            }
        }
        #expect(throws: CryptoError.self) { try authority.issueServerCertificate(commonName: "x", dnsNames: []) }
        #expect(throws: CryptoError.self) { try authority.issueServerCertificate(commonName: "x", dnsNames: ["ok"], validityDays: 0) }
        _ = try authority.issueServerCertificate(commonName: "x", dnsNames: ["*.apns.test", "a-b.example"])
    }
}
