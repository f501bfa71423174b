// `marquee apns ...`: one-shot operator requests to APNs (or the simulator), like Apple's curl examples but
// signed with a provider token for you. Each command builds one `APNsRequest`, sends it through `APNsClient`
// (with its retries) and turns the outcome into text or JSON and a documented exit code.
import APNs
import Crypto
import Foundation
import MarqueeCommandLine
import MarqueeCore
import Network

/// `marquee apns`: channels create|read|delete|list, broadcast, push.
let apnsCommand = Command(
    "apns", summary: "Send one request to APNs (channels, broadcast, push), signed with your .p8 key.",
    discussion: APNsCommandLine.discussion,
    subcommands: [
        Command(
            "channels", summary: "Create, read, delete or list broadcast channels.", discussion: APNsCommandLine.discussion,
            subcommands: [
                APNsCommandLine.leaf(
                    "create", summary: "Create a channel and print its id.",
                    extra: [
                        .option(
                            "storage-policy", value: "POLICY",
                            help: "none: only connected devices get broadcasts (expiration 0); mostRecent: the latest is kept up to 8 h.",
                            required: true, choices: ["none", "mostRecent"])
                    ]
                ) { arguments, bundle in
                    let policy: APNsMessageStoragePolicy = arguments.string("storage-policy") == "none" ? .noMessageStored : .mostRecentMessageStored
                    return try .createChannel(bundleID: bundle, storagePolicy: policy)
                },
                APNsCommandLine.leaf("read", summary: "Show a channel's storage policy and push type.", extra: [APNsCommandLine.channel]) {
                    arguments, bundle in
                    try .readChannel(bundleID: bundle, channelID: try APNsCommandLine.channelID(arguments))
                },
                APNsCommandLine.leaf("delete", summary: "Delete a channel (irreversible).", extra: [APNsCommandLine.channel]) { arguments, bundle in
                    try .deleteChannel(bundleID: bundle, channelID: try APNsCommandLine.channelID(arguments))
                },
                APNsCommandLine.leaf("list", summary: "List every channel of the app in this environment.", extra: []) { _, bundle in
                    try .listChannels(bundleID: bundle)
                },
            ]),
        APNsCommandLine.leaf(
            "broadcast", summary: "Broadcast a Live Activity update or end on a channel.",
            extra: [APNsCommandLine.channel] + APNsCommandLine.delivery(priorities: ["10", "5", "1"], expirationDefault: "0")
        ) { arguments, bundle in
            try .broadcast(
                bundleID: bundle, channelID: try APNsCommandLine.channelID(arguments),
                payload: try await APNsCommandLine.payload(arguments, limit: APNsPayloadLimit.broadcast),
                expiration: try arguments.int("expiration", in: 0...Int(Int32.max)) ?? 0,
                priority: APNsPriority(rawValue: try arguments.int("priority") ?? 10) ?? .immediate)
        },
        APNsCommandLine.leaf(
            "push", summary: "Push to one device token (Live Activity update, end or push-to-start).",
            extra: [.option("token", value: "HEX", help: "The device or push-to-start token, hexadecimal.", required: true)]
                + APNsCommandLine.delivery(priorities: ["10", "5"], expirationDefault: nil)
        ) { arguments, bundle in
            let token: APNsDeviceToken
            do { token = try APNsDeviceToken(hex: try arguments.required("token")) } catch {
                throw CommandFailure("--token: \(error)", exitCode: .usage, code: "usage", field: "token")
            }
            return try .devicePush(
                bundleID: bundle, deviceToken: token, payload: try await APNsCommandLine.payload(arguments, limit: APNsPayloadLimit.devicePush),
                priority: APNsPriority(rawValue: try arguments.int("priority") ?? 10) ?? .immediate,
                expiration: try arguments.int("expiration", in: 0...Int(Int32.max)))
        },
    ])

