// One simulated device and its Live Activities, as a value: facts go in (a push to its push-to-start token, a
// broadcast on a channel one of its activities listens on, a push to an update token it minted, the passing of
// time) and what the device did comes out, with what the app's backend must do about it. No I/O and no clock:
// every fact carries its time, so the lifecycle is tested with plain values and the engine performs the actions.
// APNs answers 200 when it accepts a push, not when a device shows it; this is the half that says what it shows.
// The rules are ActivityKit's as docs/apns.md#activitykit, #device-versions and #payload state them. Where Apple
// is silent (the start budget, a start carrying both input keys) the choice is written next to the rule.
import Foundation
import MarqueeCore

/// An iOS version, compared as numbers: 17.10 comes after 17.2.
public struct SimulatorOSVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var major: Int
    public var minor: Int
    public var patch: Int

    public init(_ major: Int, _ minor: Int = 0, _ patch: Int = 0) {
        self.major = major
        self.minor = minor
        self.patch = patch
    }

    /// Reads `major[.minor[.patch]]`; nil for anything else.
    public init?(parsing text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...3).contains(parts.count) else { return nil }
        var numbers: [Int] = []
        for part in parts {
            guard !part.isEmpty, part.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let number = Int(part), number < 1_000 else {
                return nil
            }
            numbers.append(number)
        }
        self.init(numbers[0], numbers.count > 1 ? numbers[1] : 0, numbers.count > 2 ? numbers[2] : 0)
    }

    /// Push-to-start exists from iOS 17.2.
    public static let pushToStart = SimulatorOSVersion(17, 2)
    /// `input-push-channel` and `input-push-token` work from iOS 18.
    public static let channels = SimulatorOSVersion(18)

    public static func < (left: Self, right: Self) -> Bool {
        (left.major, left.minor, left.patch) < (right.major, right.minor, right.patch)
    }

    public var description: String { "\(major).\(minor)" + (patch == 0 ? "" : ".\(patch)") }
}

/// The device-side settings every simulated device follows.
public struct SimulatedDeviceRules: Sendable, Hashable {
    /// Starts a device accepts in any hour; past it a start is ignored (APNs still answers 200) and counted. Apple
    /// publishes no such budget: 8 is a guess from developers' reports (starts stall after about ten in a short
    /// window), the same guess as Marquee's own per-device start limit.
    public var startsPerHour = 8
    /// How long an activity stays active before the system ends it (Apple: at most 8 hours).
    public var activityMaxDuration: TimeInterval = 8 * 3_600
    /// Whether minted update tokens are registered with an app backend (`--app-backend`).
    public var registersActivities = false

    /// An ended activity stays on the Lock Screen at most this long; a dismissal date is capped to it.
    public static let lockScreenLinger: TimeInterval = 4 * 3_600

    public init() {}
}

/// The `aps` keys of a Live Activity push that a device reads; a key that is absent or of the wrong type is nil.
public struct LiveActivityPushContent: Sendable, Equatable {
    /// `aps.event`.
    public enum Event: String, Sendable {
        case start, update, end
    }

    public var event: Event?
    /// `aps.timestamp`, epoch seconds (a fractional value is cut to the second below).
    public var timestamp: Int64?
    public var contentState: JSONValue?
    public var attributesType: String?
    public var attributes: JSONObject?
    public var hasAlert = false
    public var inputPushChannel: String?
    public var inputPushToken = false
    public var staleDate: Date?
    public var dismissalDate: Date?

    public init() {}

    /// Reads a payload's `aps`; a payload that is not a JSON object with an `aps` object reads as empty.
    public init(payload: [UInt8]) {
        guard let aps = (try? JSONValue(parsing: payload))?["aps"]?.objectValue else {
            self.init()
            return
        }
        self.init(aps: aps)
    }

    public init(aps: JSONObject) {
        event = aps["event"]?.stringValue.flatMap(Event.init(rawValue:))
        timestamp = Self.seconds(aps["timestamp"])
        contentState = aps["content-state"]?.objectValue.map(JSONValue.object)
        attributesType = aps["attributes-type"]?.stringValue
        attributes = aps["attributes"]?.objectValue
        hasAlert = aps["alert"].map { !$0.isNull } ?? false
        inputPushChannel = aps["input-push-channel"]?.stringValue
        inputPushToken = Self.seconds(aps["input-push-token"]) == 1
        staleDate = Self.seconds(aps["stale-date"]).map { Date(timeIntervalSince1970: TimeInterval($0)) }
        dismissalDate = Self.seconds(aps["dismissal-date"]).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    private static func seconds(_ value: JSONValue?) -> Int64? {
        if let integer = value?.intValue { return integer }
        guard let double = value?.doubleValue, double.isFinite, abs(double) < 1e15 else { return nil }
        return Int64(double.rounded(.down))
    }
}

/// A Live Activity on a simulated device.
public struct SimulatedActivity: Sendable, Equatable {
    /// What the device shows of it.
    public enum State: String, Sendable {
        /// Running and current.
        case active
        /// Running, past its `stale-date`.
        case stale
        /// Ended (by an `end` push or after the maximum duration), still on the Lock Screen.
        case ended
        /// Gone from the Lock Screen.
        case dismissed
    }

