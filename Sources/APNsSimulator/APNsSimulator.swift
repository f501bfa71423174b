// The simulator host: the engine behind two HTTP/2-over-TLS listeners (push and management) that answer as
// Apple's hosts do, and a control listener (plain HTTP/1.1) for what only a simulator is asked, with its
// certificates, trusted key and channels in a state folder. The engine decides everything; the host only
// keeps one engine state per connection and applies the engine's connection actions, delays and dropped answers,
// and hands the simulated devices' registrations to their app backend (ActivityRegistrar).
import Foundation
import MarqueeCore
import Network
import Synchronization

/// A running APNs simulator: start it, read its ports and files, send to it, shut it down.
public final class APNsSimulator: Sendable {
    public let configuration: SimulatorConfiguration
    public let engine: SimulatorEngine
    public let files: SimulatorFiles
    /// The ports actually bound (useful when the configuration asked for 0).
    public let pushPort: Int
    public let managementPort: Int
    /// The control routes' port (`SimulatorControlRoutes`).
    public let controlPort: Int
    private let servers: [HTTP2Server]
    private let control: HTTP1Server
    private let group: EventLoopGroup
    private let writer: ChannelFileWriter
    private let registrar: ActivityRegistrar?
    private let clock: any WallClock
    private let logger: Logger?

    /// Prepares the state folder, loads the channels and the devices and starts the listeners. File work runs on a
    /// thread of its own.
    public static func start(
        configuration: SimulatorConfiguration, clock: any WallClock = SystemWallClock(), logger: Logger? = nil
    ) async throws -> APNsSimulator {
        try configuration.validate()
        let (files, trustedKey, channels, tls, deviceSpecs) = try await offThePool {
            () throws -> (SimulatorFiles, SimulatorTrustedKey, [SimulatorChannel], TLSServerContext, [SimulatedDeviceSpec]) in
            let files = try SimulatorFiles.prepare(configuration)
            let tls = try TLSServerContext(certificateChainFile: files.certificateFile, privateKeyFile: files.certificateKeyFile)
            var specs: [SimulatedDeviceSpec] = []
            if let file = configuration.devicesFile {
                guard let data = FileManager.default.contents(atPath: file) else { throw SimulatorStateError("cannot read --devices \(file)") }
                do { specs = try SimulatedDeviceSpec.parse(Array(data)) } catch {
                    throw SimulatorStateError("--devices \(file): \(error)")
                }
            }
            return (files, try files.trustedKey(), try files.loadChannels(), tls, specs)
        }
        let group = EventLoopGroup(loopCount: configuration.loopCount, name: "apns-simulator")
        let devices = SimulatedDevices(configuration: configuration)
        devices.add(deviceSpecs)
        let registrar: ActivityRegistrar?
        do {
            registrar = try configuration.appBackend.map { backend throws(SimulatorConfigurationError) in
                try ActivityRegistrar(backend: backend, devices: devices, group: group, logger: logger)
            }
        } catch {
            await offThePool { group.shutdown() }
            throw error
        }
        let writer = ChannelFileWriter(files: files, logger: logger)
        var deviceActions: (@Sendable ([DeviceAction]) -> Void)?
        if let registrar { deviceActions = { actions in registrar.submit(actions) } }
        let engine = SimulatorEngine(
            configuration: configuration, trustedKeys: [trustedKey], clock: clock, logger: logger, devices: devices,
            channelsChanged: { writer.channelsChanged() }, deviceActions: deviceActions)
        engine.restoreChannels(channels)
        writer.attach(engine)

        var serverConfiguration = HTTP2ServerConfiguration(host: configuration.host, port: configuration.pushPort)
        serverConfiguration.maxConcurrentStreams = engine.initialStreamLimit
        serverConfiguration.maxRequestBodySize = 64 * 1024
        serverConfiguration.payloadTooLargeResponse = HTTPResponse(
            status: 413, headers: [SimulatorHeader.contentType: "application/json"], body: SimulatorErrorBody.json(reason: "PayloadTooLarge"))
        serverConfiguration.shutdownGracePeriod = .seconds(2)
        // APNs keeps idle connections for a long time and asks for a PING after about an hour (docs/apns.md#http2).
        serverConfiguration.idleTimeout = .seconds(2 * 3_600)
        var servers: [HTTP2Server] = []
        let control: HTTP1Server
        do {
            for (listener, port) in [(SimulatorListener.push, configuration.pushPort), (.management, configuration.managementPort)] {
                serverConfiguration.port = port
                servers.append(
                    try HTTP2Server(
                        configuration: serverConfiguration, tls: tls, group: group,
                        handler: SimulatorRequestHandler(engine: engine, listener: listener)))
            }
            var controlConfiguration = HTTP1ServerConfiguration(host: configuration.host, port: configuration.controlPort)
            controlConfiguration.shutdownGracePeriod = .seconds(2)
            control = try HTTP1Server(
                configuration: controlConfiguration, group: group,
                handler: SimulatorControlHandler(routes: SimulatorControlRoutes(engine: engine)))
        } catch {
            for server in servers { await server.shutdown() }
            await registrar?.shutdown(grace: .zero)
            await offThePool { group.shutdown() }
            throw error
        }
        return APNsSimulator(
            configuration: configuration, engine: engine, files: files, servers: servers, control: control, group: group,
            writer: writer, registrar: registrar, clock: clock, logger: logger)
    }

