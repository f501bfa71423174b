// Every OpenSSL return code becomes a typed Swift error here, carrying OpenSSL's own error text.
// OpenSSL keeps a per-thread error queue; each failure drains it so the next call starts clean.
internal import COpenSSL

/// A failure in the Crypto module; the case says what to fix, the text is OpenSSL's own explanation.
public enum CryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The PEM text is not a key this module accepts (a P-256 private key in PKCS#8, or a P-256 public key).
    case invalidKey(String)
    /// The PEM text is not an X.509 certificate, or the certificate does not match its key.
    case invalidCertificate(String)
    /// A caller-supplied value (a DNS name, an IP address, a signature encoding) is malformed.
    case invalidInput(String)
    /// OpenSSL failed in `operation`; a bug or resource exhaustion rather than bad input.
    case openSSL(operation: String, reason: String)

    public var description: String {
        switch self {
        case .invalidKey(let reason): "invalid key: \(reason)"
        case .invalidCertificate(let reason): "invalid certificate: \(reason)"
        case .invalidInput(let reason): "invalid input: \(reason)"
        case .openSSL(let operation, let reason): "OpenSSL \(operation) failed: \(reason)"
        }
    }
}

/// Drains OpenSSL's error queue of this thread into one line of text.
func openSSLErrorText() -> String {
    var lines: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        lines.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return lines.isEmpty ? "no detail from OpenSSL" : lines.joined(separator: "; ")
}

/// Turns OpenSSL's "1 (or positive) is success" convention into a thrown error.
@discardableResult
func check(_ result: Int32, _ operation: String) throws(CryptoError) -> Int32 {
    guard result > 0 else { throw .openSSL(operation: operation, reason: openSSLErrorText()) }
    return result
}

/// Turns a NULL returned by OpenSSL into a thrown error.
func check<Pointer>(_ pointer: Pointer?, _ operation: String) throws(CryptoError) -> Pointer {
    guard let pointer else { throw .openSSL(operation: operation, reason: openSSLErrorText()) }
    return pointer
}
