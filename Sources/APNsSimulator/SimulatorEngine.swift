// The APNs simulator's rules, without sockets: a request, the listener it came in on and its connection's
// state go in; the answer, the connection actions (stream limit, GOAWAY) and an added delay come out.
// Every rejection is a reason of the request's API as Apple's pages list it (SimulatorProtocol.swift), with that
// API's status and spelling; where Apple does not say (order of checks, casing), the choice is written next to the check.
// Shared state (channels, invalid tokens, records, the seeded generator) sits behind one Mutex, so one
// engine serves every connection of both listeners, on any thread. Accepted device pushes and broadcasts then
// reach the simulated devices (SimulatedDevices), when there are any; what their app backend must do is handed
// to the host (`deviceActions`).
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

/// A signing key whose provider tokens the simulator accepts.
public struct SimulatorTrustedKey: Sendable {
    public var keyID: String
    public var teamID: String
    public var key: P256.VerifyingKey

    public init(keyID: String, teamID: String, key: P256.VerifyingKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.key = key
    }
}

/// A rejection on its way to becoming an error answer.
struct Rejection: Error {
    var reason: SimulatorReason
    /// 410 only: when the token became invalid, epoch milliseconds.
    var timestamp: Int64?

    init(_ reason: SimulatorReason, timestamp: Int64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }
}

/// APNs' behaviour as a pure function of request, connection state and time; the simulator host wraps it in sockets.
public final class SimulatorEngine: Sendable {
    /// A token whose `iat` is older than this is `ExpiredProviderToken`.
    public static let tokenLifetime: TimeInterval = SimulatorLimits.providerTokenLifetime
    /// A connection's next token must be issued at least this long after its current one (`TooManyProviderTokenUpdates`).
    public static let tokenChangeInterval: TimeInterval = SimulatorLimits.providerTokenChangeInterval
    /// An `iat` further ahead than this is `InvalidProviderToken` (a token from the future was not signed now).
    public static let tokenFutureTolerance: TimeInterval = 5 * 60
    /// Longest channel id accepted before `BadChannelId` (Apple publishes no length; docs/apns.md#channel-id-length).
    public static let maximumChannelIDLength = 128
    /// GOAWAY debug data sent by the `goAwayAfterStreams` fault.
    public static let goAwayDebugData = SimulatorErrorBody.json(reason: "Shutdown")

    public let configuration: SimulatorConfiguration
    public let clock: any WallClock
    let logger: Logger?
    /// `logger != nil`, read once: the hot path neither copies the logger nor reads the clock for it when there is none.
    let logs: Bool
    let trustedKeys: [String: SimulatorTrustedKey]
    let allowedBundleIDs: Set<String>
    let channelsChanged: (@Sendable () -> Void)?
    let deviceActions: (@Sendable ([DeviceAction]) -> Void)?
    /// The simulated devices (none unless given): what each shows of the pushes accepted here.
    public let devices: SimulatedDevices
    let state: Mutex<State>
    /// Scripted rejections waiting, read before taking the lock: the hot path takes no lock for them when there are none.
    let scriptedCount = Atomic<Int>(0)
    /// Answers held back by added latency and not yet sent, and those whose connection closed before they could be:
    /// the requests a client saw go unanswered when it went away.
    let answersInFlight = Atomic<Int>(0)
    let unansweredAtDisconnect = Atomic<Int>(0)

    struct State {
        var channels: [String: SimulatorChannel] = [:]
        /// Creation order of the channels, for lists (several may share a `createdAt`).
        var channelOrder: [String: Int] = [:]
        var nextOrder = 0
        var quota: Int
        var latency: ClosedRange<Duration>
        var invalidTokens: [String: Date] = [:]
        var records: SimulatorRecordRing
        var statusCounts: [Int: Int] = [:]
        /// Accepted requests whose answer was dropped (`--drop-answers`).
        var droppedAnswers = 0
        var random: SeededRandom
        /// Reasons to answer the next requests of an API with, oldest first (`rejectNext(_:on:)`).
        var scripted: [SimulatorAPI: [SimulatorReason]] = [:]
        /// The reason every request of an API is answered with until told to stop (`rejectEvery(_:on:)`).
        var standing: [SimulatorAPI: SimulatorReason] = [:]
    }