    private init(
        configuration: SimulatorConfiguration, engine: SimulatorEngine, files: SimulatorFiles, servers: [HTTP2Server],
        control: HTTP1Server, group: EventLoopGroup, writer: ChannelFileWriter, registrar: ActivityRegistrar?,
        clock: any WallClock, logger: Logger?
    ) {
        self.configuration = configuration
        self.engine = engine
        self.files = files
        self.servers = servers
        self.control = control
        self.group = group
        self.writer = writer
        self.registrar = registrar
        self.clock = clock
        self.logger = logger
        pushPort = servers[0].port
        managementPort = servers[1].port
        controlPort = control.port
    }

    /// `https://host:port` of the push (device pushes and broadcasts) listener.
    public var pushURL: String { Self.url("https", configuration.host, pushPort) }
    /// `https://host:port` of the channel-management listener.
    public var managementURL: String { Self.url("https", configuration.host, managementPort) }
    /// `http://host:port` of the control listener.
    public var controlURL: String { Self.url("http", configuration.host, controlPort) }

    private static func url(_ scheme: String, _ host: String, _ port: Int) -> String {
        "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// The process environment that points a `marquee` process at this simulator
    /// (`MARQUEE_APNS_PUSH_URL`, `MARQUEE_APNS_MANAGE_URL`, and `MARQUEE_APNS_CA_FILE` when the CA was generated):
    /// the names `marquee` reads, spelled here so that the simulator needs nothing of Marquee's APNs module.
    public var environmentVariables: [String: String] {
        var variables = ["MARQUEE_APNS_PUSH_URL": pushURL, "MARQUEE_APNS_MANAGE_URL": managementURL]
        variables["MARQUEE_APNS_CA_FILE"] = files.caCertificateFile
        return variables
    }

    /// What to tell a user: where to connect, which CA to trust and which key to sign with.
    public var summary: String {
        var lines = [
            "APNs simulator (\(configuration.environment.rawValue))",
            "  push:        \(pushURL)",
            "  management:  \(managementURL)",
            "  control:     \(controlURL) (GET /status, POST /rejections, POST /invalid-tokens/<hex>, DELETE /records,",
            "               POST /devices, GET /devices, GET /devices/<token or installation id>, DELETE /devices)",
            "  signing key: \(files.signingKeyFile) (key id \(files.keyID), team id \(files.teamID))",
            "  certificate: \(files.certificateFile)",
        ]
        if let ca = files.caCertificateFile { lines.append("  CA:          \(ca)") }
        lines.append("  channels:    \(files.channelsFile)")
        if !engine.devices.isEmpty { lines.append("  devices:     \(engine.devices.snapshot(at: clock.now).count)") }
        lines.append("  for marquee: " + environmentVariables.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
        return lines.joined(separator: "\n")
    }

    /// What every simulated device shows now (`SimulatedDevices.report(at:)`).
    public var deviceReport: JSONValue { engine.devices.report(at: clock.now) }

    /// Stops the listeners (in-flight requests get a short grace period), sends the registrations still queued (for a
    /// few seconds at most), writes the channels and the device report, and stops the loops.
    public func shutdown() async {
        for server in servers { await server.shutdown() }
        await control.shutdown()
        await registrar?.shutdown()
        await writer.flush()
        if let file = configuration.deviceReportFile, !engine.devices.isEmpty {
            let report = deviceReport.jsonString
            let logger = self.logger
            await offThePool {
                do { try SimulatorFiles.write(report, to: file, secret: false) } catch {
                    logger?.error("cannot write the device report", ["error": .string("\(error)")])
                }
            }
        }
        let group = self.group
        await offThePool { group.shutdown() }
    }

    /// Runs until the calling task is cancelled, then shuts down.
    public func run() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(3_600))
        }
        await shutdown()
    }
}

