// Everything the simulator can be told, in one value: the engine reads its rules from it and the host its
// sockets and files. `parse(arguments:)` reads the same fields from `marquee simulator` flags.
import Foundation
import Network

/// Injected failures, drawn from the seeded generator.
public struct SimulatorFaults: Sendable, Hashable {
    /// Share (0…1) of authenticated requests answered 429 `TooManyRequests`.
    public var tooManyRequests: Double = 0
    /// Share answered 500 `InternalServerError`.
    public var internalServerError: Double = 0
    /// Share answered 503 `ServiceUnavailable`.
    public var serviceUnavailable: Double = 0
    /// Share of otherwise valid device pushes answered 410 `Unregistered`; the token is then invalid for good.
    public var unregistered: Double = 0
    /// Send GOAWAY (`{"reason":"Shutdown"}`) on a connection once it has carried this many requests.
    public var goAwayAfterStreams: Int?
    /// Share of accepted requests that are acted on (a channel made, a device shown the push) and then answered by
    /// resetting the stream (RST_STREAM INTERNAL_ERROR) instead: the client cannot tell whether it was delivered.
    public var dropAnswers: Double = 0

    public init() {}
}

/// How the APNs simulator behaves and where it listens.
public struct SimulatorConfiguration: Sendable {
    /// Folder for the generated CA, server certificate, `.p8` key and the channel file.
    public var stateDirectory: String = ".marquee-simulator"
    /// A numeric address to listen on.
    public var host: String = "127.0.0.1"
    /// Push and broadcast listener; 0 picks a free port.
    public var pushPort: Int = 0
    /// Channel-management listener; 0 picks a free port.
    public var managementPort: Int = 0
    /// Control listener (plain HTTP/1.1: status, scripted rejections, invalid tokens); 0 picks a free port.
    public var controlPort: Int = 0
    /// The environment the simulator plays: `apns-unique-id` is on device-push answers only in development.
    public var environment: SimulatorEnvironment = .development
    /// Channels per bundle id (Apple: 10,000 per app and environment).
    public var channelQuota: Int = SimulatorLimits.channelsPerApp
    /// SETTINGS_MAX_CONCURRENT_STREAMS once a connection has authenticated (APNs was seen with 500 and 1,500).
    public var streamLimit: UInt32 = 1_000
    /// Skip the one-stream rule: every connection gets `streamLimit` from the start and keeps it (for h2load).
    public var relaxed = false
    public var faults = SimulatorFaults()
    /// Seed of the generator behind faults and latency.
    public var seed: UInt64 = 1
    /// Bundle ids the trusted key may use (`TopicMismatch` otherwise); empty allows any.
    public var bundleIDs: [String] = []
    /// Device tokens (hex) answered 410 `Unregistered` from the start.
    public var invalidDeviceTokens: [String] = []
    /// Added latency per answer, drawn uniformly from this range.
    public var latency: ClosedRange<Duration> = .zero ... .zero
    /// Accepted requests kept in memory for queries (the oldest are dropped beyond this many).
    public var recordLimit = 100_000
    /// PEM server certificate chain and key; generated (with a CA) in `stateDirectory` when nil.
    public var certificateFile: String?
    public var certificateKeyFile: String?
    /// The `.p8` key whose tokens are trusted, with its ids; generated in `stateDirectory` when nil.
    public var signingKeyFile: String?
    public var keyID: String?
    public var teamID: String?
    /// Event-loop threads serving both listeners.
    public var loopCount = 1
    /// A JSON file of simulated devices (`SimulatedDeviceSpec.parse`); more can be added on the control port.
    public var devicesFile: String?
    /// What simulated devices do with starts and how long their activities last.
    public var deviceRules = SimulatedDeviceRules()
    /// Attributes type → the attribute naming its event, for reports and registrations; types not listed are read
    /// from the app backend when one is given.
    public var eventKeys: [String: String] = [:]
    /// Where the devices' app backend registers the update tokens they mint; nil: tokens are not registered.
    public var appBackend: SimulatorAppBackend?
    /// Where the device report is written at shutdown (when there are devices).
    public var deviceReportFile: String?

