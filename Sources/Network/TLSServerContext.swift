// The server side of TLS: one OpenSSL `SSL_CTX` holding the certificate chain and key, TLS 1.2 or newer,
// and ALPN that accepts only h2. Every accepted connection gets its own `SSL` from it.
internal import COpenSSL
internal import CShims
import Foundation

/// TLS settings for an HTTP/2 server: certificate chain and private key, TLS 1.2+, ALPN h2 only.
public final class TLSServerContext: @unchecked Sendable {
    // SSL_CTX is reference counted and safe to share between threads once configured.
    let context: OpaquePointer

    /// Loads the leaf certificate followed by its intermediates, and the private key, from PEM text.
    public init(certificateChainPEM: String, privateKeyPEM: String) throws(NetworkError) {
        guard let method = TLS_server_method(), let context = SSL_CTX_new(method) else {
            throw .tls("SSL_CTX_new failed: \(openSSLErrors())")
        }
        self.context = context
        guard marquee_server_tls_configure(context) == 1 else {
            throw .tls("cannot require TLS 1.2: \(openSSLErrors())")
        }
        let certificates = try Self.readCertificates(certificateChainPEM)
        defer { for certificate in certificates { X509_free(certificate) } }
        guard SSL_CTX_use_certificate(context, certificates[0]) == 1 else {
            throw .tls("the certificate is not usable: \(openSSLErrors())")
        }
        for intermediate in certificates.dropFirst() {
            guard marquee_server_tls_add_chain_certificate(context, intermediate) == 1 else {
                throw .tls("an intermediate certificate is not usable: \(openSSLErrors())")
            }
        }
        let key = try Self.readPrivateKey(privateKeyPEM)
        defer { EVP_PKEY_free(key) }
        guard SSL_CTX_use_PrivateKey(context, key) == 1, SSL_CTX_check_private_key(context) == 1 else {
            throw .tls("the private key does not match the certificate: \(openSSLErrors())")
        }
        marquee_server_tls_require_h2(context)
    }

    /// Loads the certificate chain and the private key from PEM files. Reads the files: call it at startup,
    /// not on Swift's cooperative pool.
    public convenience init(certificateChainFile: String, privateKeyFile: String) throws(NetworkError) {
        func read(_ path: String) throws(NetworkError) -> String {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw .tls("cannot read \(path): check the path and its permissions")
            }
            return String(decoding: data, as: UTF8.self)
        }
        try self.init(certificateChainPEM: read(certificateChainFile), privateKeyPEM: read(privateKeyFile))
    }

    deinit { SSL_CTX_free(context) }

    /// A new server-side `SSL` for one accepted connection.
    func makeConnection() -> OpaquePointer? {
        SSL_new(context)
    }

    private static func withBIO<T>(_ pem: String, _ body: (OpaquePointer) throws(NetworkError) -> T) throws(NetworkError) -> T {
        var bytes = Array(pem.utf8)
        let bio: OpaquePointer? = bytes.withUnsafeMutableBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        guard let bio else { throw .tls("BIO_new_mem_buf failed: \(openSSLErrors())") }
        defer { BIO_free(bio) }
        // BIO_new_mem_buf does not copy; `bytes` must outlive the reads.
        return try withExtendedLifetime(bytes) { () throws(NetworkError) -> T in try body(bio) }
    }

    private static func readCertificates(_ pem: String) throws(NetworkError) -> [OpaquePointer] {
        let certificates = try withBIO(pem) { bio in
            var certificates: [OpaquePointer] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { certificates.append(certificate) }
            return certificates
        }
        ERR_clear_error()  // the last read ends with a "no start line" error
        guard !certificates.isEmpty else {
            throw .tls("no PEM certificate found: pass the leaf certificate first, then its intermediates")
        }
        return certificates
    }

    private static func readPrivateKey(_ pem: String) throws(NetworkError) -> OpaquePointer {
        let key = try withBIO(pem) { bio in PEM_read_bio_PrivateKey(bio, nil, nil, nil) }
        guard let key else { throw .tls("no PEM private key found: \(openSSLErrors())") }
        return key
    }
}