/// The pieces the `apns` commands share: credentials, endpoints, payloads, and outcome to exit code.
enum APNsCommandLine {
    static let discussion = """
        Credentials: --team-id, --key-id, --key-file (the .p8 from Apple), --bundle, --environment
        (development, also spelled sandbox, or production); each also read from MARQUEE_APNS_TEAM_ID,
        MARQUEE_APNS_KEY_ID, MARQUEE_APNS_KEY_FILE, MARQUEE_APNS_BUNDLE, MARQUEE_APNS_ENVIRONMENT.
        Hosts: Apple's for the environment unless MARQUEE_APNS_PUSH_URL / MARQUEE_APNS_MANAGE_URL
        (https://host:port) say otherwise; MARQUEE_APNS_CA_FILE adds a trusted CA (e.g. the simulator's).
        Temporary failures (429, 500, 503, GOAWAY, timeouts) are retried with backoff; an expired token
        is refreshed once; rejections are never retried. A channel create or a push-to-start is sent
        again only when the answer proves APNs did not act (429, 5xx, GOAWAY, never sent): after a timeout
        or a connection lost in flight its outcome is unknown, and it is not repeated. With --json a failure prints {"error":{...}} with
        code, message, attempts, requestId (apnsId for push) and, when APNs answered, status, reason and
        (410) timestamp.

        Payload limits: 5,120 bytes for a broadcast, 4,096 for a push.

        \(ExitCode.help([.success, .failure, .usage, .dataError, .noInput, .unavailable, .temporaryFailure, .permissionDenied]))
        """

    static let credentials: [Argument] = [
        .option("team-id", value: "ID", help: "Your 10-character Apple team id.", environment: "MARQUEE_APNS_TEAM_ID", required: true),
        .option("key-id", value: "ID", help: "The 10-character id of the APNs key.", environment: "MARQUEE_APNS_KEY_ID", required: true),
        .option("key-file", value: "PATH", help: "The .p8 key file (PEM).", environment: "MARQUEE_APNS_KEY_FILE", required: true),
        .option("bundle", value: "ID", help: "The app's bundle id.", environment: "MARQUEE_APNS_BUNDLE", required: true),
        .option(
            "environment", value: "ENV", help: "development (sandbox) or production.", environment: "MARQUEE_APNS_ENVIRONMENT",
            default: "development", choices: ["development", "sandbox", "production"]),
        // Read from the process environment like the daemon does; as options so tests and scripts can pass them.
        .option(
            "push-url", value: "URL", help: "Push/broadcast host, https://host:port (default: Apple's).", environment: APNsEndpoints.pushURLVariable),
        .option(
            "manage-url", value: "URL", help: "Channel-management host, https://host:port (default: Apple's).",
            environment: APNsEndpoints.managementURLVariable),
        .option(
            "ca-file", value: "PATH", help: "A PEM CA to trust besides the system's (e.g. the simulator's).",
            environment: APNsEndpoints.caFileVariable),
    ]

    static let channel = Argument.option("channel", value: "ID", help: "The channel id (base64), as create printed it.", required: true)

    static func delivery(priorities: [String], expirationDefault: String?) -> [Argument] {
        [
            .option(
                "priority", value: "N", help: "apns-priority: 10 now, 5 power-considered\(priorities.contains("1") ? ", 1 low" : "").",
                default: "10", choices: priorities),
            .option(
                "expiration", value: "EPOCH", help: "apns-expiration in epoch seconds (0: try once, store nothing).",
                default: expirationDefault),
            .option("payload", value: "JSON", help: "The payload, inline."),
            .option("payload-file", value: "PATH", help: "A file holding the payload."),
        ]
    }

    /// A leaf command: credentials plus `extra`, building its request with `build` and sending it.
    static func leaf(
        _ name: String, summary: String, extra: [Argument],
        build: @escaping @Sendable (ParsedArguments, String) async throws -> APNsRequest
    ) -> Command {
        Command(name, summary: summary, discussion: discussion, arguments: extra + credentials) { arguments in
            let bundle = try arguments.required("bundle")
            let request: APNsRequest
            do { request = try await build(arguments, bundle) } catch let error as APNsRequestError {
                throw CommandFailure(
                    "\(error)", exitCode: error.isPayloadError ? .dataError : .usage, code: error.isPayloadError ? "bad_payload" : "usage")
            }
            let client = try await makeClient(arguments)
            let outcome: APNsOutcome
            do { outcome = try await client.send(request) } catch {
                await client.shutdown()
                throw CommandFailure("\(error)", exitCode: .software, code: "internal")
            }
            await client.shutdown()
            try report(outcome, arguments: arguments)
        }
    }

    static func channelID(_ arguments: ParsedArguments) throws -> APNsChannelID {
        do { return try APNsChannelID(try arguments.required("channel")) } catch {
            throw CommandFailure("--channel: \(error)", exitCode: .usage, code: "usage", field: "channel")
        }
    }

