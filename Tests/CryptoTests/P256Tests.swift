import Crypto
import Testing

@Suite struct P256Tests {
    let message = Array("eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ.eyJpc3MiOiJERUYxMjM0NTY3IiwiaWF0IjoxfQ".utf8)

    @Test func swiftSignatureVerifiesWithOpenSSLCLI() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let key = try P256.SigningKey.generate()
        let signature = try key.signature(for: message)
        #expect(signature.count == 64)
        try cli.write("pub.pem", try key.publicKey.pemRepresentation)
        try cli.write("sig.der", try P256.derSignature(fromRaw: signature))
        try cli.write("message", message)
        try cli.write("other", message + [0x2e])

        let good = try cli.run("dgst", "-sha256", "-verify", "pub.pem", "-signature", "sig.der", "message")
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output.contains("Verified OK"))
        let bad = try cli.run("dgst", "-sha256", "-verify", "pub.pem", "-signature", "sig.der", "other")
        #expect(bad.status != 0)
    }

    @Test func openSSLCLISignatureVerifiesInSwift() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        #expect(try cli.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "key.p8").status == 0)
        #expect(try cli.run("pkey", "-in", "key.p8", "-pubout", "-out", "pub.pem").status == 0)
        try cli.write("message", message)
        #expect(try cli.run("dgst", "-sha256", "-sign", "key.p8", "-out", "sig.der", "message").status == 0)

        let key = try P256.SigningKey(pemRepresentation: try cli.readText("key.p8"))
        let publicKey = try P256.VerifyingKey(pemRepresentation: try cli.readText("pub.pem"))
        let raw = try P256.rawSignature(fromDER: try cli.read("sig.der"))
        #expect(raw.count == 64)
        #expect(key.publicKey.isValidSignature(raw, for: message))
        #expect(publicKey.isValidSignature(raw, for: message))
        #expect(!publicKey.isValidSignature(raw, for: message.dropLast()))
        #expect(try P256.derSignature(fromRaw: raw) == (try cli.read("sig.der")))
    }

    @Test func swiftKeyIsReadByOpenSSLCLI() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let key = try P256.SigningKey.generate()
        let pem = try key.pemRepresentation
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        try cli.write("key.p8", pem)
        let text = try cli.run("pkey", "-in", "key.p8", "-noout", "-text")
        #expect(text.status == 0, "\(text.output)")
        #expect(text.output.contains("prime256v1"))
        let publicPEM = try cli.run("pkey", "-in", "key.p8", "-pubout")
        #expect(publicPEM.output == (try key.publicKey.pemRepresentation))
    }

    @Test func sec1KeyFromOpenSSLCLIIsAccepted() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        #expect(try cli.run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "key.pem").status == 0)
        let sec1 = try cli.readText("key.pem")
        #expect(sec1.contains("BEGIN EC PRIVATE KEY"))
        let key = try P256.SigningKey(pemRepresentation: sec1)
        #expect(try key.pemRepresentation.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func encryptedKeysAreRefusedWithoutPrompting() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        let made = try cli.run(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-aes-256-cbc", "-pass", "pass:secret", "-out", "encrypted.p8")
        #expect(made.status == 0, "\(made.output)")
        let pem = try cli.readText("encrypted.p8")
        #expect(pem.contains("BEGIN ENCRYPTED PRIVATE KEY"))
        #expect(throws: CryptoError.self) { try P256.SigningKey(pemRepresentation: pem) }
    }

    @Test func pemRoundTripKeepsTheKey() throws {
        let key = try P256.SigningKey.generate()
        let loaded = try P256.SigningKey(pemRepresentation: try key.pemRepresentation)
        #expect(try loaded.pemRepresentation == key.pemRepresentation)
        let publicKey = try P256.VerifyingKey(pemRepresentation: try key.publicKey.pemRepresentation)
        #expect(publicKey.isValidSignature(try loaded.signature(for: message), for: message))
    }

    @Test func otherKeysAreRefused() throws {
        let cli = try OpenSSLCLI()
        defer { cli.remove() }
        #expect(try cli.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", "p384.pem").status == 0)
        #expect(try cli.run("genpkey", "-algorithm", "ED25519", "-out", "ed25519.pem").status == 0)
        #expect(try cli.run("pkey", "-in", "p384.pem", "-pubout", "-out", "p384.pub").status == 0)
        for file in ["p384.pem", "ed25519.pem"] {
            let pem = try cli.readText(file)
            #expect(throws: CryptoError.self) { try P256.SigningKey(pemRepresentation: pem) }
        }
        let publicPEM = try cli.readText("p384.pub")
        #expect(throws: CryptoError.self) { try P256.VerifyingKey(pemRepresentation: publicPEM) }
        #expect(throws: CryptoError.self) { try P256.SigningKey(pemRepresentation: "not a key") }
        #expect(throws: CryptoError.self) { try P256.VerifyingKey(pemRepresentation: "") }
        // A private key is not a public key PEM.
        let privatePEM = try P256.SigningKey.generate().pemRepresentation
        #expect(throws: CryptoError.self) { try P256.VerifyingKey(pemRepresentation: privatePEM) }
    }

    @Test func tamperedSignaturesAreRejected() throws {
        let key = try P256.SigningKey.generate()
        let publicKey = key.publicKey
        let signature = try key.signature(for: message)
        #expect(publicKey.isValidSignature(signature, for: message))
        for index in [0, 17, 31, 32, 50, 63] {
            var tampered = signature
            tampered[index] ^= 0x01
            #expect(!publicKey.isValidSignature(tampered, for: message), "bit flip at \(index)")
        }
        #expect(!publicKey.isValidSignature(signature.dropLast(), for: message))
        #expect(!publicKey.isValidSignature(signature + [0], for: message))
        #expect(!publicKey.isValidSignature([UInt8](repeating: 0, count: 64), for: message))
        #expect(!publicKey.isValidSignature(signature, for: message + [0]))
        #expect(!(try P256.SigningKey.generate().publicKey.isValidSignature(signature, for: message)))
    }

    @Test func signaturesAreRandomizedButAllVerify() throws {
        let key = try P256.SigningKey.generate()
        let first = try key.signature(for: message)
        let second = try key.signature(for: message)
        #expect(first != second)
        #expect(key.publicKey.isValidSignature(first, for: message))
        #expect(key.publicKey.isValidSignature(second, for: message))
    }

    @Test func signatureEncodingsRejectMalformedInput() {
        #expect(throws: CryptoError.self) { try P256.derSignature(fromRaw: [UInt8](repeating: 1, count: 63)) }
        #expect(throws: CryptoError.self) { try P256.rawSignature(fromDER: [0x30, 0x02, 0x01]) }
        #expect(throws: CryptoError.self) { try P256.rawSignature(fromDER: []) }
    }

    @Test func derRawRoundTripKeepsShortValues() throws {
        // r with leading zero bytes: DER drops them, raw must pad back to 32.
        var raw = [UInt8](repeating: 0, count: 64)
        raw[31] = 5
        raw[32] = 0x80
        raw[63] = 1
        let der = try P256.derSignature(fromRaw: raw)
        #expect(try P256.rawSignature(fromDER: der) == raw)
    }

    @Test func oneKeySignsAndVerifiesFromManyTasksAtOnce() async throws {
        let key = try P256.SigningKey.generate()
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<64 {
                group.addTask {
                    let message = Array("message \(index)".utf8)
                    let signature = try key.signature(for: message)
                    return key.publicKey.isValidSignature(signature, for: message)
                        && !key.publicKey.isValidSignature(signature, for: message + [1])
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 64)
        #expect(results.allSatisfy { $0 })
    }
}