/// Runs blocking work (file system, joining loop threads) on a thread outside Swift's cooperative pool.
private func offThePool<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Swift.Result { try body() }) }
    }
}

private func offThePool(_ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { continuation in
        DispatchQueue.global().async {
            body()
            continuation.resume()
        }
    }
}

/// The engine's state for one connection, kept in `HTTP2ServerConnection.state` (touched on its loop thread only).
private final class ConnectionBox {
    var state: SimulatorConnectionState
    /// Its answers held back by added latency (their tasks count down; the close reads what is left).
    let held = HeldAnswers()
    init(_ state: SimulatorConnectionState) { self.state = state }
}

/// A connection's answers held back by added latency, and whether it closed.
private final class HeldAnswers: Sendable {
    private let counts = Mutex((held: 0, closed: false))

    func hold() { counts.withLock { $0.held += 1 } }

    /// The answer is ready; false when its connection closed first (it was in flight when the client went away).
    func release() -> Bool {
        counts.withLock { counts in
            guard !counts.closed else { return false }
            counts.held -= 1
            return true
        }
    }

    /// The connection closed: the answers still held.
    func close() -> Int {
        counts.withLock { counts in
            counts.closed = true
            return counts.held
        }
    }
}

/// Hands each request to the engine and applies what it answers to the connection.
private struct SimulatorRequestHandler: HTTP2RequestHandler {
    let engine: SimulatorEngine
    let listener: SimulatorListener

    func connectionOpened(_ connection: HTTP2ServerConnection) {
        connection.state = ConnectionBox(engine.makeConnectionState())
    }

    func connectionClosed(_ connection: HTTP2ServerConnection) {
        guard let box = connection.state as? ConnectionBox else { return }
        let unanswered = box.held.close()
        if unanswered > 0 { engine.unansweredAtDisconnect.add(unanswered, ordering: .relaxed) }
    }

    func handle(_ request: HTTPRequest, connection: HTTP2ServerConnection) -> HTTP2Reply {
        let box = connection.state as? ConnectionBox ?? ConnectionBox(engine.makeConnectionState())
        connection.state = box
        let reply = engine.handle(request, on: listener, connection: &box.state)
        for action in reply.actions {
            switch action {
            case .setMaxConcurrentStreams(let limit): connection.setMaxConcurrentStreams(limit)
            case .goAway(let code, let debugData): connection.goAway(errorCode: code, debugData: debugData)
            }
        }
        // INTERNAL_ERROR, not REFUSED_STREAM: a refused stream would tell the client that nothing was done.
        if reply.dropsAnswer { return .reset(errorCode: 2) }
        guard reply.delay > .zero else { return .response(reply.response) }
        let response = reply.response
        let delay = reply.delay
        let held = box.held
        let engine = engine
        held.hold()
        engine.answersInFlight.add(1, ordering: .relaxed)
        return .deferred {
            try? await Task.sleep(for: delay)
            engine.answersInFlight.subtract(1, ordering: .relaxed)
            _ = held.release()
            return response
        }
    }
}
