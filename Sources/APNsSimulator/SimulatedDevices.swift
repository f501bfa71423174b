// The simulator's devices: the `SimulatedDevice` values behind one lock, with the indexes that route a request to
// them (push-to-start tokens, minted update tokens, channels with listening activities), and the reports that say
// what every device shows. The engine asks `isEmpty` (an atomic read) before anything else, so a simulator without
// devices pays one load per request for all of this.
import Foundation
import MarqueeCore
import Synchronization

/// A device as a file or the control port gives it.
public struct SimulatedDeviceSpec: Sendable, Equatable {
    public var pushToStartToken: String
    public var osVersion: SimulatorOSVersion
    public var installationID: String?

    public init(pushToStartToken: String, osVersion: SimulatorOSVersion, installationID: String? = nil) {
        self.pushToStartToken = pushToStartToken.lowercased()
        self.osVersion = osVersion
        self.installationID = installationID
    }

    /// Reads `{"devices": [...]}`, a bare array, or one device object, each device being
    /// `{"pushToStartToken": "<hex>", "osVersion": "18.1", "installationId": "..."}` (`installationId` optional).
    public static func parse(_ bytes: [UInt8]) throws(SimulatorConfigurationError) -> [SimulatedDeviceSpec] {
        guard let json = try? JSONValue(parsing: bytes) else { throw SimulatorConfigurationError("devices: not JSON") }
        let items: [JSONValue]
        if let array = json.arrayValue {
            items = array
        } else if let array = json["devices"]?.arrayValue {
            items = array
        } else if json.objectValue != nil {
            items = [json]
        } else {
            throw SimulatorConfigurationError(#"devices: expected {"devices": [...]}, an array or one device"#)
        }
        var specs: [SimulatedDeviceSpec] = []
        specs.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            guard let object = item.objectValue else { throw SimulatorConfigurationError("devices[\(index)]: expected an object") }
            for key in object.keys where !["pushToStartToken", "osVersion", "installationId"].contains(key) {
                throw SimulatorConfigurationError("devices[\(index)]: unknown key \(key)")
            }
            guard let token = object["pushToStartToken"]?.stringValue, token.utf8.count % 2 == 0, (2...400).contains(token.utf8.count),
                token.utf8.allSatisfy(SimulatorIdentifiers.isHexDigit)
            else {
                throw SimulatorConfigurationError("devices[\(index)].pushToStartToken: expected hexadecimal bytes")
            }
            guard let text = object["osVersion"]?.stringValue, let version = SimulatorOSVersion(parsing: text) else {
                throw SimulatorConfigurationError(#"devices[\#(index)].osVersion: expected "major[.minor[.patch]]", e.g. "18.1""#)
            }
            var installationID: String?
            if let value = object["installationId"], !value.isNull {
                guard let text = value.stringValue, (1...200).contains(text.count) else {
                    throw SimulatorConfigurationError("devices[\(index)].installationId: expected 1 to 200 characters")
                }
                installationID = text
            }
            specs.append(SimulatedDeviceSpec(pushToStartToken: token, osVersion: version, installationID: installationID))
        }
        return specs
    }
}

/// Every simulated device of one simulator, routed to by token and channel; safe from any thread.
public final class SimulatedDevices: Sendable {
    public let rules: SimulatedDeviceRules
    private let state: Mutex<State>
    /// The number of devices, read without the lock on every request.
    private let count = Atomic<Int>(0)

    private struct State {
        var devices: [SimulatedDevice] = []
        var byPushToStartToken: [String: Int] = [:]
        /// A minted update token → its device.
        var byUpdateToken: [String: Int] = [:]
        /// A channel → the devices with at least one activity listening on it.
        var byChannel: [String: [Int]] = [:]
        /// Attributes type → the attribute that names its event (given, or learned from the app's backend).
        var eventKeys: [String: String]
        var random: SeededRandom
    }

    init(rules: SimulatedDeviceRules, eventKeys: [String: String] = [:], seed: UInt64) {
        self.rules = rules
        // Its own generator, so tracking devices does not change the draws of faults and latency.
        state = Mutex(State(eventKeys: eventKeys, random: SeededRandom(seed: seed ^ 0x5DEE_CE66_D1CE_5EED)))
    }

    /// No device: the engine skips everything device-related.
    public var isEmpty: Bool { count.load(ordering: .relaxed) == 0 }