    /// `channelsChanged` is called (outside any lock, on the caller's thread) after each create or delete,
    /// so the host can persist the channels. `logger` gets one line per request. `devices` defaults to an empty set
    /// with the configuration's rules; `deviceActions` gets what their app backend must do (outside any lock).
    public init(
        configuration: SimulatorConfiguration, trustedKeys: [SimulatorTrustedKey], clock: any WallClock = SystemWallClock(),
        logger: Logger? = nil, devices: SimulatedDevices? = nil, channelsChanged: (@Sendable () -> Void)? = nil,
        deviceActions: (@Sendable ([DeviceAction]) -> Void)? = nil
    ) {
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        logs = logger != nil
        self.trustedKeys = Dictionary(trustedKeys.map { ($0.keyID, $0) }) { first, _ in first }
        allowedBundleIDs = Set(configuration.bundleIDs)
        self.channelsChanged = channelsChanged
        self.deviceActions = deviceActions
        self.devices = devices ?? SimulatedDevices(configuration: configuration)
        let now = clock.now
        var initial = State(
            quota: configuration.channelQuota, latency: configuration.latency, records: SimulatorRecordRing(limit: configuration.recordLimit),
            random: SeededRandom(seed: configuration.seed))
        for token in configuration.invalidDeviceTokens { initial.invalidTokens[token.lowercased()] = now }
        state = Mutex(initial)
    }

    // MARK: - Connections

    /// The stream limit a new connection advertises: 1 until a request authenticates, unless relaxed.
    public var initialStreamLimit: UInt32 { configuration.relaxed ? configuration.streamLimit : 1 }

    /// State for a new connection.
    public func makeConnectionState() -> SimulatorConnectionState {
        SimulatorConnectionState(streamLimit: initialStreamLimit)
    }

    // MARK: - Requests

