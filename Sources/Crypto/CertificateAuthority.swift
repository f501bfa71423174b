// A small X.509 certificate authority for tests, demos and the APNs simulator: P-256 keys,
// SHA-256 signatures, PEM out. It is not meant to guard production traffic.
internal import COpenSSL
internal import CShims
import Foundation

/// Owns one X509 certificate handle.
final class X509Certificate: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { X509_free(pointer) }

    var pemRepresentation: String {
        get throws(CryptoError) { try writtenText("PEM_write_bio_X509") { PEM_write_bio_X509($0, pointer) } }
    }
}

/// A certificate authority (self-signed P-256 root) that issues TLS server certificates.
public struct CertificateAuthority: Sendable {
    /// The CA certificate as PEM: give it to clients as their trusted CA file.
    public let certificatePEM: String
    /// The CA private key as PKCS#8 PEM.
    public let keyPEM: String
    let certificate: X509Certificate
    let key: P256.SigningKey

    /// A new CA named `commonName`, valid from an hour ago (clock skew) for `validityDays`.
    public static func generate(commonName: String, validityDays: Int = 3650) throws(CryptoError) -> CertificateAuthority {
        let key = try P256.SigningKey.generate()
        let certificate = try makeCertificate(
            commonName: commonName, subjectKey: key, issuer: nil, validityDays: validityDays,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE"),
                (NID_key_usage, "critical,keyCertSign,cRLSign"),
                (NID_subject_key_identifier, "hash"),
            ])
        return try CertificateAuthority(certificate: certificate, key: key)
    }

    /// Loads an existing CA from its certificate and PKCS#8 key PEM; fails if they do not belong together.
    public init(certificatePEM: String, keyPEM: String) throws(CryptoError) {
        let pointer = try withReadBIO(certificatePEM) { bio throws(CryptoError) in
            guard let pointer = PEM_read_bio_X509(bio, nil, refusePassphrase, nil) else {
                throw .invalidCertificate("no PEM certificate: \(openSSLErrorText())")
            }
            return pointer
        }
        try self.init(certificate: X509Certificate(pointer), key: P256.SigningKey(pemRepresentation: keyPEM))
    }

    init(certificate: X509Certificate, key: P256.SigningKey) throws(CryptoError) {
        guard X509_check_private_key(certificate.pointer, key.key.pointer) == 1 else {
            throw .invalidCertificate("the key does not match the certificate: \(openSSLErrorText())")
        }
        self.certificate = certificate
        self.key = key
        certificatePEM = try certificate.pemRepresentation
        keyPEM = try key.pemRepresentation
    }

    /// A TLS server certificate with a fresh P-256 key, signed by this CA.
    /// `dnsNames` (e.g. `localhost`) and `ipAddresses` (e.g. `127.0.0.1`, `::1`) go into subjectAltName,
    /// which is what clients check; `commonName` is informational.
    public func issueServerCertificate(
        commonName: String, dnsNames: [String], ipAddresses: [String] = [], validityDays: Int = 397
    ) throws(CryptoError) -> IssuedCertificate {
        guard !dnsNames.isEmpty || !ipAddresses.isEmpty else {
            throw .invalidInput("a server certificate needs at least one DNS name or IP address")
        }
        for name in dnsNames where !Self.isDNSName(name) {
            throw .invalidInput("not a DNS name: \(name)")
        }
        for address in ipAddresses where !Self.isIPAddress(address) {
            throw .invalidInput("not an IPv4 or IPv6 address: \(address)")
        }
        let alternativeNames = (dnsNames.map { "DNS:\($0)" } + ipAddresses.map { "IP:\($0)" }).joined(separator: ",")
        let serverKey = try P256.SigningKey.generate()
        let server = try Self.makeCertificate(
            commonName: commonName, subjectKey: serverKey, issuer: (certificate, key), validityDays: validityDays,
            extensions: [
                (NID_basic_constraints, "critical,CA:FALSE"),
                (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "serverAuth"),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always"),
                (NID_subject_alt_name, alternativeNames),
            ])
        return IssuedCertificate(certificatePEM: try server.pemRepresentation, keyPEM: try serverKey.pemRepresentation)
    }

    /// Letters, digits, hyphens and dots, optionally a leading `*.` wildcard label.
    static func isDNSName(_ name: String) -> Bool {
        let body = name.hasPrefix("*.") ? name.dropFirst(2) : Substring(name)
        let labels = body.split(separator: ".", omittingEmptySubsequences: false)
        return !body.isEmpty && body.utf8.count <= 253
            && labels.allSatisfy { label in
                !label.isEmpty && label.utf8.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
                    && label.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") }
            }
    }

    static func isIPAddress(_ address: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, address, &buffer) == 1 || inet_pton(AF_INET6, address, &buffer) == 1
    }

    /// Builds and signs one certificate; `issuer` nil means self-signed by `subjectKey`.
    static func makeCertificate(
        commonName: String, subjectKey: P256.SigningKey, issuer: (certificate: X509Certificate, key: P256.SigningKey)?,
        validityDays: Int, extensions: [(nid: Int32, value: String)]
    ) throws(CryptoError) -> X509Certificate {
        guard validityDays > 0 else { throw .invalidInput("validityDays must be positive, got \(validityDays)") }
        let certificate = X509Certificate(try check(X509_new(), "X509_new"))
        let x509 = certificate.pointer
        try check(X509_set_version(x509, 2), "X509_set_version")  // 2 means v3

        // A positive 127-bit random serial, as RFC 5280 asks for (at most 20 bytes, unpredictable).
        var serialBytes = SecureRandom.bytes(16)
        serialBytes[0] &= 0x7f
        let serial = try check(BN_bin2bn(serialBytes, Int32(serialBytes.count), nil), "BN_bin2bn")
        defer { BN_free(serial) }
        _ = try check(BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x509)), "BN_to_ASN1_INTEGER")

        _ = try check(X509_gmtime_adj(X509_getm_notBefore(x509), -3600), "X509_gmtime_adj(notBefore)")
        _ = try check(X509_time_adj_ex(X509_getm_notAfter(x509), Int32(validityDays), 0, nil), "X509_time_adj_ex(notAfter)")

        let name = try check(X509_get_subject_name(x509), "X509_get_subject_name")
        guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, commonName, -1, -1, 0) == 1 else {
            throw .invalidInput("unusable common name \(commonName): \(openSSLErrorText())")
        }
        let issuerName = issuer.map { X509_get_subject_name($0.certificate.pointer) } ?? name
        try check(X509_set_issuer_name(x509, issuerName), "X509_set_issuer_name")
        try check(X509_set_pubkey(x509, subjectKey.key.pointer), "X509_set_pubkey")

        var context = X509V3_CTX()
        marquee_X509V3_set_ctx_nodb(&context)
        X509V3_set_ctx(&context, issuer?.certificate.pointer ?? x509, x509, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw .invalidInput("extension \(String(cString: OBJ_nid2sn(nid))) = \(value): \(openSSLErrorText())")
            }
            defer { X509_EXTENSION_free(ext) }
            try check(X509_add_ext(x509, ext, -1), "X509_add_ext")
        }

        let signer = issuer?.key ?? subjectKey
        try check(X509_sign(x509, signer.key.pointer, EVP_sha256()), "X509_sign")
        return certificate
    }
}

/// A certificate issued by a `CertificateAuthority`, with its private key, both as PEM.
public struct IssuedCertificate: Sendable, Equatable {
    /// The certificate as PEM.
    public let certificatePEM: String
    /// Its private key as PKCS#8 PEM.
    public let keyPEM: String
}
