import Foundation
import MarqueeTestSupport
import Synchronization
import Testing

@testable import Network

/// What a client test needs: a loop, a TLS context trusting the test CA, and a connection to a peer.
struct ClientHarness {
    let loop: EventLoop
    let tls: TLSClientContext
    let events = ClientEventLog()

    init(name: String, verification: TLSClientConfiguration.Verification = .full, caFile: String? = ClientCertificates.shared.caFile) throws {
        loop = EventLoop(name: name)
        tls = try TLSClientContext(
            configuration: TLSClientConfiguration(
                trustsSystemCAs: false, extraCAFile: caFile,
                verification: verification))
    }

    func connect(to peer: ClientPeerProcess, configuration: HTTP2ClientConnection.Configuration = .init()) -> HTTP2ClientConnection {
        connect(to: peer.origin, configuration: configuration)
    }

    func connect(to origin: HTTP2Origin, configuration: HTTP2ClientConnection.Configuration = .init()) -> HTTP2ClientConnection {
        let events = self.events
        return HTTP2ClientConnection(origin: origin, tls: tls, loop: loop, configuration: configuration) { event in
            events.record(event)
        }
    }
}

/// Things that happened, in order, recorded from any thread.
class ClientRecorder<Element: Sendable>: @unchecked Sendable {
    private let elements = Mutex<[Element]>([])
    func record(_ element: Element) { elements.withLock { $0.append(element) } }
    var all: [Element] { elements.withLock { $0 } }
}

/// Connection events as they happened.
final class ClientEventLog: ClientRecorder<HTTP2ClientConnection.Event>, @unchecked Sendable {
    var sawGoAway: Bool { all.contains { if case .goAway = $0 { true } else { false } } }
    var sawClose: Bool { all.contains { if case .closed = $0 { true } else { false } } }
}

extension Result {
    /// The error, if this is a failure.
    var failure: Failure? {
        if case .failure(let error) = self { error } else { nil }
    }
}

/// The outcome of one send as a value.
func clientResult(_ send: () async throws(NetworkError) -> HTTPResponse) async -> Result<HTTPResponse, NetworkError> {
    do throws(NetworkError) { return .success(try await send()) } catch { return .failure(error) }
}

/// Sends `count` requests at once; returns each result in order.
func clientBurst(_ count: Int, _ send: @escaping @Sendable (Int) async throws(NetworkError) -> HTTPResponse) async -> [Result<
    HTTPResponse, NetworkError
>] {
    await withTaskGroup(of: (Int, Result<HTTPResponse, NetworkError>).self) { group in
        for index in 0..<count {
            group.addTask {
                do throws(NetworkError) { return (index, .success(try await send(index))) } catch { return (index, .failure(error)) }
            }
        }
        var results = [Result<HTTPResponse, NetworkError>?](repeating: nil, count: count)
        for await (index, result) in group { results[index] = result }
        return results.map { $0! }
    }
}

/// The most streams nghttpd had open at once, from its `-v` log: a stream opens with the request's
/// HEADERS frame it receives and ends with its "stream_id=N closed" line.
func clientMaxConcurrentStreams(inNGHTTPDLog log: String) -> Int {
    var open = Set<Substring>()
    var most = 0
    for line in log.split(separator: "\n") {
        guard let range = line.range(of: "stream_id=") else { continue }
        let id = line[range.upperBound...].prefix { $0.isNumber }
        if line.contains("recv HEADERS frame") {
            open.insert(id)
            most = max(most, open.count)
        } else if line.hasSuffix("stream_id=\(id) closed") {
            open.remove(id)
        }
    }
    return most
}

