// A TLS client context wraps one OpenSSL SSL_CTX: TLS 1.2 or newer, ALPN, the trusted CAs and the
// verification policy. Connections share it (an SSL_CTX is safe to use from several threads once
// configured) and get one SSL object each, with SNI and the expected host name set.
internal import COpenSSL
internal import CShims
import Foundation

/// How a TLS client verifies its peers and which protocols it offers through ALPN.
public struct TLSClientConfiguration: Sendable {
    /// Whether the peer's certificate chain and host name are checked.
    public enum Verification: Sendable, Equatable {
        /// Verify the chain against the trusted CAs and the certificate against the host name (the default).
        case full
        /// Accept any certificate. Only for tests against throwaway peers; never in production.
        case insecureNoVerification
    }

    /// Trust the system's CA store (Debian's ca-certificates).
    public var trustsSystemCAs: Bool
    /// A PEM file of additional trusted CAs, e.g. a test or simulator CA.
    public var extraCAFile: String?
    public var verification: Verification
    /// Protocols offered through ALPN, most preferred first; the HTTP/2 client requires `h2`.
    public var alpnProtocols: [String]

    public init(
        trustsSystemCAs: Bool = true, extraCAFile: String? = nil, verification: Verification = .full,
        alpnProtocols: [String] = ["h2"]
    ) {
        self.trustsSystemCAs = trustsSystemCAs
        self.extraCAFile = extraCAFile
        self.verification = verification
        self.alpnProtocols = alpnProtocols
    }
}

/// An OpenSSL client context (`SSL_CTX`) built from a `TLSClientConfiguration`, shared by connections.
public final class TLSClientContext: @unchecked Sendable {
    /// The `SSL_CTX`; immutable after init, so safe to share between loop threads.
    let context: OpaquePointer
    public let configuration: TLSClientConfiguration

    /// A peer that closes while we write must cost an error, not the process: no SIGPIPE.
    private static let ignoresSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    public init(configuration: TLSClientConfiguration = TLSClientConfiguration()) throws(NetworkError) {
        TLSClientContext.ignoresSIGPIPE
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw .tls("SSL_CTX_new: \(openSSLErrors())") }
        self.context = context
        self.configuration = configuration
        guard marquee_network_ssl_ctx_set_min_tls12(context) == 1 else {
            throw .tls("cannot require TLS 1.2: \(openSSLErrors())")
        }
        marquee_network_ssl_ctx_set_default_modes(context)
        if configuration.trustsSystemCAs, SSL_CTX_set_default_verify_paths(context) != 1 {
            throw .tls("cannot load the system CAs: \(openSSLErrors())")
        }
        if let file = configuration.extraCAFile, SSL_CTX_load_verify_locations(context, file, nil) != 1 {
            throw .tls("cannot load the CA file \(file): \(openSSLErrors())")
        }
        switch configuration.verification {
        case .full: SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        case .insecureNoVerification: SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        }
        if !configuration.alpnProtocols.isEmpty {
            var wire: [UInt8] = []
            for name in configuration.alpnProtocols {
                let bytes = Array(name.utf8)
                precondition(!bytes.isEmpty && bytes.count < 256, "an ALPN protocol name has 1 to 255 bytes")
                wire.append(UInt8(bytes.count))
                wire += bytes
            }
            // Unlike most OpenSSL calls, 0 means success here.
            guard SSL_CTX_set_alpn_protos(context, wire, UInt32(wire.count)) == 0 else {
                throw .tls("cannot set ALPN protocols: \(openSSLErrors())")
            }
        }
    }

    deinit {
        SSL_CTX_free(context)
    }

    /// A new `SSL` for one connection to `host`: SNI for names, and the host name or IP address the
    /// peer's certificate must match. The caller owns the result (a bufferevent frees it on close).
    func makeSSL(host: String) throws(NetworkError) -> OpaquePointer {
        ERR_clear_error()
        guard let ssl = SSL_new(context) else { throw .tls("SSL_new: \(openSSLErrors())") }
        let isIPAddress = TLSClientContext.isIPAddress(host)
        // RFC 6066: SNI carries host names only, never IP literals.
        if !isIPAddress, marquee_network_ssl_set_server_name(ssl, host) != 1 {
            SSL_free(ssl)
            throw .tls("cannot set SNI \(host): \(openSSLErrors())")
        }
        if configuration.verification == .full {
            let ok =
                isIPAddress
                ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1
                : SSL_set1_host(ssl, host) == 1
            guard ok else {
                SSL_free(ssl)
                throw .tls("cannot set the expected host \(host): \(openSSLErrors())")
            }
        }
        return ssl
    }

    /// After a failed handshake: the verification failure, if that is what failed, else OpenSSL's errors.
    static func handshakeError(ssl: OpaquePointer?) -> NetworkError {
        if let ssl {
            let result = SSL_get_verify_result(ssl)
            if result != X509_V_OK {
                _ = openSSLErrors()
                return .certificateRejected(String(cString: X509_verify_cert_error_string(result)))
            }
        }
        return .tls(openSSLErrors())
    }

    /// After a successful handshake: the protocol the peer chose through ALPN, if any.
    static func negotiatedProtocol(ssl: OpaquePointer) -> String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// One OpenSSL error code as text.
    static func describe(_ code: UInt) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
