import Foundation
import Network
import Synchronization
import Testing

/// Echoes what it received, or waits on `/wait` until released (for timeouts).
private struct EchoHandler: HTTP1RequestHandler {
    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse {
        if request.path.hasPrefix("/wait/") {
            ServerTestSignals.markStarted(path: request.path)
            await ServerTestSignals.waitForRelease(path: request.path)
        }
        return HTTPResponse(
            status: request.method == "POST" ? 201 : 200,
            headers: [
                "content-type": "application/json",
                "x-method": request.method,
                "x-path": request.path,
                "x-host": request.authority ?? "",
                "x-connection": String(context.connectionID),
                "x-token": request.headers["authorization"] ?? "",
            ], body: request.body)
    }
}

private struct EchoServer {
    let server: HTTP1Server
    let group: EventLoopGroup
    let loop = EventLoop(name: "http1-client-test")

    init(_ configure: (inout HTTP1ServerConfiguration) -> Void = { _ in }) throws {
        var configuration = HTTP1ServerConfiguration()
        configure(&configuration)
        group = EventLoopGroup(loopCount: 1, name: "http1-client-server")
        server = try HTTP1Server(configuration: configuration, group: group, handler: EchoHandler())
    }

    func client(path: String = "", timeout: Duration = .seconds(10)) throws -> HTTP1Client {
        try HTTP1Client(url: "http://127.0.0.1:\(server.port)\(path)", loop: loop, configuration: HTTP1ClientConfiguration(timeout: timeout))
    }

    func stop() async {
        await server.shutdown()
        group.shutdown()
        loop.shutdown()
    }
}

private func failure(_ body: () async throws(HTTP1ClientError) -> HTTPResponse) async -> HTTP1ClientError? {
    do throws(HTTP1ClientError) {
        let response = try await body()
        Issue.record("expected a failure, got status \(response.status)")
        return nil
    } catch {
        return error
    }
}

@Suite struct HTTP1ClientTests {
    @Test func sendsMethodPathHeadersAndBodyAndReadsTheAnswer() async throws {
        let echo = try EchoServer()
        let client = try echo.client(path: "/api/")
        let body = Array(#"{"name":"match"}"#.utf8)
        let response = try await client.send(
            HTTPRequest(
                method: "POST", path: "/v1/events?limit=2",
                headers: ["Authorization": "Bearer k", "content-type": "application/json"], body: body))
        await client.close()
        await echo.stop()
        #expect(response.status == 201)
        #expect(response.headers["x-method"] == "POST")
        #expect(response.headers["x-path"] == "/api/v1/events?limit=2")
        #expect(response.headers["x-host"] == "127.0.0.1:\(echo.server.port)")
        #expect(response.headers["x-token"] == "Bearer k")
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.body == body)
    }

