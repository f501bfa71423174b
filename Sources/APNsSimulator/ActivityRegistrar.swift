// The app's backend of the simulated devices: when a device mints an update token for a new activity, its app
// would hand the token to its backend, which registers it with Marquee (`PUT /v1/installations/{id}/activities/
// {activityId}`, docs/api.md#activities). The event is named by the attribute the type marks as its event key
// (docs/schemas.md#the-event-key), given with `--event-key` or read from Marquee's `GET /v1/attribute-types/{name}`.
// Registrations are queued and sent by a few workers over plain HTTP/1.1, off the request path, so the simulator's
// answers never wait for Marquee; each is tried a bounded number of times. Whether to try again is a value
// (`RegistrationAttempt`), tested without I/O.
import Foundation
import MarqueeCore
import Network
import Synchronization

/// Where the simulated devices' app backend registers activities, and as whom.
public struct SimulatorAppBackend: Sendable, Hashable {
    /// Marquee's base URL, `http://host:port`.
    public var url: String
    /// A Marquee API key with the `tokens` scope, sent as `Authorization: Bearer`.
    public var apiKey: String
    /// The app id passed as `?app=`, for keys not bound to an app.
    public var appID: String?
    /// Tries per registration (the first included).
    public var attempts = 4

    public init(url: String, apiKey: String, appID: String? = nil) {
        self.url = url
        self.apiKey = apiKey
        self.appID = appID
    }
}

/// What to do after one try of a registration: the decision of the registrar's retry loop.
enum RegistrationAttempt: Equatable {
    /// Done, with this result for the activity.
    case finished(SimulatedActivity.Registration)
    /// Try again after this long.
    case retry(after: Duration)

    /// The decision after try number `attempt` (1 for the first) ended with an answer or a transport failure.
    /// 2xx is done; 429, 5xx and transport failures are tried again with doubling pauses until `attempts` are
    /// used; any other status is a refusal that another try would not change.
    static func after(status: Int?, failure: String?, attempt: Int, attempts: Int) -> RegistrationAttempt {
        if let status, (200..<300).contains(status) { return .finished(.registered(status: status)) }
        let retryable = status.map { $0 == 429 || $0 >= 500 } ?? true
        let description = status.map { "HTTP \($0)" } ?? (failure ?? "no answer")
        guard retryable else { return .finished(.failed(description)) }
        guard attempt < attempts else { return .finished(.failed("\(description) after \(attempt) tries")) }
        return .retry(after: .milliseconds(100 << min(attempt - 1, 6)))
    }
}

/// Sends the devices' activity registrations to the app backend; see the comment at the top of this file.
final class ActivityRegistrar: Sendable {
    /// Registrations sent at once.
    static let workerCount = 4

    private let backend: SimulatorAppBackend
    private let devices: SimulatedDevices
    private let logger: Logger?
    private let clients: [HTTP1Client]
    /// One queue per worker (an AsyncStream has one consumer), filled in turn.
    private let queues: [AsyncStream<ActivityRegistration>.Continuation]
    private let nextQueue = Atomic<Int>(0)
    private let workers: [Task<Void, Never>]

    init(backend: SimulatorAppBackend, devices: SimulatedDevices, group: EventLoopGroup, logger: Logger?) throws(SimulatorConfigurationError) {
        self.backend = backend
        self.devices = devices
        self.logger = logger
        var clients: [HTTP1Client] = []
        do {
            for _ in 0..<Self.workerCount {
                clients.append(try HTTP1Client(url: backend.url, loop: group.next(), configuration: HTTP1ClientConfiguration(timeout: .seconds(10))))
            }
        } catch {
            throw SimulatorConfigurationError("--app-backend \(backend.url): \(error)")
        }
        self.clients = clients
        var queues: [AsyncStream<ActivityRegistration>.Continuation] = []
        var workers: [Task<Void, Never>] = []
        for client in clients {
            let (stream, continuation) = AsyncStream<ActivityRegistration>.makeStream()
            queues.append(continuation)
            workers.append(
                Task { [backend, devices, logger] in
                    for await registration in stream {
                        let result = await Self.register(registration, client: client, backend: backend, devices: devices, logger: logger)
                        devices.registrationFinished(registration, result)
                    }
                })
        }
        self.queues = queues
        self.workers = workers
    }

