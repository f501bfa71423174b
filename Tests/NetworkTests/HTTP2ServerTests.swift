import Foundation
import MarqueeTestSupport
import Network
import Testing

/// Routes of the test server: each exercises one server feature.
private struct TestHandler: HTTP2RequestHandler {
    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply {
        precondition(connection.loop.inEventLoop)
        switch request.path {
        case "/echo":
            return .response(
                HTTPResponse(
                    status: 200,
                    headers: [
                        "x-connection-id": String(connection.id),
                        "x-remote": connection.remoteAddress,
                        "x-method": request.method,
                        "x-body-size": String(request.body.count),
                    ], body: request.body))
        case "/count":
            // Per-connection state: how many requests this connection has made.
            let counter = (connection.state as? Counter) ?? Counter()
            connection.state = counter
            counter.value += 1
            return .response(HTTPResponse(status: 200, body: Array("\(counter.value)".utf8)))
        case "/async":
            return .deferred {
                // A handler that answers later: the delay is the behaviour under test.
                try? await Task.sleep(for: .milliseconds(50))
                return HTTPResponse(status: 202, body: Array("later".utf8))
            }
        case let path where path.hasPrefix("/slow/"):
            ServerTestSignals.markStarted(path: path)
            return .deferred {
                // A handler slower than an impatient client: the delay is the behaviour under test.
                try? await Task.sleep(for: .milliseconds(600))
                ServerTestSignals.markFinished(path: path)
                return HTTPResponse(status: 200, body: Array("slow".utf8))
            }
        case let path where path.hasPrefix("/stuck/"):
            // Outlasts any grace period: it answers only once the test releases it.
            ServerTestSignals.markStarted(path: path)
            return .deferred {
                await ServerTestSignals.waitForRelease(path: path)
                ServerTestSignals.markFinished(path: path)
                return HTTPResponse(status: 200, body: Array("stuck".utf8))
            }
        case "/raise":
            connection.setMaxConcurrentStreams(7)
            return .response(HTTPResponse(status: 200))
        case "/goaway":
            connection.goAway(errorCode: 0, debugData: Array(#"{"reason":"TestGoAway"}"#.utf8))
            return .response(HTTPResponse(status: 200))
        case "/goaway-after-2":
            connection.goAway(errorCode: 0xb, debugData: Array(#"{"reason":"Later"}"#.utf8), afterResponses: 2)
            return .response(HTTPResponse(status: 200))
        case "/big":
            return .response(HTTPResponse(status: 200, body: [UInt8](repeating: 0x61, count: 300_000)))
        default:
            return .response(HTTPResponse(status: 404))
        }
    }
}

private final class Counter { var value = 0 }

/// A running server with the test handler, stopped by `stop()`.
private struct RunningServer {
    let server: HTTP2Server
    let group: EventLoopGroup
    let certificates: ServerTestCertificates
    var url: String { "https://127.0.0.1:\(server.port)" }

    static func start(_ configure: (inout HTTP2ServerConfiguration) -> Void = { _ in }) async throws -> RunningServer {
        let certificates = try await ServerTestCertificates.shared.value
        var configuration = HTTP2ServerConfiguration()
        configure(&configuration)
        let group = EventLoopGroup(loopCount: 2, name: "h2-test")
        let server = try HTTP2Server(configuration: configuration, tls: certificates.context(), group: group, handler: TestHandler())
        return RunningServer(server: server, group: group, certificates: certificates)
    }

    func stop() async {
        await server.shutdown()
        group.shutdown()
    }

    func curl(_ arguments: [String]) async throws -> ServerTestProcessResult {
        try await ServerTestTools.run("curl", ["-sS", "--http2", "--cacert", certificates.caFile, "--max-time", "20"] + arguments)
    }

    func nghttp(_ arguments: [String]) async throws -> ServerTestProcessResult {
        try await ServerTestTools.run("nghttp", ["--timeout=20"] + arguments)
    }
}

@Suite struct HTTP2ServerTests {
    @Test func answersCurlOverTLSWithALPNh2() async throws {
        let running = try await RunningServer.start()
        let result = try await running.curl(["-i", "-X", "POST", "--data-binary", "hello", "\(running.url)/echo"])
        await running.stop()
        #expect(result.status == 0, "\(result.all)")
        #expect(result.output.hasPrefix("HTTP/2 200"))
        #expect(result.output.contains("x-method: POST"))
        #expect(result.output.contains("x-body-size: 5"))
        #expect(result.output.contains("x-remote: 127.0.0.1:"))
        #expect(result.output.hasSuffix("hello"))
    }

    @Test func forgetsConnectionsOnceClientsLeave() async throws {
        let running = try await RunningServer.start()
        _ = try await running.curl(["\(running.url)/echo"])
        _ = try await running.curl(["\(running.url)/echo"])
        let forgotten = try await eventually { running.server.connectionCount == 0 }
        await running.stop()
        #expect(forgotten, "connections still open: \(running.server.connectionCount)")
    }

    @Test func closesIdleConnectionsWithGoAway() async throws {
        let running = try await RunningServer.start { $0.idleTimeout = .milliseconds(300) }
        // A client that sends its preface and SETTINGS, then nothing: it should see GOAWAY, then EOF.
        let script = """
            import socket, ssl, sys
            context = ssl.create_default_context(cafile=sys.argv[2])
            context.set_alpn_protocols(["h2"])
            s = context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
            s.settimeout(10)
            s.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
            data = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk: break
                    data += chunk
            except socket.timeout:
                print("timeout"); sys.exit(0)
            types = []
            while len(data) >= 9:
                length = int.from_bytes(data[0:3], "big")
                types.append(data[3])
                data = data[9 + length:]
            print("eof", "goaway" if 7 in types else "no-goaway")
            """
        let result = try await ServerTestTools.run("python3", ["-c", script, String(running.server.port), running.certificates.caFile])
        await running.stop()
        #expect(result.output == "eof goaway\n", "\(result.all)")
    }

    @Test func keepsPerConnectionState() async throws {
        let running = try await RunningServer.start()
        // One curl run reuses its connection for both URLs; a second run is a new connection.
        let first = try await running.curl(["\(running.url)/count", "\(running.url)/count"])
        let second = try await running.curl(["\(running.url)/count"])
        await running.stop()
        #expect(first.output == "12", "\(first.all)")
        #expect(second.output == "1", "\(second.all)")
    }

    @Test func answersAsyncHandlersOnTheLoop() async throws {
        let running = try await RunningServer.start()
        let result = try await running.curl(["-i", "\(running.url)/async"])
        await running.stop()
        #expect(result.output.hasPrefix("HTTP/2 202"), "\(result.all)")
        #expect(result.output.hasSuffix("later"))
    }

    @Test func refusesClientsWithoutALPNh2() async throws {
        let running = try await RunningServer.start()
        let result = try await ServerTestTools.run(
            "curl",
            [
                "-sS", "--http1.1", "--cacert", running.certificates.caFile,
                "--max-time", "10", "\(running.url)/echo",
            ])
        await running.stop()
        #expect(result.status != 0, "\(result.all)")
    }

    @Test func servesManyConcurrentStreams() async throws {
        let running = try await RunningServer.start()
        let folder = try ServerTestTools.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        try Data(repeating: 0x7b, count: 300).write(to: folder.appendingPathComponent("body.json"))
        let result = try await ServerTestTools.run(
            "h2load",
            [
                "-n", "1000", "-c", "2", "-m", "20", "-d", "body.json",
                "\(running.url)/echo",
            ], in: folder)
        let nghttp = try await running.nghttp(["-n", "-m", "50", "-s", "\(running.url)/echo"])
        await running.stop()
        #expect(result.output.contains("requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed"), "\(result.all)")
        #expect(result.output.contains("status codes: 1000 2xx"))
        #expect(nghttp.status == 0, "\(nghttp.all)")
        #expect(nghttp.output.components(separatedBy: "/echo").count - 1 == 50, "\(nghttp.all)")
    }

    @Test func receivesAndSendsBodiesLargerThanTheFlowControlWindow() async throws {
        let running = try await RunningServer.start()
        let folder = try ServerTestTools.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let body = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let file = folder.appendingPathComponent("body.bin")
        try Data(body).write(to: file)
        let echoed = folder.appendingPathComponent("echoed.bin")
        let upload = try await running.curl(["--data-binary", "@\(file.path)", "-o", echoed.path, "\(running.url)/echo"])
        let download = try await running.curl(["-o", "/dev/null", "-w", "%{size_download}", "\(running.url)/big"])
        await running.stop()
        #expect(upload.status == 0, "\(upload.all)")
        #expect(try Data(contentsOf: echoed) == Data(body))
        #expect(download.output == "300000", "\(download.all)")
    }

    @Test func refusesOversizedBodiesWith413() async throws {
        let running = try await RunningServer.start { $0.maxRequestBodySize = 1_000 }
        let folder = try ServerTestTools.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("body.bin")
        try Data(repeating: 7, count: 500_000).write(to: file)
        let result = try await running.curl(["-o", "/dev/null", "-w", "%{http_code}", "--data-binary", "@\(file.path)", "\(running.url)/echo"])
        // Without Content-Length the limit is found while the body streams in.
        let chunked = try await running.curl([
            "-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Length:",
            "-H", "Transfer-Encoding: chunked", "--data-binary", "@\(file.path)", "\(running.url)/echo",
        ])
        let small = try await running.curl(["-o", "/dev/null", "-w", "%{http_code}", "--data-binary", "small", "\(running.url)/echo"])
        await running.stop()
        #expect(result.output == "413", "\(result.all)")
        #expect(chunked.output == "413", "\(chunked.all)")
        #expect(small.output == "200", "\(small.all)")
    }

    @Test func resetsStreamsWithTooManyHeaderBytes() async throws {
        let running = try await RunningServer.start { $0.maxHeaderListSize = 4_096 }
        let big = try await running.curl([
            "-o", "/dev/null", "-w", "%{http_code}", "-H", "x-big: \(String(repeating: "b", count: 8_000))",
            "\(running.url)/echo",
        ])
        let small = try await running.curl(["-o", "/dev/null", "-w", "%{http_code}", "-H", "x-small: s", "\(running.url)/echo"])
        await running.stop()
        #expect(big.output != "200", "\(big.all)")
        #expect(small.output == "200", "\(small.all)")
    }

    @Test func changesMaxConcurrentStreamsPerConnection() async throws {
        let running = try await RunningServer.start { $0.maxConcurrentStreams = 1 }
        let result = try await running.nghttp(["-v", "-n", "\(running.url)/raise", "\(running.url)/echo"])
        await running.stop()
        #expect(result.status == 0, "\(result.all)")
        let received = result.output.components(separatedBy: "recv SETTINGS frame").dropFirst()
        #expect(received.first?.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):1]") == true, "\(result.output)")
        #expect(received.contains { $0.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7]") }, "\(result.output)")
    }

    @Test func sendsGoAwayFromTheHandler() async throws {
        let running = try await RunningServer.start()
        let result = try await running.nghttp(["-v", "-n", "\(running.url)/goaway"])
        await running.stop()
        #expect(result.output.contains("recv GOAWAY frame"), "\(result.all)")
        #expect(result.output.contains(#"[{"reason":"TestGoAway"}]"#), "\(result.output)")
        #expect(result.output.contains(":status: 200"))
    }

    @Test func goesAwayAfterTheGivenNumberOfResponses() async throws {
        let running = try await RunningServer.start()
        // The GOAWAY set up by the first request goes out with the second response.
        let result = try await running.nghttp(["-v", "-n", "\(running.url)/goaway-after-2", "\(running.url)/echo"])
        await running.stop()
        #expect(result.output.contains("recv GOAWAY frame"), "\(result.all)")
        #expect(result.output.contains(#"error_code=ENHANCE_YOUR_CALM(0x0b), opaque_data(18)=[{"reason":"Later"}]"#), "\(result.output)")
        #expect(result.output.components(separatedBy: ":status: 200").count - 1 == 2, "\(result.output)")
    }

    @Test func survivesClientsThatLeaveWhileTheHandlerRuns() async throws {
        let running = try await RunningServer.start()
        let path = "/slow/\(UUID().uuidString)"
        let impatient = try await running.curl(["--max-time", "0.2", "\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilFinished(path: path)  // the deferred response finds its connection closed
        let after = try await running.curl(["\(running.url)/count"])
        await running.stop()
        #expect(impatient.status != 0)
        #expect(after.output == "1", "\(after.all)")
    }

    @Test func shutdownLetsInFlightStreamsFinish() async throws {
        let running = try await RunningServer.start()
        let path = "/slow/\(UUID().uuidString)"
        async let slow = running.curl(["-i", "\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilStarted(path: path)
        await running.server.shutdown()
        let result = try await slow
        let after = try await running.curl(["\(running.url)/echo"])
        running.group.shutdown()
        #expect(result.output.hasPrefix("HTTP/2 200"), "\(result.all)")
        #expect(result.output.hasSuffix("slow"))
        #expect(after.status != 0, "the listener must be closed after shutdown")
    }

    @Test func shutdownClosesStreamsThatOutlastTheGracePeriod() async throws {
        let running = try await RunningServer.start { $0.shutdownGracePeriod = .milliseconds(100) }
        let path = "/stuck/\(UUID().uuidString)"
        async let slow = running.curl(["\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilStarted(path: path)
        await running.server.shutdown()
        let result = try await slow
        ServerTestSignals.release(path: path)
        try await ServerTestSignals.waitUntilFinished(path: path)  // the deferred response finds its connection closed
        running.group.shutdown()
        #expect(result.status != 0, "\(result.all)")
        #expect(running.server.connectionCount == 0)
    }
}