    /// The payload from `--payload` or `--payload-file`: one of them, JSON with an object at the top, within `limit`.
    static func payload(_ arguments: ParsedArguments, limit: Int) async throws -> [UInt8] {
        let bytes: [UInt8]
        switch (arguments.string("payload"), arguments.string("payload-file")) {
        case (let text?, nil): bytes = Array(text.utf8)
        case (nil, let path?):
            do { bytes = try await readFile(path) } catch {
                throw CommandFailure(
                    "cannot read the payload file \(path): \(error.localizedDescription)", exitCode: .noInput, code: "unreadable_payload_file",
                    field: "payload-file")
            }
        case (nil, nil):
            throw CommandFailure("give the payload with --payload JSON or --payload-file PATH", exitCode: .usage, code: "usage", field: "payload")
        case (_?, _?): throw CommandFailure("give either --payload or --payload-file, not both", exitCode: .usage, code: "usage", field: "payload")
        }
        let json: JSONValue
        do { json = try JSONValue(parsing: bytes) } catch {
            throw CommandFailure("the payload is not JSON: \(error)", exitCode: .dataError, code: "bad_payload", field: "payload")
        }
        guard json.objectValue != nil else {
            throw CommandFailure(
                "the payload must be a JSON object (with an aps dictionary)", exitCode: .dataError, code: "bad_payload", field: "payload")
        }
        guard bytes.count <= limit else {
            throw CommandFailure(
                "the payload is \(bytes.count) bytes; APNs accepts at most \(limit)", exitCode: .dataError, code: "payload_too_large",
                field: "payload")
        }
        return bytes
    }

    static func makeClient(_ arguments: ParsedArguments) async throws -> APNsClient {
        guard let environment = APNsEnvironment(parsing: arguments.string("environment") ?? "development") else {
            throw CommandFailure("--environment takes development, sandbox or production", exitCode: .usage, code: "usage", field: "environment")
        }
        var variables: [String: String] = [:]
        variables[APNsEndpoints.pushURLVariable] = arguments.string("push-url")
        variables[APNsEndpoints.managementURLVariable] = arguments.string("manage-url")
        variables[APNsEndpoints.caFileVariable] = arguments.string("ca-file")
        let endpoints: APNsEndpoints
        do { endpoints = try APNsEndpoints.resolve(environment: environment, processEnvironment: variables) } catch {
            throw CommandFailure("\(error)", exitCode: .usage, code: "usage")
        }
        let keyFile = try arguments.required("key-file")
        let pem: String
        do { pem = String(decoding: try await readFile(keyFile), as: UTF8.self) } catch {
            throw CommandFailure(
                "cannot read the key file \(keyFile): \(error.localizedDescription)", exitCode: .noInput, code: "unreadable_key_file",
                field: "key-file")
        }
        let key: P256.SigningKey
        do { key = try P256.SigningKey(pemRepresentation: pem) } catch {
            throw CommandFailure(
                "the key file \(keyFile) is not a P-256 .p8 key: \(error)", exitCode: .noInput, code: "unreadable_key_file", field: "key-file")
        }
        let signingKey: APNsSigningKey
        do { signingKey = try APNsSigningKey(keyID: try arguments.required("key-id"), teamID: try arguments.required("team-id"), key: key) } catch {
            throw CommandFailure("\(error)", exitCode: .usage, code: "usage")
        }
        do {
            return try APNsClient(
                signingKey: signingKey, endpoints: endpoints,
                configuration: .init(maxInFlight: 1, attemptTimeout: .seconds(15)),
                pool: .init(connectionsPerKey: 1))
        } catch {
            throw CommandFailure("cannot set up TLS: \(error)", exitCode: .unavailable, code: "unreachable")
        }
    }