    /// Queues registrations; returns at once.
    func submit(_ actions: [DeviceAction]) {
        for case .registerActivity(let registration) in actions {
            let turn = nextQueue.wrappingAdd(1, ordering: .relaxed).oldValue
            queues[(turn & Int.max) % queues.count].yield(registration)
        }
    }

    /// Sends what is queued, for up to `grace`, then stops the workers and closes the connections.
    func shutdown(grace: Duration = .seconds(3)) async {
        for queue in queues { queue.finish() }
        let workers = self.workers
        let timer = Task {
            try? await Task.sleep(for: grace)
            for worker in workers { worker.cancel() }
        }
        for worker in workers { await worker.value }
        timer.cancel()
        for client in clients { await client.close() }
    }

    // MARK: - One registration

    private static func register(
        _ registration: ActivityRegistration, client: HTTP1Client, backend: SimulatorAppBackend, devices: SimulatedDevices,
        logger: Logger?
    ) async -> SimulatedActivity.Registration {
        var attempt = 0
        while true {
            attempt += 1
            let (status, failure, result) = await tryOnce(registration, client: client, backend: backend, devices: devices)
            if let result { return log(result, registration, logger) }
            switch RegistrationAttempt.after(status: status, failure: failure, attempt: attempt, attempts: backend.attempts) {
            case .finished(let result): return log(result, registration, logger)
            case .retry(let pause):
                do { try await Task.sleep(for: pause) } catch { return log(.failed("stopped"), registration, logger) }
            }
        }
    }

    /// One try: the event key (from the flags, or read from Marquee once per type), then the PUT. A result is
    /// final when it needs no answer to decide (no event key in the attributes).
    private static func tryOnce(
        _ registration: ActivityRegistration, client: HTTP1Client, backend: SimulatorAppBackend, devices: SimulatedDevices
    ) async -> (status: Int?, failure: String?, result: SimulatedActivity.Registration?) {
        let type = registration.attributesType
        var key = devices.eventKey(of: type)
        if key == nil {
            let request = HTTPRequest(
                method: "GET", path: "/v1/attribute-types/" + escape(type) + appQuery(backend),
                headers: ["authorization": "Bearer " + backend.apiKey])
            do {
                let response = try await client.send(request)
                guard response.status == 200 else { return (response.status, nil, nil) }
                guard let found = eventKey(inAttributeType: response.body) else {
                    return (nil, nil, .failed("\(type) has no event key"))
                }
                devices.learnEventKey(found, of: type)
                key = found
            } catch {
                return (nil, error.description, nil)
            }
        }
        guard let key, let externalID = registration.attributes[key]?.stringValue else {
            return (nil, nil, .failed("the attributes have no \(key ?? "event key") string"))
        }
        let body = JSONValue.object([
            "externalId": .string(externalID), "attributesType": .string(type), "pushType": "token",
            "pushToken": .string(registration.pushToken),
        ])
        let path =
            "/v1/installations/" + escape(registration.installationID) + "/activities/" + escape(registration.activityID)
            + appQuery(backend)
        let request = HTTPRequest(
            method: "PUT", path: path,
            headers: ["authorization": "Bearer " + backend.apiKey, "content-type": "application/json"], body: body.jsonBytes)
        do {
            let response = try await client.send(request)
            return (response.status, nil, nil)
        } catch {
            return (nil, error.description, nil)
        }
    }

    /// The attribute marked `"eventKey": true` in an attribute type as Marquee answers it.
    static func eventKey(inAttributeType body: [UInt8]) -> String? {
        guard let attributes = (try? JSONValue(parsing: body))?["attributes"]?.objectValue else { return nil }
        return attributes.first { $0.value["eventKey"]?.boolValue == true }?.key
    }

    private static func appQuery(_ backend: SimulatorAppBackend) -> String {
        backend.appID.map { "?app=" + escape($0) } ?? ""
    }

    private static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    private static func log(
        _ result: SimulatedActivity.Registration, _ registration: ActivityRegistration, _ logger: Logger?
    ) -> SimulatedActivity.Registration {
        guard let logger else { return result }
        let outcome: String =
            switch result {
            case .registered(let status): "registered \(status)"
            case .failed(let why): "failed: " + why
            default: "\(result)"
            }
        logger.info(
            "device activity registration",
            [
                "installation_id": .string(registration.installationID), "activity_id": .string(registration.activityID),
                "attributes_type": .string(registration.attributesType), "token": .string(String(registration.pushToken.prefix(8)) + "…"),
                "outcome": .string(outcome),
            ])
        return result
    }
}
