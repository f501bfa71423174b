// A keep-alive HTTP/1.1 client connection over a blocking socket, for the load driver's own threads
// (never the cooperative pool). It speaks only what `marquee serve` answers: a status line, headers and
// a Content-Length body. One request at a time; the caller reconnects after an error.
import Foundation

/// One blocking keep-alive HTTP/1.1 connection to a loopback server.
final class BlockingHTTPConnection {
    private let port: UInt16
    private var descriptor: Int32 = -1
    private var buffer = [UInt8](repeating: 0, count: 65_536)
    private var pending: [UInt8] = []

    init(port: UInt16) { self.port = port }

    deinit { close() }

    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
        pending.removeAll()
    }

    private func connect() throws(BenchHTTPError) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw .io("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(socket)
            throw .io("connect to 127.0.0.1:\(port): \(message)")
        }
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        descriptor = socket
    }

    /// Sends one request and waits for its answer: the status and the body.
    func send(method: String, path: String, headers: [(String, String)] = [], body: [UInt8] = []) throws(BenchHTTPError)
        -> (status: Int, body: [UInt8])
    {
        if descriptor < 0 { try connect() }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        var request = Array(head.utf8)
        request += body
        do {
            try write(request)
            return try readResponse()
        } catch {
            close()
            throw error
        }
    }

    private func write(_ bytes: [UInt8]) throws(BenchHTTPError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw .io("send: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    /// Reads more bytes into `pending`; throws when the peer closed.
    private func fill() throws(BenchHTTPError) {
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.recv(descriptor, $0.baseAddress!, $0.count, 0) }
            if count > 0 {
                pending += buffer[0..<count]
                return
            }
            if count < 0 && errno == EINTR { continue }
            throw .io(count == 0 ? "connection closed by the server" : "recv: \(String(cString: strerror(errno)))")
        }
    }

    private func readResponse() throws(BenchHTTPError) -> (status: Int, body: [UInt8]) {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while headEnd == nil {
            headEnd = Self.find(separator, in: pending)
            if headEnd == nil { try fill() }
        }
        let head = String(decoding: pending[0..<headEnd!], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusParts = lines.first?.split(separator: " ") ?? []
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw .protocolError("bad status line: \(lines.first ?? "")") }
        var length = 0
        var closes = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-length" { length = Int(value) ?? 0 }
            if name == "transfer-encoding" { throw .protocolError("chunked answers are not supported") }
            if name == "connection" && value.lowercased() == "close" { closes = true }
        }
        let bodyStart = headEnd! + separator.count
        while pending.count < bodyStart + length { try fill() }
        let body = Array(pending[bodyStart..<(bodyStart + length)])
        pending.removeFirst(bodyStart + length)
        if closes { close() }
        return (status, body)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return start }
        }
        return nil
    }
}

/// A failed exchange of the bench's HTTP client.
enum BenchHTTPError: Error, CustomStringConvertible {
    case io(String)
    case protocolError(String)

    var description: String {
        switch self {
        case .io(let text): "I/O error: \(text)"
        case .protocolError(let text): "unexpected HTTP answer: \(text)"
        }
    }
}