    /// How updates reach it.
    public enum UpdatePath: Sendable, Equatable {
        /// Broadcasts on this channel (iOS 18, `input-push-channel`).
        case channel(String)
        /// Device pushes to this update token, which the device minted.
        case token(String)
        /// None: only the app could update it.
        case none
    }

    /// Why it ended.
    public enum EndCause: String, Sendable {
        /// An `end` push.
        case push
        /// The system ended it after the maximum duration.
        case maximumDuration
    }

    /// Where its registration with the app's backend stands.
    public enum Registration: Sendable, Equatable {
        /// It listens on a channel or has no token: nothing to register.
        case notNeeded
        /// A token that is not registered, and why (no app backend, no installation id).
        case skipped(String)
        /// Handed to the app backend's client, no answer yet.
        case pending
        /// The backend answered 2xx with this status.
        case registered(status: Int)
        /// The backend refused it, or it could not be sent; the text says how.
        case failed(String)
    }

    /// The app's `Activity.id`.
    public let id: String
    public var attributesType: String
    public var attributes: JSONObject
    /// The newest content-state shown.
    public var contentState: JSONValue
    /// `aps.timestamp` of the newest state shown.
    public var timestamp: Int64
    public var updatePath: UpdatePath
    public internal(set) var state: State = .active
    public var startedAt: Date
    /// When the system ends it unless a push does first.
    public var endsBy: Date
    public var staleDate: Date?
    public internal(set) var endedAt: Date?
    public internal(set) var endCause: EndCause?
    public internal(set) var dismissesAt: Date?
    /// Updates shown after the start (the end included).
    public internal(set) var updatesShown = 0
    /// Pushes ignored because their `aps.timestamp` was equal to or older than the shown one.
    public internal(set) var notNewerIgnored = 0
    /// Pushes that reached it after it ended.
    public internal(set) var receivedAfterEnd = 0
    /// Pushes it could not read (no timestamp, an update without content-state, an unknown event).
    public internal(set) var unreadable = 0
    public internal(set) var registration: Registration

    /// The update token, when it has one.
    public var updateToken: String? { if case .token(let token) = updatePath { token } else { nil } }
    /// The channel, when it listens on one.
    public var channelID: String? { if case .channel(let id) = updatePath { id } else { nil } }
    /// Active or stale.
    public var isRunning: Bool { state == .active || state == .stale }
}

/// Why a device did not start an activity from a push to its push-to-start token; APNs answered 200 all the same.
public enum IgnoredStart: String, Sendable, CaseIterable {
    /// The device runs an iOS below 17.2, which has no push-to-start.
    case belowPushToStart
    /// `aps.event` was not `start`.
    case notAStart
    /// `attributes-type`, `attributes` or `content-state` was missing.
    case incomplete
    /// No `alert`: ActivityKit requires one on a start.
    case noAlert
    /// `input-push-channel` on a device below iOS 18, which cannot join a channel.
    case channelBelowiOS18
    /// `input-push-channel` names no channel of the app.
    case unknownChannel
    /// Past the device's start budget (`SimulatedDeviceRules.startsPerHour`).
    case overBudget
}

/// What a device did with one push, or with the passing of time.
public enum DeviceOutcome: Sendable, Equatable {
    case started(activityID: String)
    case startIgnored(IgnoredStart)
    /// A newer state is shown.
    case updated(activityID: String)
    /// An `end` was shown: the activity ended.
    case ended(activityID: String)
    /// An equal or older `aps.timestamp`: ignored.
    case notNewer(activityID: String)
    /// The activity had ended: ignored and counted.
    case afterEnd(activityID: String)
    /// A push the activity could not read: ignored and counted.
    case unreadable(activityID: String)
}

/// What the app's backend must do after a device's reaction.
public enum DeviceAction: Sendable, Equatable {
    /// Register the new activity's update token with Marquee (`PUT /v1/installations/{id}/activities/{activityId}`).
    case registerActivity(ActivityRegistration)
}

/// An update token for the app's backend to register, with what names the activity's event.
public struct ActivityRegistration: Sendable, Equatable {
    public var installationID: String
    public var activityID: String
    public var attributesType: String
    public var attributes: JSONObject
    public var pushToken: String
    /// The device's push-to-start token, which finds the device again when the answer comes.
    public var deviceToken: String
}

/// A device's reaction to one fact.
public struct DeviceReaction: Sendable, Equatable {
    public var outcomes: [DeviceOutcome] = []
    public var actions: [DeviceAction] = []
}

/// The ids a device gives an activity it starts; the caller draws them, so the device stays a value.
public struct NewActivityIdentity: Sendable, Equatable {
    public var activityID: String
    public var updateToken: String

