// Runs one of the Network servers with a trivial handler until SIGINT or SIGTERM, for load generators:
//   ServerBench h2 PORT CERT_PEM KEY_PEM [LOOPS]   HTTP/2 over TLS; every request is answered 200 "ok"
//   ServerBench http1 PORT [LOOPS]                 HTTP/1.1; every request is answered 200 {"ok":true}
import Dispatch
import Foundation
import Network

/// Answers every HTTP/2 request at once on the loop thread.
struct TrivialHTTP2Handler: HTTP2RequestHandler {
    let response = HTTPResponse(status: 200, headers: ["content-type": "text/plain"], body: Array("ok".utf8))
    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply { .response(response) }
}

/// Answers every HTTP/1.1 request with a small JSON body.
struct TrivialHTTP1Handler: HTTP1RequestHandler {
    let response = HTTPResponse(status: 200, headers: ["content-type": "application/json"], body: Array(#"{"ok":true}"#.utf8))
    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse { response }
}

func usage() -> Never {
    FileHandle.standardError.write(Data("usage: ServerBench h2 PORT CERT KEY [LOOPS] | ServerBench http1 PORT [LOOPS]\n".utf8))
    exit(64)
}

let arguments = CommandLine.arguments
guard arguments.count >= 3, let port = Int(arguments[2]) else { usage() }

// SIGINT and SIGTERM are blocked before any thread starts (threads inherit the mask) and awaited below.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGINT)
sigaddset(&stopSignals, SIGTERM)
pthread_sigmask(SIG_BLOCK, &stopSignals, nil)

let shutdown: @Sendable () async -> Void
let group: EventLoopGroup
switch arguments[1] {
case "h2":
    guard arguments.count >= 5 else { usage() }
    group = EventLoopGroup(loopCount: arguments.count > 5 ? Int(arguments[5]) ?? 1 : 1, name: "bench-h2")
    let tls = try TLSServerContext(certificateChainFile: arguments[3], privateKeyFile: arguments[4])
    let server = try HTTP2Server(
        configuration: HTTP2ServerConfiguration(port: port), tls: tls, group: group,
        handler: TrivialHTTP2Handler())
    shutdown = { await server.shutdown() }
case "http1":
    group = EventLoopGroup(loopCount: arguments.count > 3 ? Int(arguments[3]) ?? 1 : 1, name: "bench-http1")
    let server = try HTTP1Server(configuration: HTTP1ServerConfiguration(port: port), group: group, handler: TrivialHTTP1Handler())
    shutdown = { await server.shutdown() }
default:
    usage()
}
FileHandle.standardOutput.write(Data("listening on 127.0.0.1:\(port)\n".utf8))
var received: Int32 = 0
sigwait(&stopSignals, &received)
let done = DispatchSemaphore(value: 0)
Task.detached {
    await shutdown()
    done.signal()
}
done.wait()
group.shutdown()