    /// Answers one request that arrived on `listener` over the connection whose state is `connection`.
    public func handle(
        _ request: HTTPRequest, on listener: SimulatorListener, connection: inout SimulatorConnectionState
    ) -> SimulatorReply {
        let started = logs ? ContinuousClock.now : nil
        let now = clock.now
        let idHeader = Self.idHeader(listener: listener, path: request.path)
        let headers = SimulatorRequestHeaders(request.headers)
        let givenID = headers.value(of: idHeader)
        // Apple: the answer carries "the same value found in the apns-id field of the request's header".
        let validGivenID = givenID.flatMap { SimulatorIdentifiers.isCanonicalUUID($0) ? $0 : nil }
        let answerID = validGivenID ?? SimulatorIdentifiers.randomUUID()

        var response: HTTPResponse
        var reasonText: String?
        var accepted: Accepted?
        var api = listener == .push ? SimulatorAPI.devicePush : .channelManagement
        do {
            let result = try evaluate(
                request, headers: headers, givenIDIsInvalid: givenID != nil && validGivenID == nil, listener: listener,
                api: &api, connection: &connection, now: now, answerID: answerID)
            accepted = result
            response = HTTPResponse(status: result.status, headers: result.headers, body: result.body)
        } catch {
            let answer = Self.answer(error.reason, on: api)
            reasonText = answer.text
            response = HTTPResponse(
                status: answer.status,
                headers: [SimulatorHeader.contentType: "application/json"],
                body: SimulatorErrorBody.json(reason: answer.text, timestamp: error.timestamp))
        }
        // No answer built above carries an id header of its own.
        response.headers.add(idHeader, answerID)

        var actions: [SimulatorConnectionAction] = []
        if !configuration.relaxed {
            var target = connection.streamLimit
            if (200..<300).contains(response.status) { target = configuration.streamLimit }
            if (400..<500).contains(response.status) { target = 1 }
            if target != connection.streamLimit {
                connection.streamLimit = target
                actions.append(.setMaxConcurrentStreams(target))
            }
        }
        connection.requestCount += 1
        if let limit = configuration.faults.goAwayAfterStreams, connection.requestCount >= limit, !connection.goAwaySent {
            connection.goAwaySent = true
            actions.append(.goAway(errorCode: 0, debugData: Self.goAwayDebugData))
        }

        // The devices see what was accepted before the answer is decided, dropped or not: a dropped answer still delivered.
        var reaction: DeviceReaction?
        if let record = accepted?.record, !devices.isEmpty { reaction = deliverToDevices(record, now: now) }

        let dropShare = accepted == nil ? 0 : configuration.faults.dropAnswers
        let (delay, dropped) = state.withLock { state -> (Duration, Bool) in
            if let record = accepted?.record { state.records.append(record) }
            let dropped = dropShare > 0 && state.random.unit() < dropShare
            if dropped { state.droppedAnswers += 1 } else { state.statusCounts[response.status, default: 0] += 1 }
            let range = state.latency
            guard range.upperBound > range.lowerBound else { return (range.lowerBound, dropped) }
            return (range.lowerBound + (range.upperBound - range.lowerBound) * state.random.unit(), dropped)
        }
        if accepted?.channelsChanged == true { channelsChanged?() }
        if let actions = reaction?.actions, !actions.isEmpty { deviceActions?(actions) }

        if logs, let logger, let started {
            let handled = ContinuousClock.now - started
            logger.info(
                "apns request",
                [
                    "listener": .string(listener.rawValue),
                    "method": .string(request.method),
                    "path": .string(Self.loggablePath(request.path)),
                    "status": .int(response.status),
                    "reason": .string(reasonText ?? ""),
                    "channel_id": .string(accepted?.channelID ?? headers.channelID ?? ""),
                    "request_id": .string(answerID),
                    "latency_ms": .double(Self.milliseconds(delay)),
                    "handled_us": .int(Int(Self.milliseconds(handled) * 1000)),
                    "dropped": .bool(dropped),
                ])
            if let reaction, !reaction.outcomes.isEmpty { logDevices(reaction, listener: listener) }
        }
        return SimulatorReply(response: response, actions: actions, delay: delay, dropsAnswer: dropped)
    }

    /// What an accepted request produced.
    struct Accepted {
        var status: Int
        var headers: HTTPHeaders = [:]
        var body: [UInt8] = []
        var record: SimulatorRecord?
        var channelID: String?
        var channelsChanged = false
    }

    /// The status and text of `reason` on `api`. The engine only ever gives reasons of the API's table (tests hold it
    /// to that); should one slip through, it is answered as an internal error rather than with a status Apple never pairs.
    static func answer(_ reason: SimulatorReason, on api: SimulatorAPI) -> SimulatorAnswer {
        api.answer(for: reason) ?? SimulatorAnswer(status: 500, text: "InternalServerError")
    }

    /// Checks in this order: path and method, repeated headers, provider token, scripted rejections and injected faults,
    /// then the operation's own headers and body (Apple documents no order). Sets `api` once the path names it.
    private func evaluate(
        _ request: HTTPRequest, headers: SimulatorRequestHeaders, givenIDIsInvalid: Bool, listener: SimulatorListener,
        api: inout SimulatorAPI, connection: inout SimulatorConnectionState, now: Date, answerID: String
    ) throws(Rejection) -> Accepted {
        let route = try Route(listener: listener, path: request.path)
        api = route.api
        guard route.allows(request.method) else { throw Rejection(.methodNotAllowed) }
        if let repeated = headers.repeatedField { try Self.rejectRepeated(repeated, on: api) }
        try authenticate(headers.authorization, &connection, api: api, now: now)
        if let scripted = nextScripted(on: api, now: now) { throw scripted }
        if let fault = drawFault() { throw fault }
        if givenIDIsInvalid { throw Rejection(.badMessageId) }

        switch route {
        case .devicePush(let token):
            return try devicePush(token: token, request, headers, now: now, apnsID: answerID)
        case .broadcast(let bundleID):
            try checkBundle(bundleID)
            return try broadcast(bundleID: bundleID, request, headers, now: now, requestID: answerID)
        case .channels(let bundleID):
            try checkBundle(bundleID)
            switch request.method {
            case "POST": return try createChannel(bundleID: bundleID, body: request.body, now: now, requestID: answerID)
            case "GET": return try readChannel(bundleID: bundleID, headers: headers, now: now, requestID: answerID)
            default: return try deleteChannel(bundleID: bundleID, headers: headers, now: now, requestID: answerID)
            }
        case .allChannels(let bundleID):
            try checkBundle(bundleID)
            let ids = channels(bundleID: bundleID).map { JSONValue.string($0.id) }
            let operation = ChannelOperation(kind: .list, bundleID: bundleID, channelID: nil, requestID: answerID, at: now)
            return Accepted(
                status: 200, headers: [SimulatorHeader.contentType: "application/json"],
                body: JSONValue.object(["channels": .array(ids)]).jsonBytes, record: .channel(operation))
        }
    }

