// ES256 on OpenSSL 3 EVP: P-256 keys as PEM, and raw 64-byte r‖s signatures as JWS wants them.
// OpenSSL signs and verifies DER-encoded ECDSA signatures; the conversion to and from r‖s lives here.
internal import COpenSSL
internal import CShims

/// Owns one EVP_PKEY. EVP_PKEY is safe to use from several threads at once while nobody modifies it.
final class EVPKey: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// Fails unless the key is an EC key on the P-256 curve.
    func requireP256() throws(CryptoError) {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else {
            throw .invalidKey("not an EC key (ES256 needs P-256)")
        }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &name, name.count, &length) == 1 else {
            throw .invalidKey("EC key without a named curve: \(openSSLErrorText())")
        }
        let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard curve == "prime256v1" || curve == "P-256" else {
            throw .invalidKey("EC key on curve \(curve), ES256 needs P-256 (prime256v1)")
        }
    }
}

/// A passphrase callback that supplies none: without it OpenSSL would prompt on the terminal for an encrypted key.
let refusePassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in 0 }

/// The NIST P-256 curve: ES256 keys and signatures.
public enum P256 {
    /// The byte length of a raw r‖s signature.
    public static let rawSignatureByteCount = 64

    /// A P-256 private key that makes ES256 signatures.
    public struct SigningKey: Sendable {
        let key: EVPKey

        /// A new random key.
        public static func generate() throws(CryptoError) -> SigningKey {
            let context = try check(EVP_PKEY_CTX_new_from_name(nil, "EC", nil), "EVP_PKEY_CTX_new_from_name(EC)")
            defer { EVP_PKEY_CTX_free(context) }
            try check(EVP_PKEY_keygen_init(context), "EVP_PKEY_keygen_init")
            try check(EVP_PKEY_CTX_set_group_name(context, "P-256"), "EVP_PKEY_CTX_set_group_name(P-256)")
            var pointer: OpaquePointer?
            try check(EVP_PKEY_generate(context, &pointer), "EVP_PKEY_generate")
            return SigningKey(key: EVPKey(try check(pointer, "EVP_PKEY_generate")))
        }

        init(key: EVPKey) { self.key = key }

        /// Loads a PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8`) or SEC1 (`BEGIN EC PRIVATE KEY`).
        public init(pemRepresentation pem: String) throws(CryptoError) {
            let pointer = try withReadBIO(pem) { bio throws(CryptoError) in
                guard let pointer = PEM_read_bio_PrivateKey(bio, nil, refusePassphrase, nil) else {
                    throw .invalidKey("no PEM private key: \(openSSLErrorText())")
                }
                return pointer
            }
            key = EVPKey(pointer)
            try key.requireP256()
        }

        /// The key as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), the `.p8` format.
        public var pemRepresentation: String {
            get throws(CryptoError) {
                try writtenText("PEM_write_bio_PKCS8PrivateKey") { bio in
                    PEM_write_bio_PKCS8PrivateKey(bio, key.pointer, nil, nil, 0, nil, nil)
                }
            }
        }

        /// The matching public key.
        public var publicKey: VerifyingKey { VerifyingKey(key: key) }

        /// The ES256 signature of `message` (SHA-256 digest inside) as 64 raw bytes r‖s.
        public func signature(for message: some Sequence<UInt8>) throws(CryptoError) -> [UInt8] {
            let context = try check(EVP_MD_CTX_new(), "EVP_MD_CTX_new")
            defer { EVP_MD_CTX_free(context) }
            try check(EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key.pointer), "EVP_DigestSignInit")
            var der = [UInt8](repeating: 0, count: 80)
            var length = der.count
            let result = withBytes(message) { input in
                EVP_DigestSign(context, &der, &length, input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count)
            }
            try check(result, "EVP_DigestSign")
            return try P256.rawSignature(fromDER: der.prefix(length))
        }
    }

    /// A P-256 public key that checks ES256 signatures.
    public struct VerifyingKey: Sendable {
        let key: EVPKey

        init(key: EVPKey) { self.key = key }

        /// Loads a PEM public key (SubjectPublicKeyInfo, `BEGIN PUBLIC KEY`).
        public init(pemRepresentation pem: String) throws(CryptoError) {
            let pointer = try withReadBIO(pem) { bio throws(CryptoError) in
                guard let pointer = PEM_read_bio_PUBKEY(bio, nil, refusePassphrase, nil) else {
                    throw .invalidKey("no PEM public key: \(openSSLErrorText())")
                }
                return pointer
            }
            key = EVPKey(pointer)
            try key.requireP256()
        }

        /// The key as SubjectPublicKeyInfo PEM (`BEGIN PUBLIC KEY`).
        public var pemRepresentation: String {
            get throws(CryptoError) {
                try writtenText("PEM_write_bio_PUBKEY") { bio in PEM_write_bio_PUBKEY(bio, key.pointer) }
            }
        }

        /// True when `signature` (64 raw bytes r‖s) is a valid ES256 signature of `message` under this key.
        public func isValidSignature(_ signature: some Sequence<UInt8>, for message: some Sequence<UInt8>) -> Bool {
            guard let der = try? P256.derSignature(fromRaw: signature),
                let context = EVP_MD_CTX_new()
            else {
                ERR_clear_error()
                return false
            }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key.pointer) == 1 else {
                ERR_clear_error()
                return false
            }
            let result = withBytes(message) { input in
                EVP_DigestVerify(context, der, der.count, input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count)
            }
            ERR_clear_error()
            return result == 1
        }
    }

    /// Converts a DER ECDSA-Sig-Value (what OpenSSL and `openssl dgst` produce) into 64 raw bytes r‖s.
    public static func rawSignature(fromDER der: some Sequence<UInt8>) throws(CryptoError) -> [UInt8] {
        let bytes = Array(der)
        let signature = bytes.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else {
            throw .invalidInput("not a DER ECDSA signature: \(openSSLErrorText())")
        }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: rawSignatureByteCount)
        let ok = raw.withUnsafeMutableBufferPointer { out in
            BN_bn2binpad(r, out.baseAddress, 32) == 32 && BN_bn2binpad(s, out.baseAddress! + 32, 32) == 32
        }
        guard ok else { throw .invalidInput("ECDSA signature values longer than 32 bytes: not P-256") }
        return raw
    }

    /// Converts 64 raw bytes r‖s (a JWS signature) into a DER ECDSA-Sig-Value.
    public static func derSignature(fromRaw raw: some Sequence<UInt8>) throws(CryptoError) -> [UInt8] {
        let bytes = Array(raw)
        guard bytes.count == rawSignatureByteCount else {
            throw .invalidInput("an ES256 signature is \(rawSignatureByteCount) bytes, got \(bytes.count)")
        }
        let signature = try check(ECDSA_SIG_new(), "ECDSA_SIG_new")
        defer { ECDSA_SIG_free(signature) }
        let r = bytes.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = bytes.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            throw .openSSL(operation: "ECDSA_SIG_set0", reason: openSSLErrorText())
        }
        let length = try check(i2d_ECDSA_SIG(signature, nil), "i2d_ECDSA_SIG")
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        try check(written, "i2d_ECDSA_SIG")
        return der
    }
}