    /// Adds devices; a token already known keeps its activities and takes the new version and installation id
    /// (an OS upgrade). Returns how many were added and how many updated.
    @discardableResult
    public func add(_ specs: [SimulatedDeviceSpec]) -> (added: Int, updated: Int) {
        state.withLock { state in
            var added = 0
            var updated = 0
            for spec in specs {
                if let index = state.byPushToStartToken[spec.pushToStartToken] {
                    state.devices[index].osVersion = spec.osVersion
                    if let installationID = spec.installationID { state.devices[index].installationID = installationID }
                    updated += 1
                } else {
                    state.byPushToStartToken[spec.pushToStartToken] = state.devices.count
                    state.devices.append(
                        SimulatedDevice(
                            pushToStartToken: spec.pushToStartToken, osVersion: spec.osVersion, installationID: spec.installationID))
                    added += 1
                }
            }
            count.store(state.devices.count, ordering: .relaxed)
            return (added, updated)
        }
    }

    /// Forgets every device.
    public func removeAll() {
        state.withLock { state in
            state.devices = []
            state.byPushToStartToken = [:]
            state.byUpdateToken = [:]
            state.byChannel = [:]
            count.store(0, ordering: .relaxed)
        }
    }

    /// What a device token names.
    enum TokenKind {
        case pushToStart, updateToken, unknown
    }

    func kind(of token: String) -> TokenKind {
        state.withLock { state in
            if state.byPushToStartToken[token] != nil { return .pushToStart }
            if state.byUpdateToken[token] != nil { return .updateToken }
            return .unknown
        }
    }

    /// Whether any activity listens on the channel.
    func hasListeners(channelID: String) -> Bool { state.withLock { $0.byChannel[channelID] != nil } }

    /// A device push accepted for `token` (lowercase hex): a start for a push-to-start token, an update or end for a
    /// minted one. `channelExists` answers whether a start's `input-push-channel` names a live channel of its app.
    func deliverDevicePush(
        token: String, _ push: LiveActivityPushContent, channelExists: Bool, now: Date
    ) -> DeviceReaction {
        state.withLock { state in
            if let index = state.byPushToStartToken[token] {
                var random = state.random
                let reaction = state.devices[index].receiveStart(
                    push, channelExists: channelExists,
                    identity: { NewActivityIdentity(activityID: Self.activityID(&random), updateToken: Self.updateToken(&random)) },
                    rules: rules, now: now)
                state.random = random
                guard case .started(let id)? = reaction.outcomes.first,
                    let activity = state.devices[index].activities.last, activity.id == id
                else { return reaction }
                switch activity.updatePath {
                case .token(let token): state.byUpdateToken[token] = index
                case .channel(let channel):
                    // A device listed once per channel, however many of its activities listen there.
                    let others = state.devices[index].activities.dropLast().contains { $0.channelID == channel }
                    if !others { state.byChannel[channel, default: []].append(index) }
                case .none: break
                }
                return reaction
            }
            if let index = state.byUpdateToken[token] {
                return state.devices[index].receiveUpdate(token: token, push, now: now)
            }
            return DeviceReaction()
        }
    }

    /// A broadcast accepted on `channelID`, read by every listening activity.
    func deliverBroadcast(channelID: String, _ push: LiveActivityPushContent, now: Date) -> DeviceReaction {
        state.withLock { state in
            var reaction = DeviceReaction()
            for index in state.byChannel[channelID] ?? [] {
                reaction.outcomes += state.devices[index].receiveBroadcast(channelID: channelID, push, now: now).outcomes
            }
            return reaction
        }
    }

    /// The app backend's answer to a registration.
    func registrationFinished(_ registration: ActivityRegistration, _ result: SimulatedActivity.Registration) {
        state.withLock { state in
            guard let index = state.byPushToStartToken[registration.deviceToken] else { return }
            state.devices[index].registrationFinished(activityID: registration.activityID, result)
        }
    }

    /// The attribute that names the event of `attributesType`, when known.
    func eventKey(of attributesType: String) -> String? { state.withLock { $0.eventKeys[attributesType] } }

    /// Remembers the event key of a type (learned from the app's backend).
    func learnEventKey(_ attribute: String, of attributesType: String) {
        state.withLock { $0.eventKeys[attributesType] = attribute }
    }

    /// The devices as they are at `now` (time is applied first: ended, stale and dismissed activities are current).
    public func snapshot(at now: Date) -> [SimulatedDevice] {
        state.withLock { state in
            for index in state.devices.indices { state.devices[index].advance(to: now) }
            return state.devices
        }
    }