    public init(activityID: String, updateToken: String) {
        self.activityID = activityID
        self.updateToken = updateToken
    }
}

/// A device that follows the rules of ActivityKit for its version; see the comment at the top of this file.
public struct SimulatedDevice: Sendable, Equatable {
    /// The app-wide push-to-start token, lowercase hex.
    public let pushToStartToken: String
    public var osVersion: SimulatorOSVersion
    /// The app's id for this installation, used when its backend registers an activity.
    public var installationID: String?
    /// Every activity it has shown, oldest first; ended and dismissed ones stay.
    public private(set) var activities: [SimulatedActivity] = []
    /// When its recent starts happened (for the budget), oldest first.
    private var recentStarts: [Date] = []
    /// Starts ignored, by reason.
    public private(set) var ignoredStarts: [IgnoredStart: Int] = [:]

    public init(pushToStartToken: String, osVersion: SimulatorOSVersion, installationID: String? = nil) {
        self.pushToStartToken = pushToStartToken.lowercased()
        self.osVersion = osVersion
        self.installationID = installationID
    }

    /// A push to the push-to-start token. `channelExists` says whether `input-push-channel` names a live channel
    /// of the push's app; `identity` is called once if an activity starts (ignored starts draw no ids).
    public mutating func receiveStart(
        _ push: LiveActivityPushContent, channelExists: Bool, identity makeIdentity: () -> NewActivityIdentity,
        rules: SimulatedDeviceRules, now: Date
    ) -> DeviceReaction {
        advance(to: now)
        if let reason = reasonToIgnore(push, channelExists: channelExists, rules: rules, now: now) {
            ignoredStarts[reason, default: 0] += 1
            return DeviceReaction(outcomes: [.startIgnored(reason)])
        }
        guard let type = push.attributesType, let attributes = push.attributes, let state = push.contentState else {
            return DeviceReaction(outcomes: [.startIgnored(.incomplete)])  // checked above; kept for the compiler
        }
        recentStarts.append(now)
        let identity = makeIdentity()
        // Below iOS 18 a started activity always gets an update token (pushTokenUpdates). From 18 the start says:
        // `input-push-channel` joins the channel, `input-push-token: 1` asks for a token. A start carrying both is
        // not described by Apple; ActivityKit's PushType is one or the other, and here the channel wins.
        let path: SimulatedActivity.UpdatePath
        if osVersion < SimulatorOSVersion.channels {
            path = .token(identity.updateToken)
        } else if let channel = push.inputPushChannel {
            path = .channel(channel)
        } else if push.inputPushToken {
            path = .token(identity.updateToken)
        } else {
            path = .none
        }
        var reaction = DeviceReaction(outcomes: [.started(activityID: identity.activityID)])
        let registration: SimulatedActivity.Registration
        if case .token(let token) = path {
            if !rules.registersActivities {
                registration = .skipped("no app backend")
            } else if let installationID {
                registration = .pending
                reaction.actions.append(
                    .registerActivity(
                        ActivityRegistration(
                            installationID: installationID, activityID: identity.activityID, attributesType: type, attributes: attributes,
                            pushToken: token, deviceToken: pushToStartToken)))
            } else {
                registration = .skipped("no installation id")
            }
        } else {
            registration = .notNeeded
        }
        var activity = SimulatedActivity(
            id: identity.activityID, attributesType: type, attributes: attributes, contentState: state, timestamp: push.timestamp ?? 0,
            updatePath: path, startedAt: now, endsBy: now.addingTimeInterval(rules.activityMaxDuration), staleDate: push.staleDate,
            registration: registration)
        if let stale = push.staleDate, stale <= now { activity.state = .stale }
        activities.append(activity)
        return reaction
    }