    /// A field sent twice. Device pushes document `DuplicateHeaders`; the broadcast and channel-management table does
    /// not, so there a repeated field the API reads is an invalid value of that field, and one it does not read is ignored.
    static func rejectRepeated(_ name: String, on api: SimulatorAPI) throws(Rejection) {
        if api == .devicePush { throw Rejection(.duplicateHeaders) }
        switch name {
        case SimulatorHeader.authorization: throw Rejection(.invalidProviderToken)
        case SimulatorHeader.requestID: throw Rejection(.badMessageId)
        case SimulatorHeader.channelID: throw Rejection(.badChannelId)
        case SimulatorHeader.pushType where api == .broadcast: throw Rejection(.invalidPushType)
        case SimulatorHeader.expiration where api == .broadcast: throw Rejection(.badExpirationDate)
        case SimulatorHeader.priority where api == .broadcast: throw Rejection(.badPriority)
        default: return
        }
    }

    // MARK: - Device pushes (docs/apns.md#device-push, #reasons-device)

    private func devicePush(
        token: String, _ request: HTTPRequest, _ headers: SimulatorRequestHeaders, now: Date, apnsID: String
    ) throws(Rejection) -> Accepted {
        guard !token.isEmpty else { throw Rejection(.missingDeviceToken) }
        guard let deviceToken = Self.deviceTokenHex(token) else { throw Rejection(.badDeviceToken) }
        guard let topic = headers.topic else { throw Rejection(.missingTopic) }
        guard !topic.isEmpty, Self.allBytes(of: topic, are: Self.isBundleIDByte) else { throw Rejection(.badTopic) }
        guard let pushType = headers.pushType else { throw Rejection(.missingPushType) }
        // Only Live Activity pushes are simulated; the casing of the value is not confirmed (docs/apns.md#push-type-casing).
        guard pushType.lowercased() == SimulatorLimits.liveActivityPushType else { throw Rejection(.invalidPushType) }
        // The plain bundle id as the topic of a Live Activity push: DeviceTokenNotForTopic (Apple documents no reason
        // for it; developers report this one).
        guard topic.hasSuffix(SimulatorLimits.liveActivityTopicSuffix) else { throw Rejection(.deviceTokenNotForTopic) }
        // The suffix is ASCII, so counting bytes counts characters.
        guard topic.utf8.count > SimulatorLimits.liveActivityTopicSuffix.utf8.count else { throw Rejection(.badTopic) }
        // A topic the key may not use: the device-push table has no TopicMismatch (that is the broadcast table's); its
        // reason for a topic that may not be pushed to is TopicDisallowed ("Pushing to this topic is not allowed").
        if !allowedBundleIDs.isEmpty, !isAllowed(String(topic.dropLast(SimulatorLimits.liveActivityTopicSuffix.count))) {
            throw Rejection(.topicDisallowed)
        }
        // Apple documents 10, 5 and 1 for device pushes too; ActivityKit asks for 5 or 10, which is the sender's rule.
        let priority =
            try headers.priority.map { text throws(Rejection) in
                try Self.integer(text, allowed: SimulatorLimits.priorities, else: .badPriority)
            } ?? 10
        let expiration = try headers.expiration.map { text throws(Rejection) in
            try Self.integer(text, allowed: nil, else: .badExpirationDate)
        }
        let collapseID = headers.collapseID
        if let collapseID, !(1...SimulatorLimits.collapseID).contains(collapseID.utf8.count) { throw Rejection(.badCollapseId) }
        // Apple's device-push table has a reason for an empty payload and one for a large one, none for a payload that
        // is not JSON (BadRequestPayload is the broadcast table's): such a push is accepted, as far as Apple says.
        guard !request.body.isEmpty else { throw Rejection(.payloadEmpty) }
        guard request.body.count <= SimulatorLimits.devicePushPayload else { throw Rejection(.payloadTooLarge) }

        let invalidSince = state.withLock { state -> Date? in
            if let since = state.invalidTokens[deviceToken] { return since }
            let share = configuration.faults.unregistered
            guard share > 0, state.random.unit() < share else { return nil }
            state.invalidTokens[deviceToken] = now
            return now
        }
        if let invalidSince {
            throw Rejection(.unregistered, timestamp: Int64((invalidSince.timeIntervalSince1970 * 1000).rounded(.down)))
        }
        var answer: HTTPHeaders = [:]
        if configuration.environment == .development { answer.add(SimulatorHeader.uniqueID, SimulatorIdentifiers.randomUUID()) }
        let push = ReceivedDevicePush(
            deviceToken: deviceToken, topic: topic, priority: priority, expiration: expiration, collapseID: collapseID,
            requestHeaders: request.headers, payload: request.body, apnsID: apnsID, receivedAt: now)
        return Accepted(status: 200, headers: answer, record: .devicePush(push))
    }

