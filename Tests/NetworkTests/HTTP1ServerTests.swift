import Foundation
import Testing

@testable import Network

/// A small router: what Marquee's API layer will do on top of the server.
private struct TestRouter: HTTP1RequestHandler {
    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse {
        switch (request.method, request.path) {
        case ("GET", "/hello"), ("HEAD", "/hello"):
            return HTTPResponse(
                status: 200, headers: ["content-type": "application/json", "x-connection-id": String(context.connectionID)],
                body: Array(#"{"hello":"world"}"#.utf8))
        case ("POST", "/echo"):
            return HTTPResponse(
                status: 200,
                headers: [
                    "x-remote": context.remoteAddress,
                    "x-content-type": request.headers["content-type"] ?? "",
                    "x-host": request.authority ?? "",
                ], body: request.body)
        case ("GET", let path) where path.hasPrefix("/slow/"):
            ServerTestSignals.markStarted(path: path)
            // A handler slower than an impatient client: the delay is the behaviour under test.
            try? await Task.sleep(for: .milliseconds(600))
            ServerTestSignals.markFinished(path: path)
            return HTTPResponse(status: 200, body: Array("slow".utf8))
        case ("GET", let path) where path.hasPrefix("/stuck/"):
            // Outlasts any grace period: it answers only once the test releases it.
            ServerTestSignals.markStarted(path: path)
            await ServerTestSignals.waitForRelease(path: path)
            ServerTestSignals.markFinished(path: path)
            return HTTPResponse(status: 200, body: Array("stuck".utf8))
        case (_, "/hello"), (_, "/echo"), (_, "/slow"):
            return HTTPResponse(
                status: 405, headers: ["content-type": "application/json", "allow": "GET"],
                body: Array(#"{"reason":"MethodNotAllowed"}"#.utf8))
        default:
            return HTTPResponse(status: 404, headers: ["content-type": "application/json"], body: Array(#"{"reason":"NotFound"}"#.utf8))
        }
    }
}

private struct RunningHTTP1Server {
    let server: HTTP1Server
    let group: EventLoopGroup
    var url: String { "http://127.0.0.1:\(server.port)" }

    static func start(_ configure: (inout HTTP1ServerConfiguration) -> Void = { _ in }) throws -> RunningHTTP1Server {
        var configuration = HTTP1ServerConfiguration()
        configure(&configuration)
        let group = EventLoopGroup(loopCount: 2, name: "http1-test")
        let server = try HTTP1Server(configuration: configuration, group: group, handler: TestRouter())
        return RunningHTTP1Server(server: server, group: group)
    }

    func stop() async {
        await server.shutdown()
        group.shutdown()
    }

    func curl(_ arguments: [String]) async throws -> ServerTestProcessResult {
        try await ServerTestTools.run("curl", ["-sS", "--max-time", "20"] + arguments)
    }
}

@Suite struct HTTP1ServerTests {
    @Test func answersWithHeadersBodyAndPeer() async throws {
        let running = try RunningHTTP1Server.start()
        let result = try await running.curl(["-i", "-H", "Content-Type: application/json", "--data-binary", #"{"a":1}"#, "\(running.url)/echo"])
        await running.stop()
        #expect(result.output.hasPrefix("HTTP/1.1 200"), "\(result.all)")
        #expect(result.output.contains("x-remote: 127.0.0.1:"))
        #expect(result.output.contains("x-content-type: application/json"))
        #expect(result.output.contains("x-host: 127.0.0.1:\(running.server.port)"))
        #expect(result.output.hasSuffix(#"{"a":1}"#))
    }

    @Test func keepsConnectionsAlive() async throws {
        let running = try RunningHTTP1Server.start()
        let result = try await running.curl(["-v", "\(running.url)/hello", "\(running.url)/hello"])
        let accepted = running.server.acceptedConnectionCount
        await running.stop()
        #expect(result.output == #"{"hello":"world"}{"hello":"world"}"#, "\(result.all)")
        #expect(result.errors.contains("Re-using existing connection"), "\(result.errors)")
        #expect(accepted == 1)
    }

    @Test func refusesBodiesOverTheAPILimitWithJSON() async throws {
        let running = try RunningHTTP1Server.start { $0.maxBodySize = 1_000 }
        let over = String(repeating: "x", count: 5_000)
        let result = try await running.curl(["-w", " %{http_code}", "--data-binary", over, "\(running.url)/echo"])
        let within = try await running.curl(["-w", " %{http_code}", "--data-binary", "small", "\(running.url)/echo"])
        await running.stop()
        #expect(result.output == #"{"reason":"PayloadTooLarge"} 413"#, "\(result.all)")
        #expect(within.output == "small 200", "\(within.all)")
    }

    @Test func refusesBodiesOverTheHardLimitWithoutReadingThem() async throws {
        let running = try RunningHTTP1Server.start { $0.hardMaxBodySize = 10_000 }
        let folder = try ServerTestTools.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("big.bin")
        try Data(repeating: 1, count: 2_000_000).write(to: file)
        let result = try await running.curl(["-w", " %{http_code} %{content_type}", "--data-binary", "@\(file.path)", "\(running.url)/echo"])
        await running.stop()
        // evhttp's own HTML page is replaced by the configured answer, before any of it is written.
        #expect(result.output == #"{"reason":"PayloadTooLarge"} 413 application/json"#, "\(result.all)")
    }

    @Test func anErrorPageIsRecognisedOnlyWhenWhole() {
        let body = "<HTML><HEAD>\n<TITLE>413 Payload Too Large</TITLE>\n</HEAD><BODY>\n<H1>Payload Too Large</H1>\n</BODY></HTML>\n"
        let head = "HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/html\r\nConnection: close\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
        #expect(HTTP1ErrorPage(Array((head + body).utf8)) == HTTP1ErrorPage(status: 413, reason: "Payload Too Large"))
        #expect(HTTP1ErrorPage(Array((head + body.dropLast(5)).utf8)) == nil, "a body not yet all there")
        #expect(HTTP1ErrorPage(Array(head.utf8)) == nil)
        #expect(HTTP1ErrorPage(Array((head.replacingOccurrences(of: "text/html", with: "application/json") + body).utf8)) == nil)
        #expect(HTTP1ErrorPage(Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)) == nil)
    }

    @Test func passesEveryMethodToTheHandler() async throws {
        let running = try RunningHTTP1Server.start()
        var codes: [String] = []
        for method in ["PATCH", "PUT", "DELETE", "OPTIONS"] {
            let result = try await running.curl(["-o", "/dev/null", "-w", "%{http_code}", "-X", method, "\(running.url)/hello"])
            codes.append(result.output)
        }
        let body = try await running.curl(["-X", "PATCH", "\(running.url)/hello"])
        // Methods evhttp cannot name are answered by the server itself, in JSON too.
        let unknown = try await running.curl(["-i", "-X", "BREW", "\(running.url)/hello"])
        await running.stop()
        #expect(codes == ["405", "405", "405", "405"])
        #expect(body.output == #"{"reason":"MethodNotAllowed"}"#)
        #expect(unknown.output.hasPrefix("HTTP/1.1 405"), "\(unknown.all)")
        #expect(unknown.output.hasSuffix(#"{"reason":"MethodNotAllowed"}"#))
    }

    @Test func cutsOffAClientThatTricklesItsRequest() async throws {
        let running = try RunningHTTP1Server.start { $0.requestReadTimeout = .milliseconds(800) }
        // Sends one byte every 200 ms; the whole request would take about 10 s.
        let script = """
            import socket, sys, time, select
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            request = b"GET /hello HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Padding: " + b"p" * 10 + b"\\r\\n\\r\\n"
            sent = 0
            for byte in request:
                try:
                    s.send(bytes([byte]))
                except OSError:
                    print("closed after", sent, "bytes"); sys.exit(0)
                sent += 1
                ready, _, _ = select.select([s], [], [], 0.2)
                if ready:
                    data = s.recv(4096)
                    print(("answered " + repr(data[:12])) if data else ("closed after %d bytes" % sent)); sys.exit(0)
            print("completed", sent)
            """
        let result = try await ServerTestTools.run("python3", ["-c", script, String(running.server.port)])
        // A well-behaved client on another connection is not affected.
        let normal = try await running.curl(["\(running.url)/hello"])
        await running.stop()
        #expect(result.output.hasPrefix("closed after"), "\(result.all)")
        #expect(normal.output == #"{"hello":"world"}"#)
    }

    @Test func survivesClientsThatLeaveWhileTheHandlerRuns() async throws {
        let running = try RunningHTTP1Server.start()
        let path = "/slow/\(UUID().uuidString)"
        let impatient = try await running.curl(["--max-time", "0.2", "\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilFinished(path: path)  // the handler answers a request whose client is gone
        let head = try await running.curl(["-I", "\(running.url)/hello"])
        let after = try await running.curl(["\(running.url)/hello"])
        await running.stop()
        #expect(impatient.status != 0)
        #expect(head.output.hasPrefix("HTTP/1.1 200"), "\(head.all)")
        #expect(after.output == #"{"hello":"world"}"#, "\(after.all)")
    }

    @Test func shutdownFinishesInFlightHandlers() async throws {
        let running = try RunningHTTP1Server.start()
        let path = "/slow/\(UUID().uuidString)"
        async let slow = running.curl(["-i", "\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilStarted(path: path)
        await running.server.shutdown()
        let result = try await slow
        let after = try await running.curl(["\(running.url)/hello"])
        running.group.shutdown()
        #expect(result.output.hasPrefix("HTTP/1.1 200"), "\(result.all)")
        #expect(result.output.lowercased().contains("connection: close"))
        #expect(result.output.hasSuffix("slow"))
        #expect(after.status != 0, "the listener must be closed after shutdown")
    }

    @Test func shutdownClosesConnectionsWhoseHandlersOutlastTheGracePeriod() async throws {
        let running = try RunningHTTP1Server.start { $0.shutdownGracePeriod = .milliseconds(100) }
        let path = "/stuck/\(UUID().uuidString)"
        async let slow = running.curl(["\(running.url)\(path)"])
        try await ServerTestSignals.waitUntilStarted(path: path)
        await running.server.shutdown()
        let result = try await slow
        ServerTestSignals.release(path: path)
        try await ServerTestSignals.waitUntilFinished(path: path)  // the handler returns after evhttp is gone
        running.group.shutdown()
        #expect(result.status != 0, "\(result.all)")
    }
}