@Suite struct HTTP2ClientTests {
    @Test func manyConcurrentStreamsOnOneConnection() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "h2c-many")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        let body = [UInt8](repeating: 0x61, count: 300)
        let results = await clientBurst(500) { index throws(NetworkError) in
            let request =
                index % 2 == 0
                ? HTTPRequest(method: "POST", path: "/small", headers: ["content-type": "application/json"], body: body)
                : HTTPRequest(method: "GET", path: "/small")
            return try await connection.send(request, timeout: .seconds(30))
        }
        for result in results {
            let response = try result.get()
            #expect(response.status == 200)
            #expect(response.body == Array("hello\n".utf8))
        }
        #expect(harness.events.all.first == .connected)
        #expect(harness.events.all.contains(.maxConcurrentStreamsChanged(100)))
        await connection.close()
    }

    @Test func closingFailsWhatIsPendingAndEndsTheEventStream() async throws {
        let peer = try await ClientNGHTTPD.start(maxConcurrentStreams: 1)
        let harness = try ClientHarness(name: "h2c-close")
        defer { harness.loop.shutdown() }
        // A window of 0 keeps the one stream open; the rest queue behind it.
        let connection = harness.connect(to: peer, configuration: .init(initialWindowSize: 0))
        async let results = clientBurst(5) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "GET", path: "/big"), timeout: .seconds(30))
        }
        try #require(
            try await eventually(every: .milliseconds(5)) {
                let (active, queued) = (await connection.activeStreams, await connection.queuedRequests)
                return active == 1 && queued == 4
            },
            "one stream open and four queued")
        await connection.close()
        #expect(await results.allSatisfy { $0.failure == .shutdown })
        var events: [HTTP2ClientConnection.Event] = []
        for await event in connection.events { events.append(event) }
        // nghttpd -m 1 announces the limit we already assumed, so no change is reported.
        #expect(events == [.connected, .closed(nil)])
        #expect(await connection.send(HTTPRequest(method: "GET", path: "/small"), deadline: .now + .seconds(1)).failure?.wasNotSent == true)
    }

    @Test func bodiesLargerThanTheFlowControlWindowTravelBothWays() async throws {
        let peer = try await ClientNGHTTPD.start(echoUpload: true)
        let harness = try ClientHarness(name: "h2c-big")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        let upload = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let results = await clientBurst(4) { index throws(NetworkError) in
            let request =
                index % 2 == 0
                ? HTTPRequest(method: "POST", path: "/echo", body: upload)
                : HTTPRequest(method: "GET", path: "/big")
            return try await connection.send(request, timeout: .seconds(30))
        }
        let expectedDownload = ClientNGHTTPD.bigFile
        for (index, result) in results.enumerated() {
            let response = try result.get()
            #expect(response.status == 200)
            #expect(response.body == (index % 2 == 0 ? upload : expectedDownload))
        }
        await connection.close()
    }

    @Test func aStreamLimitOfOneIsNeverExceeded() async throws {
        let peer = try await ClientNGHTTPD.start(maxConcurrentStreams: 1, verbose: true)
        let harness = try ClientHarness(name: "h2c-limit1")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        let results = await clientBurst(40) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "POST", path: "/small", body: Array("x".utf8)), timeout: .seconds(30))
        }
        #expect(results.allSatisfy { (try? $0.get().status) == 200 })
        let log = peer.log
        #expect(log.contains("recv HEADERS frame"))
        #expect(clientMaxConcurrentStreams(inNGHTTPDLog: log) == 1)
        #expect(!log.contains("REFUSED_STREAM"))
        await connection.close()
    }

    @Test func theStreamLimitRisesFromOneToThePeersValueAndIsHonoured() async throws {
        let peer = try await ClientNGHTTPD.start(maxConcurrentStreams: 3, verbose: true)
        let harness = try ClientHarness(name: "h2c-limit3")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        let results = await clientBurst(60) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "GET", path: "/big"), timeout: .seconds(30))
        }
        #expect(results.allSatisfy { (try? $0.get().status) == 200 })
        #expect(harness.events.all.contains(.maxConcurrentStreamsChanged(3)))
        let most = clientMaxConcurrentStreams(inNGHTTPDLog: peer.log)
        #expect(most <= 3)
        #expect(most > 1)
        await connection.close()
    }

    @Test func aLimitLoweredToOneMidConnectionIsHonouredFromTheAcknowledgement() async throws {
        let peer = try await ClientSettingsPeer.start(initialLimit: 8, lowerAfter: 30, responseDelay: .milliseconds(10))
        defer { peer.stop() }
        let harness = try ClientHarness(name: "h2c-lowered")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer.origin)
        let results = await clientBurst(120) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "POST", path: "/", body: Array("{}".utf8)), timeout: .seconds(30))
        }
        #expect(results.allSatisfy { (try? $0.get().status) == 200 })
        #expect(harness.events.all == [.connected, .maxConcurrentStreamsChanged(8), .maxConcurrentStreamsChanged(1)])
        let statistics = try await peer.statistics()
        #expect(statistics.requests == 120)
        #expect(statistics.mostOpenBefore > 1)
        // From the peer's side: after the client acknowledged the limit of 1, never two streams at once.
        #expect(statistics.mostOpenAfterAck == 1)
        #expect(statistics.violations == 0)
        // nghttp2 would also hold streams back on the wire; our own queue must know the limit too, or
        // requests would wait inside nghttp2, out of reach of our timeouts.
        #expect(await connection.maxConcurrentStreams == 1)
        await connection.close()
    }

    @Test func goAwayMidBurstFailsOnlyUnprocessedStreamsAsRetryable() async throws {
        let peer = try await ClientNginx.start(requestsPerConnection: 10)
        let harness = try ClientHarness(name: "h2c-goaway")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        // One request first, so the peer's SETTINGS (128 streams) are in before the burst.
        #expect(try await connection.send(HTTPRequest(method: "GET", path: "/"), timeout: .seconds(10)).status == 200)
        let results = await clientBurst(50) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "POST", path: "/", body: Array("{}".utf8)), timeout: .seconds(10))
        }
        let succeeded = results.filter { (try? $0.get().status) == 200 }.count
        let unprocessed = results.filter {
            switch $0 {
            case .failure(.goAway), .failure(.requestNotSent): true
            default: false
            }
        }.count
        #expect(succeeded == 9)
        #expect(succeeded + unprocessed == 50)
        #expect(harness.events.sawGoAway)
        // The connection refuses new work after GOAWAY.
        await #expect(throws: NetworkError.self) {
            try await connection.send(HTTPRequest(method: "GET", path: "/"), timeout: .seconds(5))
        }
    }

    @Test func whenThePeerDiesEveryRequestEndsWithARetryableError() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "h2c-kill")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: peer)
        #expect(try await connection.send(HTTPRequest(method: "GET", path: "/small"), timeout: .seconds(10)).status == 200)
        let started = Atomic<Int>(0)
        async let results = clientBurst(300) { _ throws(NetworkError) in
            started.add(1, ordering: .relaxed)
            return try await connection.send(HTTPRequest(method: "GET", path: "/big"), timeout: .seconds(60))
        }
        try #require(try await eventually(every: .milliseconds(5)) { started.load(ordering: .relaxed) == 300 })
        try #require(try await eventually(every: .milliseconds(5)) { await connection.activeStreams > 0 }, "nothing in flight")
        try await clientOffPool { peer.kill() }
        let finished = await results
        let failures = finished.compactMap { if case .failure(let error) = $0 { error } else { nil } }
        #expect(!failures.isEmpty)
        #expect(failures.allSatisfy { $0.isRetryable })
        // In flight: closed under them; still queued: never sent. Nobody waited for a timeout.
        #expect(failures.allSatisfy { $0 == .connectionClosed || $0.wasNotSent })
        #expect(failures.contains(.connectionClosed))
        #expect(harness.events.all.last == .closed(.connectionClosed))
    }

    @Test func aTimeoutCountsTimeSpentQueuedForAStreamSlot() async throws {
        let peer = try await ClientNGHTTPD.start(maxConcurrentStreams: 1, verbose: true)
        let harness = try ClientHarness(name: "h2c-timeout")
        defer { harness.loop.shutdown() }
        // A stream window of 0: the peer can send headers but no body, so the one stream never ends and
        // everything behind it waits in our queue.
        let connection = harness.connect(to: peer, configuration: .init(initialWindowSize: 0))
        // Its deadline is far beyond the queued ones', so the slot stays taken while they wait.
        async let first = connection.send(HTTPRequest(method: "GET", path: "/big"), deadline: .now + .seconds(10))
        try #require(try await eventually(every: .milliseconds(5)) { await connection.activeStreams > 0 })
        let queued = await clientBurst(4) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "GET", path: "/big"), timeout: .milliseconds(300))
        }
        // They time out without ever having been sent, and say so.
        #expect(queued.allSatisfy { if case .failure(.requestNotSent) = $0 { true } else { false } }, "\(queued) \(peer.log)")
        // Only the first request reached the peer; the others timed out in the queue.
        #expect(peer.log.components(separatedBy: "recv HEADERS frame").count - 1 == 1)
        guard case .failure(.timedOut) = await first else {
            Issue.record("the stalled stream should time out")
            return
        }
        // The connection survives timeouts: a HEAD response has no body, so it needs no window.
        #expect(try await connection.send(HTTPRequest(method: "HEAD", path: "/big"), timeout: .seconds(10)).status == 200)
    }

    @Test func aTimeoutCountsTimeSpentConnecting() async throws {
        // A socket that listens but never accepts: TCP connects, TLS never answers.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                _ = bind(fd, $0, length)
                _ = getsockname(fd, $0, &length)
            }
        }
        listen(fd, 16)
        let harness = try ClientHarness(name: "h2c-connect-timeout")
        defer { harness.loop.shutdown() }
        let connection = harness.connect(to: HTTP2Origin(host: "127.0.0.1", port: Int(UInt16(bigEndian: address.sin_port))))
        let results = await clientBurst(3) { _ throws(NetworkError) in
            try await connection.send(HTTPRequest(method: "GET", path: "/"), timeout: .milliseconds(300))
        }
        #expect(results.allSatisfy { if case .failure(.requestNotSent) = $0 { true } else { false } })
    }

    @Test func anUnansweredPingClosesTheConnection() async throws {
        let peer = try await ClientNGHTTPD.start()
        let harness = try ClientHarness(name: "h2c-ping")
        defer { harness.loop.shutdown() }
        // A timeout of 1 s: a loaded machine (the whole suite on two cores) once took over 300 ms to answer.
        let connection = harness.connect(to: peer, configuration: .init(pingInterval: .milliseconds(100), pingTimeout: .seconds(1)))
        #expect(try await connection.send(HTTPRequest(method: "GET", path: "/small"), timeout: .seconds(10)).status == 200)
        // Idle and answering: PINGs keep it open, well past one timeout. Staying open over time is the behaviour
        // under test, so this waits a fixed time.
        try await Task.sleep(for: .milliseconds(2500))
        #expect(await connection.queuedRequests == 0)
        #expect(!harness.events.sawClose)
        // A stopped peer keeps the socket open but answers nothing.
        peer.process.signal(SIGSTOP)
        defer { peer.process.signal(SIGCONT) }
        #expect(try await eventually { harness.events.all.contains(.closed(.connectionClosed)) }, "\(harness.events.all)")
    }
}