    private mutating func reasonToIgnore(
        _ push: LiveActivityPushContent, channelExists: Bool, rules: SimulatedDeviceRules, now: Date
    ) -> IgnoredStart? {
        if osVersion < SimulatorOSVersion.pushToStart { return .belowPushToStart }
        guard push.event == .start else { return .notAStart }
        guard push.attributesType != nil, push.attributes != nil, push.contentState != nil else { return .incomplete }
        guard push.hasAlert else { return .noAlert }
        if push.inputPushChannel != nil {
            // docs/apns.md#push-to-start: a device below 18 does not start an activity from such a payload.
            if osVersion < SimulatorOSVersion.channels { return .channelBelowiOS18 }
            if !channelExists { return .unknownChannel }
        }
        let hourAgo = now.addingTimeInterval(-3_600)
        recentStarts.removeAll { $0 <= hourAgo }
        if recentStarts.count >= rules.startsPerHour { return .overBudget }
        return nil
    }

    /// A broadcast on `channelID`: every activity of the device listening there reads it.
    public mutating func receiveBroadcast(channelID: String, _ push: LiveActivityPushContent, now: Date) -> DeviceReaction {
        advance(to: now)
        var reaction = DeviceReaction()
        for index in activities.indices where activities[index].channelID == channelID {
            reaction.outcomes.append(Self.apply(push, to: &activities[index], now: now))
        }
        return reaction
    }

    /// A device push to an update token this device minted.
    public mutating func receiveUpdate(token: String, _ push: LiveActivityPushContent, now: Date) -> DeviceReaction {
        advance(to: now)
        guard let index = activities.firstIndex(where: { $0.updateToken == token }) else { return DeviceReaction() }
        return DeviceReaction(outcomes: [Self.apply(push, to: &activities[index], now: now)])
    }

    /// Lets time pass: activities past their maximum duration end, past their stale date go stale, and ended ones
    /// past their dismissal leave the Lock Screen. The end is dated when it happened, not when it was noticed.
    public mutating func advance(to now: Date) {
        for index in activities.indices {
            var activity = activities[index]
            if activity.isRunning, activity.endsBy <= now {
                activity.state = .ended
                activity.endedAt = activity.endsBy
                activity.endCause = .maximumDuration
                activity.dismissesAt = activity.endsBy.addingTimeInterval(SimulatedDeviceRules.lockScreenLinger)
            }
            if activity.state == .active, let stale = activity.staleDate, stale <= now { activity.state = .stale }
            if activity.state == .ended, let dismissal = activity.dismissesAt, dismissal <= now { activity.state = .dismissed }
            if activity != activities[index] { activities[index] = activity }
        }
    }

    /// `receiveStart` with ids drawn beforehand.
    public mutating func receiveStart(
        _ push: LiveActivityPushContent, channelExists: Bool, identity: NewActivityIdentity, rules: SimulatedDeviceRules, now: Date
    ) -> DeviceReaction {
        receiveStart(push, channelExists: channelExists, identity: { identity }, rules: rules, now: now)
    }

    /// The answer of the app's backend to the registration of `activityID`.
    public mutating func registrationFinished(activityID: String, _ registration: SimulatedActivity.Registration) {
        guard let index = activities.firstIndex(where: { $0.id == activityID }) else { return }
        activities[index].registration = registration
    }

    /// An `update` or `end` for one activity: shown only when its timestamp is newer than the one shown.
    private static func apply(_ push: LiveActivityPushContent, to activity: inout SimulatedActivity, now: Date) -> DeviceOutcome {
        guard activity.isRunning else {
            activity.receivedAfterEnd += 1
            return .afterEnd(activityID: activity.id)
        }
        guard let event = push.event, event != .start, let timestamp = push.timestamp else {
            activity.unreadable += 1
            return .unreadable(activityID: activity.id)
        }
        guard timestamp > activity.timestamp else {
            activity.notNewerIgnored += 1
            return .notNewer(activityID: activity.id)
        }
        switch event {
        case .update:
            guard let state = push.contentState else {
                activity.unreadable += 1
                return .unreadable(activityID: activity.id)
            }
            activity.contentState = state
            activity.timestamp = timestamp
            // An update replaces the content, stale date included (ActivityContent carries both).
            activity.staleDate = push.staleDate
            activity.state = push.staleDate.map { $0 <= now } == true ? .stale : .active
            activity.updatesShown += 1
            return .updated(activityID: activity.id)
        case .end, .start:
            // content-state is optional on an end: without one the last state stays.
            if let state = push.contentState { activity.contentState = state }
            activity.timestamp = timestamp
            activity.state = .ended
            activity.endedAt = now
            activity.endCause = .push
            let latest = now.addingTimeInterval(SimulatedDeviceRules.lockScreenLinger)
            let dismissal = min(push.dismissalDate ?? latest, latest)
            activity.dismissesAt = dismissal
            if dismissal <= now { activity.state = .dismissed }
            activity.updatesShown += 1
            return .ended(activityID: activity.id)
        }
    }
}