    public init(stateDirectory: String = ".marquee-simulator") {
        self.stateDirectory = stateDirectory
    }
}

/// A simulator flag or setting that cannot work; the text says which and what is expected.
public struct SimulatorConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension SimulatorConfiguration {
    /// Usage of `marquee simulator`.
    public static let helpText = """
        usage: marquee simulator [options]

        A local APNs for development, tests and benchmarks: HTTP/2 over TLS on a push port (device pushes,
        broadcasts) and a management port (channels), which answer as Apple's hosts do (404 BadPath to any other
        path), and a control port (plain HTTP/1.1) for what only the simulator is asked:
          GET /status, POST /rejections {"api": "broadcast", "reason": "Service Unavailable"} (the next request
          of that API gets that answer), POST /invalid-tokens/<hex> (410 from now on), DELETE /records.
        It generates a CA, a server certificate and the .p8 key it trusts into the state folder unless given
        them, prints their paths, and keeps channels there.

          --state DIR              state folder (default .marquee-simulator)
          --host ADDR              numeric address to listen on (default 127.0.0.1)
          --push-port N            push/broadcast port, 0 = any free port (default 0)
          --management-port N      channel-management port, 0 = any free port (default 0)
          --control-port N         control port (HTTP/1.1), 0 = any free port (default 0)
          --environment ENV        development | production (default development)
          --bundle-id ID           a bundle id the key may use (repeatable; none = any)
          --quota N                channels per bundle id (default 10000)
          --stream-limit N         MAX_CONCURRENT_STREAMS after authentication (default 1000)
          --relaxed                no one-stream rule before the first authenticated request (for h2load)
          --invalid-token HEX      a device token answered 410 Unregistered (repeatable)
          --fail-429 R             share of requests answered 429 TooManyRequests (0..1)
          --fail-500 R             share answered 500 InternalServerError
          --fail-503 R             share answered 503 ServiceUnavailable
          --fail-410 R             share of device pushes answered 410 Unregistered
          --goaway-after N         GOAWAY {"reason":"Shutdown"} after N requests on a connection
          --latency-ms MIN[-MAX]   added latency per answer
          --seed N                 seed for faults and latency (default 1)
          --cert FILE --cert-key FILE      server certificate chain and key (PEM) instead of generated ones
          --p8 FILE --key-id ID --team-id ID   the trusted signing key instead of a generated one
          --loops N                event-loop threads (default 1)
          --drop-answers R         share of accepted requests acted on and then reset (RST_STREAM) unanswered
          --help                   this text

        Devices (none by default; with none, nothing of this costs anything):
          --devices FILE           simulated devices: {"devices": [{"pushToStartToken": "<hex>", "osVersion": "18.1",
                                   "installationId": "..."}]}; more with POST /devices on the control port.
                                   A push-to-start to a device's token starts a Live Activity as iOS would: below
                                   17.2 never; 17.2-17.x a plain start with a minted update token; 18+ joins the
                                   input-push-channel, or mints a token for input-push-token: 1. Only a newer
                                   aps.timestamp is shown; broadcasts and pushes to minted tokens update and end.
          --device-starts-per-hour N   starts a device accepts per hour; past it a start answers 200 and is
                                   ignored and counted (default 8: a guess from developers' reports, the same
                                   as Marquee's own limit, so testing one against the other proves consistency only)
          --activity-max-duration D    the system ends an activity after D: 90s, 30m, 8h (default 8h)
          --event-key TYPE=ATTR    the attribute naming the event of an attributes type (repeatable)
          --app-backend URL --api-key KEY [--app-id N]
                                   register minted update tokens with Marquee (PUT /v1/installations/{id}/
                                   activities/{activityId}, ?app=N), as the app's backend would
          --device-report FILE     write the device report there at exit
        Control routes for devices: POST /devices, GET /devices (every device, per event: activities,
        duplicates, newest state, pushes after an end), GET /devices/<token or installation id>, DELETE /devices.
        More in docs/simulator.md.
        """