    /// Prints an accepted outcome, or throws the failure with its exit code.
    static func report(_ outcome: APNsOutcome, arguments: ParsedArguments) throws {
        let last = outcome.attempts.last
        let tries = outcome.attempts.count == 1 ? "1 attempt" : "\(outcome.attempts.count) attempts"
        guard let acceptance = outcome.acceptance else {
            let failure = outcome.result.failure
            var message = "\(outcome.request): \(failure.map { "\($0)" } ?? "failed")"
            if let requestID = last?.requestID { message += " (request id \(requestID), \(tries))" }
            if let error = outcome.transportError { message += ": \(error)" }
            if outcome.attempts.last?.outcomeUnknown == true && !outcome.request.isSafeToRepeat {
                message +=
                    outcome.request.operation == .createChannel
                    ? "; APNs may have made the channel all the same: list the channels before creating another"
                    : "; APNs may have started the Live Activity all the same: sending it again may start a second one"
            }
            throw CommandFailure(
                message, exitCode: exitCode(for: outcome), code: failure?.reason?.text ?? code(for: outcome),
                details: failureDetails(outcome))
        }
        var object: JSONObject = ["status": .int(Int64(acceptance.status))]
        var lines: [String] = []
        object["requestId"] = (acceptance.requestID ?? last?.requestID).map(JSONValue.string)
        object["apnsId"] = acceptance.apnsID.map(JSONValue.string)
        object["uniqueId"] = acceptance.uniqueID.map(JSONValue.string)
        if let id = acceptance.channelID {
            object["channelId"] = .string(id.value)
            lines.append(id.value)
        }
        if let channel = acceptance.channel {
            let policy = channel.storagePolicy == .noMessageStored ? "none" : "mostRecent"
            object["storagePolicy"] = .string(policy)
            object["pushType"] = .string(channel.pushType)
            lines.append("storage policy: \(policy)\npush type: \(channel.pushType)")
        }
        if let channels = acceptance.channels {
            object["channels"] = .array(channels.map { .string($0.value) })
            lines.append(channels.isEmpty ? "(no channels)" : channels.map(\.value).joined(separator: "\n"))
        }
        object["attempts"] = .int(Int64(outcome.attempts.count))
        var summary = "accepted: \(acceptance.status)"
        if let id = acceptance.requestID ?? acceptance.apnsID ?? last?.requestID {
            summary += outcome.request.operation == .devicePush ? ", apns-id \(id)" : ", request id \(id)"
        }
        if let unique = acceptance.uniqueID { summary += ", unique id \(unique)" }
        if outcome.attempts.count > 1 { summary += " (\(tries))" }
        // What APNs answered with (a channel id, its configuration, the list) is the data; the acceptance
        // itself is the data only when there is nothing else.
        if lines.isEmpty {
            Terminal.emit(arguments, text: summary, json: .object(object))
        } else {
            Terminal.emit(arguments, text: lines.joined(separator: "\n"), json: .object(object), note: summary)
        }
    }

    /// What `--json` adds to a failure: the HTTP status and Apple's reason when APNs answered, the request's id under
    /// the name its success output uses (`apnsId` for device pushes, `requestId` otherwise), the 410 timestamp, and
    /// the number of attempts.
    static func failureDetails(_ outcome: APNsOutcome) -> JSONObject {
        let failure = outcome.result.failure
        var details: JSONObject = [:]
        details["status"] = failure?.status.map { .int(Int64($0)) }
        details["reason"] = failure?.reason.map { .string($0.text) }
        let id = failure?.requestID ?? outcome.attempts.last?.requestID
        details[outcome.request.operation == .devicePush ? "apnsId" : "requestId"] = id.map(JSONValue.string)
        details["uniqueId"] = outcome.attempts.last?.uniqueID.map(JSONValue.string)
        details["timestamp"] = failure?.timestamp.map(JSONValue.int)
        details["attempts"] = .int(Int64(outcome.attempts.count))
        return details
    }

    static func exitCode(for outcome: APNsOutcome) -> ExitCode {
        switch outcome.result {
        case .accepted: return .success
        case .refreshTokenAndRetry: return .permissionDenied
        case .credentialsFault: return .permissionDenied
        case .rejected: return .failure
        case .retryAfterBackoff, .tokenUpdatesTooFrequent, .reconnect:
            switch outcome.transportError {
            case .connectFailed?, .tls?, .certificateRejected?, .alpnRefused?: return .unavailable
            default: return .temporaryFailure
            }
        }
    }

    static func code(for outcome: APNsOutcome) -> String {
        switch exitCode(for: outcome) {
        case .unavailable: "unreachable"
        case .temporaryFailure: "temporary_failure"
        case .permissionDenied: "token_rejected"
        default: "rejected"
        }
    }

    /// Reads a whole file on a thread of its own (never on Swift's cooperative pool).
    static func readFile(_ path: String) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) })
            }
        }
    }
}

extension APNsRequestError {
    /// Payload problems are bad input data (65); the rest are wrong arguments (64).
    var isPayloadError: Bool {
        switch self {
        case .emptyPayload, .payloadTooLarge: true
        default: false
        }
    }
}
