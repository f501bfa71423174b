import Foundation
import MarqueeCore
import MarqueeService
import MarqueeTestSupport
import Synchronization
import Testing

private final class EventLog: Sendable {
    private let lines = Mutex<[String]>([])
    private let waiting = Mutex(0)
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
    /// A service began waiting for the shutdown request.
    func waits() { waiting.withLock { $0 += 1 } }
    /// How many services wait for the shutdown request.
    var servicesWaiting: Int { waiting.withLock { $0 } }
}

private struct RecordingService: Service {
    let name: String
    let log: EventLog
    /// How the service reacts to the shutdown request.
    enum Behaviour: Sendable { case stopsWhenAsked, ignoresShutdown, failsAtOnce }
    let behaviour: Behaviour

    struct Failure: Error {}

    func run(until shutdown: ShutdownSignal) async throws {
        switch behaviour {
        case .stopsWhenAsked:
            log.waits()
            await shutdown.wait()
            log.append("\(name) finished in-flight work")
        case .ignoresShutdown:
            // A service that never stops on its own: the endless wait is the behaviour under test.
            try await Task.sleep(for: .seconds(3600))
        case .failsAtOnce:
            throw Failure()
        }
    }
}

private let quiet = Logger(level: .error, sink: { _ in })

@Suite struct ServiceGroupTests {
    @Test func shutdownStopsEveryServiceGracefully() async throws {
        let log = EventLog()
        let group = ServiceGroup(
            services: [
                RecordingService(name: "api", log: log, behaviour: .stopsWhenAsked),
                RecordingService(name: "dispatcher", log: log, behaviour: .stopsWhenAsked),
            ], logger: quiet)
        async let running: Void = group.run(handlingSignals: [])
        // Both run and wait for the request before it comes.
        #expect(try await eventually { log.servicesWaiting == 2 }, "the services never started")
        group.shutdown.trigger()
        try await running
        #expect(Set(log.all) == ["api finished in-flight work", "dispatcher finished in-flight work"])
    }

    @Test func aServiceThatIgnoresShutdownIsCancelledAfterTheGracePeriod() async throws {
        let log = EventLog()
        let group = ServiceGroup(
            services: [
                RecordingService(name: "stubborn", log: log, behaviour: .ignoresShutdown),
                RecordingService(name: "api", log: log, behaviour: .stopsWhenAsked),
            ], gracePeriod: .milliseconds(50), logger: quiet)
        async let running: Void = group.run(handlingSignals: [])
        group.shutdown.trigger()
        try await running
        #expect(log.all == ["api finished in-flight work"])
    }

    @Test func aFailingServiceStopsTheOthersAndItsErrorIsThrown() async {
        let log = EventLog()
        let group = ServiceGroup(
            services: [
                RecordingService(name: "broken", log: log, behaviour: .failsAtOnce),
                RecordingService(name: "api", log: log, behaviour: .stopsWhenAsked),
            ], logger: quiet)
        await #expect(throws: RecordingService.Failure.self) { try await group.run(handlingSignals: []) }
        #expect(log.all == ["api finished in-flight work"])
    }

    @Test func sigtermTriggersTheShutdown() async throws {
        let log = EventLog()
        let shutdown = ShutdownSignal()
        let group = ServiceGroup(
            services: [RecordingService(name: "api", log: log, behaviour: .stopsWhenAsked)], shutdown: shutdown,
            logger: quiet)
        // Ignored until the group's handler is in place, so an early signal neither kills the test process nor
        // is lost for good: it is sent again until the group reacts (under load the group may start late).
        signal(SIGUSR2, SIG_IGN)
        async let running: Void = group.run(handlingSignals: [SIGUSR2])
        let reached = try await eventually {
            if !shutdown.isTriggered { kill(getpid(), SIGUSR2) }
            return shutdown.isTriggered
        }
        #expect(reached, "SIGUSR2 never reached the group")
        shutdown.trigger()
        try await running
        #expect(log.all == ["api finished in-flight work"])
    }
}