    // MARK: - Broadcasts (sending-broadcast-push-notification-requests-to-apns)

    private func broadcast(
        bundleID: String, _ request: HTTPRequest, _ headers: SimulatorRequestHeaders, now: Date, requestID: String
    ) throws(Rejection) -> Accepted {
        let channelID = try Self.channelID(headers)
        guard let pushType = headers.pushType else { throw Rejection(.missingPushType) }
        guard pushType.lowercased() == SimulatorLimits.liveActivityPushType else { throw Rejection(.invalidPushType) }
        let expiration = try Self.integer(headers.expiration ?? "", allowed: nil, else: .badExpirationDate)
        let priority = try Self.integer(headers.priority ?? "", allowed: SimulatorLimits.priorities, else: .badPriority)
        guard let channel = channel(id: channelID), channel.bundleID == bundleID else { throw Rejection(.channelNotRegistered) }
        // A no-storage channel takes only expiration 0. Beyond 8 hours on a storing channel is accepted (Apple does not say).
        if channel.storagePolicy == .noMessageStored, expiration != 0 { throw Rejection(.badExpirationDate) }
        try Self.checkPayload(request.body, limit: SimulatorLimits.broadcastPayload)
        let uniqueID = SimulatorIdentifiers.randomUUID()
        let broadcast = ReceivedBroadcast(
            bundleID: bundleID, channelID: channelID, priority: priority, expiration: expiration,
            requestHeaders: request.headers, payload: request.body, requestID: requestID, uniqueID: uniqueID,
            receivedAt: now)
        return Accepted(status: 200, headers: [SimulatorHeader.uniqueID: uniqueID], record: .broadcast(broadcast), channelID: channelID)
    }

    // MARK: - Simulated devices (SimulatedDevice.swift)

    /// Hands an accepted device push or broadcast to the devices it reaches. The payload is parsed only when a
    /// device listens: a token or channel no device knows costs one lookup.
    private func deliverToDevices(_ record: SimulatorRecord, now: Date) -> DeviceReaction? {
        switch record {
        case .devicePush(let push):
            let kind = devices.kind(of: push.deviceToken)
            guard kind != .unknown else { return nil }
            let content = LiveActivityPushContent(payload: push.payload)
            var channelExists = false
            if kind == .pushToStart, let channelID = content.inputPushChannel {
                let bundleID = String(push.topic.dropLast(SimulatorLimits.liveActivityTopicSuffix.count))
                channelExists = channel(id: channelID)?.bundleID == bundleID
            }
            return devices.deliverDevicePush(token: push.deviceToken, content, channelExists: channelExists, now: now)
        case .broadcast(let broadcast):
            guard devices.hasListeners(channelID: broadcast.channelID) else { return nil }
            return devices.deliverBroadcast(channelID: broadcast.channelID, LiveActivityPushContent(payload: broadcast.payload), now: now)
        case .channel:
            return nil
        }
    }

