import Dispatch
import Foundation

/// A minimal HTTP/1.1 client over a blocking loopback socket (one request per connection), run on a
/// Dispatch thread so it never blocks Swift's cooperative pool.
enum LoopbackHTTP {
    struct Response {
        let status: Int
        let headers: [String: String]
        let body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func request(
        port: Int, _ method: String, _ path: String, headers: [String: String] = [:], body: [UInt8] = [],
        timeout: Int = 30
    ) async throws -> Response {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try requestBlocking(port: port, method, path, headers: headers, body: body, timeout: timeout) })
            }
        }
    }

    /// Whether a TCP connection to the port is accepted.
    static func canConnect(port: Int) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let fd = try? connect(port: port, timeout: 5)
                if let fd { close(fd) }
                continuation.resume(returning: fd != nil)
            }
        }
    }

    private static func connect(port: Int, timeout: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket failed") }
        var time = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw Failure(description: "connect failed: errno \(errno)")
        }
        return fd
    }

    private static func requestBlocking(
        port: Int, _ method: String, _ path: String, headers: [String: String], body: [UInt8],
        timeout: Int
    ) throws -> Response {
        let fd = try connect(port: port, timeout: timeout)
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let bytes = Array((head + "\r\n").utf8) + body
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw Failure(description: "send failed: errno \(errno)") }
            sent += count
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            guard count > 0 else { throw Failure(description: "recv failed: errno \(errno)") }
            received += buffer[..<count]
        }
        guard let split = received.indices.first(where: { received[$0...].starts(with: [13, 10, 13, 10]) }) else {
            throw Failure(description: "no complete response (\(received.count) bytes)")
        }
        let lines = String(decoding: received[..<split], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure(description: "bad status line \(lines[0])") }
        var responseHeaders: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            responseHeaders[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: status, headers: responseHeaders, body: Array(received[(split + 4)...]))
    }
}