    /// Reads `marquee simulator` flags (without the command name). Returns nil for `--help`.
    public static func parse(arguments: [String]) throws(SimulatorConfigurationError) -> SimulatorConfiguration? {
        var configuration = SimulatorConfiguration()
        var index = 0
        var backendURL: String?
        var apiKey: String?
        var appID: String?
        func value(_ flag: String) throws(SimulatorConfigurationError) -> String {
            index += 1
            guard index < arguments.count else { throw SimulatorConfigurationError("\(flag) needs a value") }
            return arguments[index]
        }
        func integer(_ flag: String, _ range: ClosedRange<Int>) throws(SimulatorConfigurationError) -> Int {
            let text = try value(flag)
            guard let number = Int(text), range.contains(number) else {
                throw SimulatorConfigurationError("\(flag) \(text): expected an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        func share(_ flag: String) throws(SimulatorConfigurationError) -> Double {
            let text = try value(flag)
            guard let number = Double(text), (0...1).contains(number) else {
                throw SimulatorConfigurationError("\(flag) \(text): expected a share between 0 and 1")
            }
            return number
        }
        while index < arguments.count {
            let flag = arguments[index]
            switch flag {
            case "--help", "-h": return nil
            case "--state": configuration.stateDirectory = try value(flag)
            case "--host": configuration.host = try value(flag)
            case "--push-port": configuration.pushPort = try integer(flag, 0...65_535)
            case "--management-port": configuration.managementPort = try integer(flag, 0...65_535)
            case "--control-port": configuration.controlPort = try integer(flag, 0...65_535)
            case "--environment":
                let text = try value(flag)
                guard let environment = SimulatorEnvironment(parsing: text) else {
                    throw SimulatorConfigurationError("--environment \(text): expected development or production")
                }
                configuration.environment = environment
            case "--bundle-id": configuration.bundleIDs.append(try value(flag))
            case "--quota": configuration.channelQuota = try integer(flag, 0...Int(Int32.max))
            case "--stream-limit": configuration.streamLimit = UInt32(try integer(flag, 1...Int(Int32.max)))
            case "--relaxed": configuration.relaxed = true
            case "--invalid-token": configuration.invalidDeviceTokens.append(try value(flag).lowercased())
            case "--fail-429": configuration.faults.tooManyRequests = try share(flag)
            case "--fail-500": configuration.faults.internalServerError = try share(flag)
            case "--fail-503": configuration.faults.serviceUnavailable = try share(flag)
            case "--fail-410": configuration.faults.unregistered = try share(flag)
            case "--goaway-after": configuration.faults.goAwayAfterStreams = try integer(flag, 1...Int(Int32.max))
            case "--latency-ms":
                let text = try value(flag)
                let bounds = text.split(separator: "-", maxSplits: 1).map { Int($0) }
                guard let low = bounds.first ?? nil, low >= 0, let high = bounds.count == 2 ? bounds[1] : low, high >= low else {
                    throw SimulatorConfigurationError("--latency-ms \(text): expected MIN or MIN-MAX milliseconds")
                }
                configuration.latency = .milliseconds(low) ... .milliseconds(high)
            case "--seed":
                let text = try value(flag)
                guard let seed = UInt64(text) else { throw SimulatorConfigurationError("--seed \(text): expected an unsigned integer") }
                configuration.seed = seed
            case "--cert": configuration.certificateFile = try value(flag)
            case "--cert-key": configuration.certificateKeyFile = try value(flag)
            case "--p8": configuration.signingKeyFile = try value(flag)
            case "--key-id": configuration.keyID = try value(flag)
            case "--team-id": configuration.teamID = try value(flag)
            case "--loops": configuration.loopCount = try integer(flag, 1...64)
            case "--drop-answers": configuration.faults.dropAnswers = try share(flag)
            case "--devices": configuration.devicesFile = try value(flag)
            case "--device-starts-per-hour": configuration.deviceRules.startsPerHour = try integer(flag, 0...1_000_000)
            case "--activity-max-duration":
                let text = try value(flag)
                guard let seconds = Self.duration(text), seconds > 0 else {
                    throw SimulatorConfigurationError("--activity-max-duration \(text): expected a duration such as 90s, 30m or 8h")
                }
                configuration.deviceRules.activityMaxDuration = seconds
            case "--event-key":
                let text = try value(flag)
                let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw SimulatorConfigurationError("--event-key \(text): expected TYPE=ATTRIBUTE")
                }
                configuration.eventKeys[parts[0]] = parts[1]
            case "--app-backend": backendURL = try value(flag)
            case "--api-key": apiKey = try value(flag)
            case "--app-id":
                let text = try value(flag)
                guard let number = Int(text), number > 0 else { throw SimulatorConfigurationError("--app-id \(text): expected an app id") }
                appID = String(number)
            case "--device-report": configuration.deviceReportFile = try value(flag)
            default: throw SimulatorConfigurationError("unknown option \(flag) (see --help)")
            }
            index += 1
        }
        switch (backendURL, apiKey) {
        case (let url?, let key?): configuration.appBackend = SimulatorAppBackend(url: url, apiKey: key, appID: appID)
        case (nil, nil): if appID != nil { throw SimulatorConfigurationError("--app-id needs --app-backend and --api-key") }
        default: throw SimulatorConfigurationError("give both --app-backend and --api-key, or neither")
        }
        try configuration.validate()
        return configuration
    }

    /// `90s`, `30m`, `8h` or a number of seconds.
    static func duration(_ text: String) -> TimeInterval? {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3_600]
        if let last = text.last, let unit = units[last] { return Double(text.dropLast()).map { $0 * unit } }
        return Double(text)
    }