    /// One line per request that reached devices: how many did what.
    private func logDevices(_ reaction: DeviceReaction, listener: SimulatorListener) {
        guard let logger else { return }
        var counts: [String: Int] = [:]
        var activityID = ""
        for outcome in reaction.outcomes {
            switch outcome {
            case .started(let id):
                counts["started", default: 0] += 1
                activityID = id
            case .startIgnored(let reason): counts["ignored_" + reason.rawValue, default: 0] += 1
            case .updated: counts["updated", default: 0] += 1
            case .ended: counts["ended", default: 0] += 1
            case .notNewer: counts["not_newer", default: 0] += 1
            case .afterEnd: counts["after_end", default: 0] += 1
            case .unreadable: counts["unreadable", default: 0] += 1
            }
        }
        let summary = counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        logger.info("devices", ["listener": .string(listener.rawValue), "outcomes": .string(summary), "activity_id": .string(activityID)])
    }

}

/// Where a request goes, from its listener, method and path.
private enum Route {
    case devicePush(token: String)
    case broadcast(bundleID: String)
    case channels(bundleID: String)
    case allChannels(bundleID: String)

    /// 404 `BadPath` for a path the listener does not serve, as Apple's hosts answer any path they do not know.
    init(listener: SimulatorListener, path: String) throws(Rejection) {
        // Prefix matching on the path: this runs for every request, and splitting the path into an array
        // cost the simulator a tenth of its time under load.
        func rest(after prefix: String) -> Substring? {
            guard path.hasPrefix(prefix) else { return nil }
            let rest = Substring(path.utf8.dropFirst(prefix.utf8.count))
            return hasSlash(rest) ? nil : rest
        }
        func bundle(between prefix: String, and suffix: String) -> String? {
            guard path.hasPrefix(prefix), path.hasSuffix(suffix), path.count > prefix.count + suffix.count else { return nil }
            let bundle = path.dropFirst(prefix.count).dropLast(suffix.count)
            return hasSlash(bundle) ? nil : String(bundle)
        }
        // Through the bytes' storage: iterating a Substring's UTF8View is slow.
        func hasSlash(_ text: Substring) -> Bool {
            text.utf8.withContiguousStorageIfAvailable { $0.contains(UInt8(ascii: "/")) } ?? text.utf8.contains(UInt8(ascii: "/"))
        }
        switch listener {
        case .push:
            if let token = rest(after: "/3/device/") {
                self = .devicePush(token: String(token))
            } else if let bundleID = rest(after: "/4/broadcasts/apps/"), !bundleID.isEmpty {
                self = .broadcast(bundleID: String(bundleID))
            } else {
                throw Rejection(.badPath)
            }
        case .management:
            if let bundleID = bundle(between: "/1/apps/", and: "/channels") {
                self = .channels(bundleID: bundleID)
            } else if let bundleID = bundle(between: "/1/apps/", and: "/all-channels") {
                self = .allChannels(bundleID: bundleID)
            } else {
                throw Rejection(.badPath)
            }
        }
    }

    /// The API whose table the answers come from.
    var api: SimulatorAPI {
        switch self {
        case .devicePush: .devicePush
        case .broadcast: .broadcast
        case .channels, .allChannels: .channelManagement
        }
    }

    /// The methods Apple documents for the path; any other is 405 `MethodNotAllowed`.
    func allows(_ method: String) -> Bool {
        switch self {
        case .devicePush, .broadcast: method == "POST"
        case .channels: method == "POST" || method == "GET" || method == "DELETE"
        case .allChannels: method == "GET"
        }
    }
}