    @Test func reusesOneConnectionForSequentialAndConcurrentRequests() async throws {
        // Generous timeouts on both sides: a timed-out request would close the connection, and so would the
        // server after 10 s of an idle keep-alive (a test task starved that long alongside the parallel suite on
        // 2 cores); the next request would then rightly open another, which is not what this test is about.
        let echo = try EchoServer { $0.requestReadTimeout = .seconds(300) }
        let client = try echo.client(timeout: .seconds(300))
        var connections: Set<String> = []
        for method in ["GET", "DELETE", "PUT", "GET"] {
            let response = try await client.send(HTTPRequest(method: method, path: "/x"))
            #expect(response.headers["x-method"] == method)
            connections.insert(response.headers["x-connection"] ?? "")
        }
        let concurrent = try await withThrowingTaskGroup(of: HTTPResponse.self) { group in
            for index in 0..<8 { group.addTask { try await client.send(HTTPRequest(method: "POST", path: "/n/\(index)", body: [UInt8(index)])) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        await client.close()
        let accepted = echo.server.acceptedConnectionCount
        await echo.stop()
        #expect(connections.count == 1)
        #expect(Set(concurrent.map { $0.headers["x-path"] ?? "" }) == Set((0..<8).map { "/n/\($0)" }))
        #expect(concurrent.allSatisfy { $0.body == [UInt8($0.headers["x-path"]!.split(separator: "/").last!)!] })
        #expect(accepted == 1)
    }

    @Test func reconnectsAfterTheServerClosedAnIdleConnection() async throws {
        let echo = try EchoServer { $0.requestReadTimeout = .milliseconds(100) }
        let client = try echo.client()
        let first = try await client.send(HTTPRequest(method: "GET", path: "/a"))
        // The server drops the idle connection after 100 ms. The client notices the close, or (on a busy
        // machine, if the GET goes out first) meets it and sends the GET again on a new connection. The idle
        // time is the behaviour under test: nothing outside the server's timer says when it has passed.
        try await Task.sleep(for: .milliseconds(600))
        let second = try await client.send(HTTPRequest(method: "GET", path: "/b"))
        await client.close()
        let accepted = echo.server.acceptedConnectionCount
        await echo.stop()
        #expect(first.status == 200 && second.status == 200 && second.headers["x-path"] == "/b")
        #expect(first.headers["x-connection"] != second.headers["x-connection"])
        #expect(accepted == 2)
    }

    @Test func aGETMeetingAClosedKeepAliveConnectionIsSentAgainAndAPOSTIsNot() async throws {
        let loop = EventLoop(name: "http1-client-stale")
        defer { loop.shutdown() }
        for (method, retried) in [("GET", true), ("POST", false)] {
            let server = try ClosingAfterOneAnswer()
            let client = try HTTP1Client(url: "http://127.0.0.1:\(server.port)", loop: loop)
            let first = try await client.send(HTTPRequest(method: "GET", path: "/first"))
            let second: Result<HTTPResponse, HTTP1ClientError>
            do throws(HTTP1ClientError) {
                second = .success(try await client.send(HTTPRequest(method: method, path: "/second", body: method == "POST" ? [1] : [])))
            } catch {
                second = .failure(error)
            }
            await client.close()
            server.stop()
            #expect(String(decoding: first.body, as: UTF8.self) == "answer 1")
            if retried {
                #expect(try String(decoding: second.get().body, as: UTF8.self) == "answer 2", "\(method)")
                #expect(server.acceptedConnections == 2)
            } else {
                #expect(second.map(\.status) == .failure(.connectionClosed("http://127.0.0.1:\(server.port)")), "\(method)")
                #expect(server.acceptedConnections == 1)
            }
        }
    }

    @Test func aRefusedConnectionSaysTheServerIsNotRunning() async throws {
        let loop = EventLoop(name: "http1-client-refused")
        defer { loop.shutdown() }
        let (fd, port) = try #require(clientRefusingPort())
        defer { close(fd) }
        let client = try HTTP1Client(url: "http://127.0.0.1:\(port)", loop: loop)
        let error = await failure { () async throws(HTTP1ClientError) in try await client.send(HTTPRequest(method: "GET", path: "/")) }
        #expect(error == .connectionRefused("http://127.0.0.1:\(port)"))
        #expect(error?.description.contains("is the server running") == true)
    }

    @Test func aSlowAnswerTimesOutAndTheNextRequestUsesANewConnection() async throws {
        let echo = try EchoServer()
        let client = try echo.client()
        let error = await failure { () async throws(HTTP1ClientError) in
            try await client.send(HTTPRequest(method: "GET", path: "/wait/1"), timeout: .milliseconds(300))
        }
        ServerTestSignals.release(path: "/wait/1")
        let next = try await client.send(HTTPRequest(method: "GET", path: "/after"))
        await client.close()
        await echo.stop()
        #expect(error == .timedOut("http://127.0.0.1:\(echo.server.port)", .milliseconds(300)))
        #expect(next.headers["x-path"] == "/after")
    }

    @Test func resolvesAHostNameAndSendsItAsTheHost() async throws {
        let echo = try EchoServer()
        let client = try HTTP1Client(url: "http://localhost:\(echo.server.port)", loop: echo.loop)
        let response = try await client.send(HTTPRequest(method: "GET", path: "/named"))
        await client.close()
        await echo.stop()
        #expect(response.headers["x-host"] == "localhost:\(echo.server.port)")
        #expect(response.headers["x-path"] == "/named")
    }

    @Test func aResponseOverTheLimitIsRefused() async throws {
        let echo = try EchoServer()
        var configuration = HTTP1ClientConfiguration(timeout: .seconds(10))
        configuration.maxResponseBodySize = 1024
        let client = try HTTP1Client(url: "http://127.0.0.1:\(echo.server.port)", loop: echo.loop, configuration: configuration)
        let small = try await client.send(HTTPRequest(method: "POST", path: "/small", body: Array(repeating: 1, count: 1024)))
        let error = await failure { () async throws(HTTP1ClientError) in
            try await client.send(HTTPRequest(method: "POST", path: "/big", body: Array(repeating: 1, count: 1025)))
        }
        await client.close()
        await echo.stop()
        #expect(small.body.count == 1024)
        guard case .invalidResponse = error else {
            Issue.record("expected invalidResponse, got \(String(describing: error))")
            return
        }
    }

    @Test func aClosedClientRefusesRequests() async throws {
        let echo = try EchoServer()
        let client = try echo.client()
        await client.close()
        let error = await failure { () async throws(HTTP1ClientError) in try await client.send(HTTPRequest(method: "GET", path: "/")) }
        await echo.stop()
        #expect(error == .closed)
    }

    @Test func parsesURLs() throws {
        let plain = try HTTP1ClientURL("http://127.0.0.1:8080")
        #expect(!plain.isTLS && plain.host == "127.0.0.1" && plain.port == 8080 && plain.pathPrefix == "")
        #expect(plain.authority == "127.0.0.1:8080")
        let secure = try HTTP1ClientURL("HTTPS://marquee.example/admin/")
        #expect(secure.isTLS && secure.host == "marquee.example" && secure.port == 443 && secure.pathPrefix == "/admin")
        #expect(secure.authority == "marquee.example")
        let v6 = try HTTP1ClientURL("http://[::1]:9000")
        #expect(v6.host == "::1" && v6.authority == "[::1]:9000" && v6.description == "http://[::1]:9000")
        for bad in ["127.0.0.1:8080", "ftp://host", "http://", "http://host:0", "http://host/?q=1", "http://u@host"] {
            #expect(throws: HTTP1ClientError.invalidURL(bad)) { try HTTP1ClientURL(bad) }
        }
    }

    // MARK: https, against nginx speaking HTTP/1.1 with a certificate from the test CA

    @Test func httpsVerifiesTheServerAndKeepsTheConnection() async throws {
        let peer = try await ClientNginx.start(http2: false)
        defer { peer.kill() }
        let loop = EventLoop(name: "http1-client-tls")
        defer { loop.shutdown() }
        var configuration = HTTP1ClientConfiguration(extraCAFile: ClientCertificates.shared.caFile)
        configuration.tls.trustsSystemCAs = false
        let client = try HTTP1Client(url: "https://localhost:\(peer.port)", loop: loop, configuration: configuration)
        let first = try await client.send(HTTPRequest(method: "GET", path: "/"))
        let second = try await client.send(HTTPRequest(method: "POST", path: "/", body: Array("x".utf8)))
        await client.close()
        #expect(first.status == 200 && String(decoding: first.body, as: UTF8.self) == "ok")
        #expect(second.status == 200)
    }

    @Test func httpsRejectsACertificateFromAnotherCA() async throws {
        let peer = try await ClientNginx.start(http2: false)
        defer { peer.kill() }
        let loop = EventLoop(name: "http1-client-tls-ca")
        defer { loop.shutdown() }
        var configuration = HTTP1ClientConfiguration(extraCAFile: ClientCertificates.shared.otherCAFile)
        configuration.tls.trustsSystemCAs = false
        let client = try HTTP1Client(url: "https://127.0.0.1:\(peer.port)", loop: loop, configuration: configuration)
        let error = await failure { () async throws(HTTP1ClientError) in try await client.send(HTTPRequest(method: "GET", path: "/")) }
        guard case .certificateRejected = error else {
            Issue.record("expected certificateRejected, got \(String(describing: error))")
            return
        }
    }

    @Test func httpsAgainstAPlainHTTPServerIsATLSFailure() async throws {
        let echo = try EchoServer()
        let client = try HTTP1Client(
            url: "https://127.0.0.1:\(echo.server.port)", loop: echo.loop,
            configuration: HTTP1ClientConfiguration(timeout: .seconds(10)))
        let error = await failure { () async throws(HTTP1ClientError) in try await client.send(HTTPRequest(method: "GET", path: "/")) }
        await echo.stop()
        guard case .tls = error else {
            Issue.record("expected a TLS failure, got \(String(describing: error))")
            return
        }
    }
}

/// A keep-alive HTTP/1.1 server on a blocking socket that answers the first request of every connection,
/// then closes it when the next request arrives, without answering: what a client meets when a server
/// drops an idle keep-alive connection just as the client reuses it.
private final class ClosingAfterOneAnswer: Sendable {
    let port: Int
    private let fd: Int32
    private let accepted = Mutex(0)
    private let acceptLoopEnded = DispatchSemaphore(value: 0)

    init() throws {
        guard let (listener, port) = clientLoopbackSocket(), listen(listener, 8) == 0 else {
            throw ServerTestCertificates.CertificateError(detail: "cannot listen")
        }
        fd = listener
        self.port = port
        Thread.detachNewThread { [self] in
            defer { acceptLoopEnded.signal() }
            while case let connection = accept(listener, nil, nil), connection >= 0 {
                let count = accepted.withLock {
                    $0 += 1
                    return $0
                }
                guard Self.readRequestHead(connection) else {
                    close(connection)
                    continue
                }
                let body = "answer \(count)"
                _ = "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".withCString { send(connection, $0, strlen($0), 0) }
                _ = Self.readRequestHead(connection)
                close(connection)
            }
        }
    }

    var acceptedConnections: Int { accepted.withLock { $0 } }

    /// Stops accepting: the accept loop ends when the socket is shut down, and only then is the descriptor
    /// closed. Closed first, its number could go to another test's listener while the loop was between two
    /// accepts, and the loop would then take that test's connections (seen under load: another test's
    /// client got "answer 3", and a concurrent echo test never got its answer).
    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        acceptLoopEnded.wait()
        close(fd)
    }

    /// Reads up to the blank line that ends a request's head; false at end of stream.
    private static func readRequestHead(_ connection: Int32) -> Bool {
        var received: [UInt8] = []
        var byte: UInt8 = 0
        while !received.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            guard recv(connection, &byte, 1, 0) == 1 else { return false }
            received.append(byte)
        }
        return true
    }
}