    /// Checks the combinations a flag parser cannot see one flag at a time.
    public func validate() throws(SimulatorConfigurationError) {
        if (certificateFile == nil) != (certificateKeyFile == nil) {
            throw SimulatorConfigurationError("give both --cert and --cert-key, or neither")
        }
        if signingKeyFile != nil, keyID == nil || teamID == nil {
            throw SimulatorConfigurationError("--p8 needs --key-id and --team-id")
        }
        let shares = [faults.tooManyRequests, faults.internalServerError, faults.serviceUnavailable]
        if shares.contains(where: { !(0...1).contains($0) }) || shares.reduce(0, +) > 1 {
            throw SimulatorConfigurationError("the 429, 500 and 503 shares must be between 0 and 1 and add up to at most 1")
        }
        if !(0...1).contains(faults.unregistered) { throw SimulatorConfigurationError("the 410 share must be between 0 and 1") }
        if let count = faults.goAwayAfterStreams, count < 1 { throw SimulatorConfigurationError("GOAWAY needs at least 1 request") }
        if !(0...1).contains(faults.dropAnswers) { throw SimulatorConfigurationError("the dropped-answer share must be between 0 and 1") }
        if deviceRules.startsPerHour < 0 || !(deviceRules.activityMaxDuration > 0) {
            throw SimulatorConfigurationError("starts per hour must be 0 or more and the activity duration positive")
        }
        if let backend = appBackend {
            do { _ = try HTTP1ClientURL(backend.url) } catch {
                throw SimulatorConfigurationError("--app-backend \(backend.url): \(error)")
            }
            if backend.apiKey.isEmpty { throw SimulatorConfigurationError("--api-key is empty") }
            if backend.attempts < 1 { throw SimulatorConfigurationError("an app backend needs at least 1 attempt") }
        }
        if channelQuota < 0 || recordLimit < 0 || streamLimit < 1 || loopCount < 1 {
            throw SimulatorConfigurationError("quota and record limit must be 0 or more; stream limit and loops 1 or more")
        }
        if latency.lowerBound < .zero { throw SimulatorConfigurationError("latency cannot be negative") }
        let ports = [pushPort, managementPort, controlPort]
        for port in ports where !(0...65_535).contains(port) {
            throw SimulatorConfigurationError("port \(port) is out of range")
        }
        let fixed = ports.filter { $0 != 0 }
        if Set(fixed).count != fixed.count {
            throw SimulatorConfigurationError("the push, management and control listeners need different ports")
        }
    }
}
