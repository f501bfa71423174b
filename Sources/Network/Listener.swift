// Listening sockets for the servers. The socket is bound synchronously (so a bind error and the chosen port
// are known at once), then an `evconnlistener` on a loop accepts from it. Hosts are numeric addresses only:
// resolving a name would block.
internal import CLibEvent
import Foundation

/// A bound, listening TCP socket; closed in deinit unless its descriptor was handed on.
final class ListeningSocket {
    private(set) var fd: Int32
    let port: Int

    /// Writing to a socket the peer has closed raises SIGPIPE, which would kill the process; a server
    /// wants EPIPE instead.
    private static let brokenPipeIgnored: Bool = {
        signal(SIGPIPE, SIG_IGN)
        return true
    }()

    init(host: String, port: Int, backlog: Int32 = 511) throws(NetworkError) {
        precondition(Self.brokenPipeIgnored)
        var storage = sockaddr_storage()
        let length: socklen_t
        let family: Int32
        if host.contains(":") {
            family = AF_INET6
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else {
                throw .bindFailed("\(host) is not a numeric IPv6 address")
            }
            withUnsafeBytes(of: address) { bytes in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) }
            }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        } else {
            family = AF_INET
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
                throw .bindFailed("\(host) is not a numeric IPv4 address (names are not resolved)")
            }
            withUnsafeBytes(of: address) { bytes in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) }
            }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .bindFailed("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0, listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .bindFailed("\(host):\(port): \(reason); pick another port or stop the process using it")
        }
        withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
                _ = getsockname(fd, pointer, &size)
            }
        }
        self.fd = fd
        self.port = Int(
            UInt16(
                bigEndian: withUnsafeBytes(of: storage) { bytes in
                    bytes.load(fromByteOffset: 2, as: UInt16.self)  // sin_port and sin6_port share this offset
                }))
    }

    /// Gives up ownership of the descriptor (to a listener that closes it).
    func release() -> Int32 {
        defer { fd = -1 }
        return fd
    }

    deinit { if fd >= 0 { close(fd) } }
}

/// Accepts connections from a listening socket on one loop; use it only on that loop's thread.
final class ConnectionAcceptor {
    private var listener: OpaquePointer?
    private let onAccept: (Int32, String) -> Void

    /// Takes ownership of `fd`; `onAccept` gets each accepted non-blocking socket and the peer's address.
    init(loop: EventLoop, fd: Int32, onAccept: @escaping (Int32, String) -> Void) {
        self.onAccept = onAccept
        let context = Unmanaged.passUnretained(self).toOpaque()
        listener = evconnlistener_new(
            loop.base,
            { _, fd, address, _, context in
                let acceptor = Unmanaged<ConnectionAcceptor>.fromOpaque(context!).takeUnretainedValue()
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                acceptor.onAccept(fd, address.map { describeSocketAddress(UnsafePointer($0)) } ?? "unknown")
            }, context, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd)
        if listener == nil { close(fd) }
    }

    /// Stops accepting and closes the socket.
    func stop() {
        if let listener { evconnlistener_free(listener) }
        listener = nil
    }

    deinit { stop() }
}

/// `host:port` (IPv6 in brackets) for a socket address.
func describeSocketAddress(_ address: UnsafePointer<sockaddr>) -> String {
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    switch Int32(address.pointee.sa_family) {
    case AF_INET:
        return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { ipv4 in
            var raw = ipv4.pointee.sin_addr
            inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
            return "\(cText(text)):\(UInt16(bigEndian: ipv4.pointee.sin_port))"
        }
    case AF_INET6:
        return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { ipv6 in
            var raw = ipv6.pointee.sin6_addr
            inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
            return "[\(cText(text))]:\(UInt16(bigEndian: ipv6.pointee.sin6_port))"
        }
    default:
        return "unknown"
    }
}

/// The text of a NUL-terminated C buffer.
func cText(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

extension HTTP1Server {
    /// Throws `.bindFailed` when a server could not listen on `host:port` now (the socket is bound, then closed at
    /// once), so a daemon with a slow start (migrations, warmed connections) can refuse a port in use first.
    public static func checkListenAddress(host: String, port: Int) throws(NetworkError) {
        _ = try ListeningSocket(host: host, port: port)
    }
}
