internal import CNGHTTP2
// Every C return code of the network layer becomes one of these errors, in one place per library.
internal import COpenSSL

/// What went wrong in the network layer, and whether trying again can help.
public enum NetworkError: Error, Sendable, Equatable, CustomStringConvertible {
    /// TLS setup or handshake failed; `detail` is OpenSSL's error queue.
    case tls(String)
    /// The peer's certificate did not verify against the trusted CAs or host name.
    case certificateRejected(String)
    /// The peer did not agree to HTTP/2 through ALPN.
    case alpnRefused
    /// An HTTP/2 protocol error from nghttp2.
    case http2(code: Int32, detail: String)
    /// Connecting failed (refused, unreachable, DNS).
    case connectFailed(String)
    /// The connection closed or failed while the request was in flight.
    case connectionClosed
    /// The peer sent GOAWAY and did not process this stream; safe to retry elsewhere.
    case goAway(errorCode: UInt32, debugData: String)
    /// The request never left this process (it was queued when its connection went away or refused new
    /// streams); safe to retry on another connection.
    case requestNotSent(String)
    /// The stream was reset by the peer.
    case streamReset(errorCode: UInt32)
    /// The request's deadline passed after it was sent (a request still queued gets `.requestNotSent`).
    case timedOut
    /// The component was shut down.
    case shutdown
    /// A listener could not bind.
    case bindFailed(String)

    /// True when the request provably never reached the peer's application (GOAWAY above the last stream
    /// id, or never sent), so even a non-idempotent request may be retried.
    public var wasNotSent: Bool {
        switch self {
        case .goAway, .requestNotSent: true
        default: false
        }
    }

    /// True when the same request may succeed if tried again (on another or a new connection).
    public var isRetryable: Bool {
        switch self {
        case .connectFailed, .connectionClosed, .goAway, .requestNotSent, .timedOut, .streamReset: true
        case .tls, .certificateRejected, .alpnRefused, .http2, .shutdown, .bindFailed: false
        }
    }

    public var description: String {
        switch self {
        case .tls(let detail): "TLS failed: \(detail)"
        case .certificateRejected(let detail): "peer certificate rejected: \(detail)"
        case .alpnRefused: "peer did not negotiate h2 through ALPN"
        case .http2(let code, let detail): "HTTP/2 error \(code): \(detail)"
        case .connectFailed(let detail): "connect failed: \(detail)"
        case .connectionClosed: "connection closed"
        case .goAway(let code, let debugData): "GOAWAY (error \(code)) \(debugData)"
        case .requestNotSent(let reason): "request not sent: \(reason)"
        case .streamReset(let code): "stream reset (error \(code))"
        case .timedOut: "timed out"
        case .shutdown: "shut down"
        case .bindFailed(let detail): "bind failed: \(detail)"
        }
    }
}

/// Drains OpenSSL's thread-local error queue into one line of text.
func openSSLErrors() -> String {
    var messages: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return messages.isEmpty ? "unknown OpenSSL error" : messages.joined(separator: "; ")
}

/// Turns an nghttp2 return code into a Swift error (negative codes are errors).
@discardableResult
func checkNGHTTP2(_ code: Int32) throws(NetworkError) -> Int32 {
    guard code < 0 else { return code }
    throw .http2(code: code, detail: String(cString: nghttp2_strerror(code)))
}
