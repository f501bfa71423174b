// LISTEN on a dedicated connection with a thread of its own: it waits in poll() on the socket, hands
// notifications to an AsyncStream, and after the connection breaks it reconnects (with backoff) and
// issues LISTEN again for every channel. Notifications sent while it was disconnected are lost, so
// each (re)connect yields `.listening`: consumers re-check their state then (polling covers the gap).
import Foundation
import Synchronization

/// Notifications from LISTEN on a dedicated connection that survives server restarts.
public final class PostgresListener: Sendable {
    /// What the listener reports.
    public enum Event: Sendable, Equatable {
        /// LISTEN is active on a (new) connection; anything sent before may have been missed.
        case listening
        case notification(PostgresNotification)
    }

    /// Events in arrival order. Iterate it from one task.
    public let events: AsyncStream<Event>
    private let loop: ListenLoop

    /// Starts listening on `channels` (names, quoted as identifiers).
    public init(
        configuration: PostgresConfiguration, channels: [String],
        reconnectDelay: Duration = .milliseconds(250)
    ) {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(100_000))
        events = stream
        let loop = ListenLoop(
            configuration: configuration, channels: channels,
            reconnectDelay: reconnectDelay, continuation: continuation)
        continuation.onTermination = { [weak loop] _ in loop?.stop() }
        Thread.detachNewThread {
            Thread.current.name = "marquee-listen"  // from inside: set before start() it never reaches the kernel
            loop.run()
        }
        self.loop = loop
    }

    deinit { loop.stop() }

    /// Stops listening and finishes the event stream.
    public func stop() { loop.stop() }
}

/// The listener's thread body.
private final class ListenLoop: Sendable {
    let configuration: PostgresConfiguration
    let channels: [String]
    let reconnectDelay: Duration
    let continuation: AsyncStream<PostgresListener.Event>.Continuation
    let stopped = Atomic<Bool>(false)

    init(
        configuration: PostgresConfiguration, channels: [String], reconnectDelay: Duration,
        continuation: AsyncStream<PostgresListener.Event>.Continuation
    ) {
        self.configuration = configuration
        self.channels = channels
        self.reconnectDelay = reconnectDelay
        self.continuation = continuation
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    func run() {
        let delay = Double(reconnectDelay.components.seconds) + Double(reconnectDelay.components.attoseconds) / 1e18
        var backoff = delay
        while !stopped.load(ordering: .relaxed) {
            do {
                let connection = try LibPQConnection(
                    settings: configuration.settings,
                    expandDatabase: configuration.expandDatabase)
                for channel in channels {
                    _ = try connection.execute(script: "LISTEN \(quoteIdentifier(channel))")
                }
                backoff = delay
                continuation.yield(.listening)
                try receive(on: connection)
            } catch {
                // Connection failed or broke: wait, then reconnect and LISTEN again.
                sleep(seconds: backoff)
                backoff = min(backoff * 2, 5)
            }
        }
        continuation.finish()
    }

    /// Waits for notifications until the connection breaks (throws) or the listener stops.
    private func receive(on connection: LibPQConnection) throws {
        var descriptor = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
        while !stopped.load(ordering: .relaxed) {
            let ready = poll(&descriptor, 1, 200)
            if ready < 0 && errno != EINTR { throw PostgresError(kind: .connectionLost, message: "poll failed") }
            if ready > 0 {
                for notification in try connection.drainNotifications() {
                    continuation.yield(.notification(notification))
                }
                if connection.isBroken { throw PostgresError(kind: .connectionLost, message: "listener connection closed") }
            }
        }
    }

    private func sleep(seconds: Double) {
        let deadline = Date().addingTimeInterval(seconds)
        while !stopped.load(ordering: .relaxed), Date() < deadline {
            Thread.sleep(forTimeInterval: min(0.05, seconds))
        }
    }
}