    /// One device by push-to-start token or installation id, as it is at `now`.
    public func device(_ id: String, at now: Date) -> SimulatedDevice? {
        state.withLock { state in
            let index = state.byPushToStartToken[id.lowercased()] ?? state.devices.firstIndex { $0.installationID == id }
            guard let index else { return nil }
            state.devices[index].advance(to: now)
            return state.devices[index]
        }
    }

    var eventKeys: [String: String] { state.withLock { $0.eventKeys } }

    // MARK: - Ids

    /// An upper-case UUID, as ActivityKit's `Activity.id` reads.
    private static func activityID(_ random: inout SeededRandom) -> String {
        var nibbles: [UInt8] = []
        nibbles.reserveCapacity(32)
        for word in [random.next(), random.next()] {
            for shift in stride(from: 60, through: 0, by: -4) { nibbles.append(UInt8((word >> UInt64(shift)) & 0xF)) }
        }
        nibbles[12] = 4  // version 4
        nibbles[16] = 8 | (nibbles[16] & 3)  // RFC 4122 variant
        var bytes: [UInt8] = []
        bytes.reserveCapacity(36)
        for (index, nibble) in nibbles.enumerated() {
            if index == 8 || index == 12 || index == 16 || index == 20 { bytes.append(UInt8(ascii: "-")) }
            bytes.append(nibble < 10 ? 0x30 + nibble : 0x41 + nibble - 10)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// 32 random bytes in lowercase hex, like a device's token.
    private static func updateToken(_ random: inout SeededRandom) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64)
        for _ in 0..<4 {
            let word = random.next()
            for shift in stride(from: 60, through: 0, by: -4) {
                let nibble = UInt8((word >> UInt64(shift)) & 0xF)
                bytes.append(nibble < 10 ? 0x30 + nibble : 0x61 + nibble - 10)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

// MARK: - Reports

/// What one device shows of one event: how many activities, duplicates, the newest state, what came after an end.
public struct SimulatedEventSummary: Sendable, Equatable {
    /// The event key's value when the type has one, else `channel:<id>`, else `<type>:<attributes as JSON>`.
    public var event: String
    public var activities: Int
    /// Activities started while another of the same event was still running.
    public var duplicates: Int
    /// The content-state with the newest timestamp, and that timestamp.
    public var newestState: JSONValue
    public var newestTimestamp: Int64
    /// The state of the newest activity.
    public var state: SimulatedActivity.State
    /// Pushes that reached its activities after they ended.
    public var receivedAfterEnd: Int
}

extension SimulatedDevice {
    /// The event an activity shows, as reports name it.
    static func eventName(of activity: SimulatedActivity, eventKeys: [String: String]) -> String {
        if let key = eventKeys[activity.attributesType], let value = activity.attributes[key]?.stringValue { return value }
        if let channel = activity.channelID { return "channel:" + channel }
        return activity.attributesType + ":" + JSONValue.object(activity.attributes).jsonString
    }

    /// One summary per event, in the order the events first started.
    public func eventSummaries(eventKeys: [String: String]) -> [SimulatedEventSummary] {
        var order: [String] = []
        var groups: [String: [SimulatedActivity]] = [:]
        for activity in activities {
            let name = Self.eventName(of: activity, eventKeys: eventKeys)
            if groups[name] == nil { order.append(name) }
            groups[name, default: []].append(activity)
        }
        return order.map { name in
            let group = groups[name]!
            var duplicates = 0
            for (index, activity) in group.enumerated() {
                let overlapped = group[..<index].contains { earlier in (earlier.endedAt ?? .distantFuture) > activity.startedAt }
                if overlapped { duplicates += 1 }
            }
            let newest = group.max { $0.timestamp < $1.timestamp }!
            return SimulatedEventSummary(
                event: name, activities: group.count, duplicates: duplicates, newestState: newest.contentState,
                newestTimestamp: newest.timestamp, state: group.last!.state, receivedAfterEnd: group.reduce(0) { $0 + $1.receivedAfterEnd })
        }
    }

    /// The whole device as JSON: its activities and its summaries per event.
    func reportJSON(eventKeys: [String: String]) -> JSONValue {
        var object = summaryJSON(eventKeys: eventKeys).objectValue ?? [:]
        object["activities"] = .array(activities.map { $0.json(eventKeys: eventKeys) })
        return .object(object)
    }

    /// The device without its activities: counts and one line per event.
    func summaryJSON(eventKeys: [String: String]) -> JSONValue {
        var ignored = JSONObject()
        for reason in IgnoredStart.allCases { if let count = ignoredStarts[reason] { ignored[reason.rawValue] = .int(Int64(count)) } }
        return .object([
            "pushToStartToken": .string(pushToStartToken),
            "installationId": installationID.map(JSONValue.string) ?? .null,
            "osVersion": .string(osVersion.description),
            "startsIgnored": .object(ignored),
            "events": .array(eventSummaries(eventKeys: eventKeys).map(\.json)),
        ])
    }
}

extension SimulatedEventSummary {
    var json: JSONValue {
        .object([
            "event": .string(event), "activities": .int(Int64(activities)), "duplicates": .int(Int64(duplicates)),
            "newestState": newestState, "newestTimestamp": .int(newestTimestamp), "state": .string(state.rawValue),
            "receivedAfterEnd": .int(Int64(receivedAfterEnd)),
        ])
    }
}

extension SimulatedActivity {
    func json(eventKeys: [String: String]) -> JSONValue {
        func date(_ date: Date?) -> JSONValue { date.map { .string(ISO8601DateFormatter().string(from: $0)) } ?? .null }
        var path: JSONValue = .null
        switch updatePath {
        case .channel(let id): path = ["channel": .string(id)]
        case .token(let token): path = ["token": .string(token)]
        case .none: break
        }
        let registration: JSONValue =
            switch self.registration {
            case .notNeeded: "notNeeded"
            case .skipped(let why): .string("skipped: " + why)
            case .pending: "pending"
            case .registered(let status): .string("registered \(status)")
            case .failed(let why): .string("failed: " + why)
            }
        return .object([
            "id": .string(id), "event": .string(SimulatedDevice.eventName(of: self, eventKeys: eventKeys)),
            "attributesType": .string(attributesType), "attributes": .object(attributes), "contentState": contentState,
            "timestamp": .int(timestamp), "listensOn": path, "state": .string(state.rawValue), "startedAt": date(startedAt),
            "staleDate": date(staleDate), "endedAt": date(endedAt), "endCause": endCause.map { .string($0.rawValue) } ?? .null,
            "dismissesAt": date(dismissesAt), "updatesShown": .int(Int64(updatesShown)),
            "notNewerIgnored": .int(Int64(notNewerIgnored)), "receivedAfterEnd": .int(Int64(receivedAfterEnd)),
            "unreadable": .int(Int64(unreadable)), "registration": registration,
        ])
    }
}

extension SimulatedDevices {
    /// The control port's and the exit's report: totals, then each device with one line per event.
    public func report(at now: Date) -> JSONValue {
        let devices = snapshot(at: now)
        let keys = eventKeys
        var activities = 0
        var duplicates = 0
        var afterEnd = 0
        var overBudget = 0
        var byState: [String: Int] = [:]
        var summaries: [JSONValue] = []
        summaries.reserveCapacity(devices.count)
        for device in devices {
            activities += device.activities.count
            overBudget += device.ignoredStarts[.overBudget] ?? 0
            for activity in device.activities {
                byState[activity.state.rawValue, default: 0] += 1
                afterEnd += activity.receivedAfterEnd
            }
            duplicates += device.eventSummaries(eventKeys: keys).reduce(0) { $0 + $1.duplicates }
            summaries.append(device.summaryJSON(eventKeys: keys))
        }
        var states = JSONObject()
        for (state, count) in byState.sorted(by: { $0.key < $1.key }) { states[state] = .int(Int64(count)) }
        return .object([
            "devices": .int(Int64(devices.count)), "activities": .int(Int64(activities)), "activitiesByState": .object(states),
            "duplicates": .int(Int64(duplicates)), "receivedAfterEnd": .int(Int64(afterEnd)),
            "startsOverBudget": .int(Int64(overBudget)), "perDevice": .array(summaries),
        ])
    }
}

extension SimulatedDevices {
    /// An empty set with the configuration's rules and event keys; tokens are registered when it names an app backend.
    public convenience init(configuration: SimulatorConfiguration) {
        var rules = configuration.deviceRules
        rules.registersActivities = configuration.appBackend != nil
        self.init(rules: rules, eventKeys: configuration.eventKeys, seed: configuration.seed)
    }
}
