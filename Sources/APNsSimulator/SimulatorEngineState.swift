// The APNs simulator's engine, continued: its records and state, for tests and the host (what it received, its
// channels, quota and latency, the rejections a test scripts). Split from SimulatorEngine.swift by what each part does.
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

extension SimulatorEngine {
    // MARK: - Records and state, for tests and the host

    /// Every accepted request still kept (the last `recordLimit`), oldest first.
    public var received: [SimulatorRecord] { state.withLock { $0.records.records } }

    /// Accepted broadcasts, oldest first.
    public var broadcasts: [ReceivedBroadcast] {
        received.compactMap { if case .broadcast(let broadcast) = $0 { broadcast } else { nil } }
    }

    /// Accepted broadcasts on one channel, oldest first.
    public func broadcasts(for channelID: String) -> [ReceivedBroadcast] {
        broadcasts.filter { $0.channelID == channelID }
    }

    /// Accepted device pushes, oldest first.
    public var devicePushes: [ReceivedDevicePush] {
        received.compactMap { if case .devicePush(let push) = $0 { push } else { nil } }
    }

    /// Accepted device pushes to one token (hex, any case), oldest first.
    public func devicePushes(to deviceToken: String) -> [ReceivedDevicePush] {
        devicePushes.filter { $0.deviceToken == deviceToken.lowercased() }
    }

    /// Accepted channel-management requests, oldest first.
    public var channelOperations: [ChannelOperation] {
        received.compactMap { if case .channel(let operation) = $0 { operation } else { nil } }
    }

    /// Forgets the accepted requests (channels stay).
    public func clearRecords() { state.withLock { $0.records.removeAll() } }

    /// Answers so far by HTTP status (including rejections and faults; not the dropped ones).
    public var statusCounts: [Int: Int] { state.withLock { $0.statusCounts } }

    /// Accepted requests answered with a stream reset (`--drop-answers`).
    public var droppedAnswers: Int { state.withLock { $0.droppedAnswers } }
    /// Answers held back by added latency now.
    public var inFlight: Int { answersInFlight.load(ordering: .relaxed) }
    /// Requests received whose connection closed before their answer went (`--latency-ms`): in flight when the
    /// client went away.
    public var inFlightAtDisconnect: Int { unansweredAtDisconnect.load(ordering: .relaxed) }

    /// The live channels, optionally of one bundle id, oldest first.
    public func channels(bundleID: String? = nil) -> [SimulatorChannel] {
        state.withLock { state in
            state.channels.values.filter { bundleID == nil || $0.bundleID == bundleID }
                .sorted { state.channelOrder[$0.id, default: 0] < state.channelOrder[$1.id, default: 0] }
        }
    }

    /// One live channel.
    public func channel(id: String) -> SimulatorChannel? { state.withLock { $0.channels[id] } }

    /// Replaces the channels (the host loads them from its state folder at start); lists keep the given order.
    public func restoreChannels(_ channels: [SimulatorChannel]) {
        state.withLock { state in
            state.channels = [:]
            state.channelOrder = [:]
            state.nextOrder = 0
            for channel in channels where state.channels[channel.id] == nil {
                state.channels[channel.id] = channel
                state.channelOrder[channel.id] = state.nextOrder
                state.nextOrder += 1
            }
        }
    }

    /// Channels allowed per bundle id from now on; existing channels stay even above it.
    public var channelQuota: Int {
        get { state.withLock { $0.quota } }
        set { state.withLock { $0.quota = newValue } }
    }

    /// Added latency per answer from now on (the configuration's at the start); answers already delayed keep theirs.
    public var latency: ClosedRange<Duration> {
        get { state.withLock { $0.latency } }
        set { state.withLock { $0.latency = newValue } }
    }

    /// Answers the next request of `api` (once it has passed the path, method and token checks) with `reason`, as that
    /// API spells it; several are answered in order. False, and nothing scripted, when `api`'s table has no `reason`.
    @discardableResult
    public func rejectNext(_ reason: SimulatorReason, on api: SimulatorAPI) -> Bool {
        guard api.answer(for: reason) != nil else { return false }
        state.withLock { state in
            state.scripted[api, default: []].append(reason)
            scriptedCount.add(1, ordering: .releasing)
        }
        return true
    }

    /// Answers every request of `api` (once it has passed the path, method and token checks) with `reason` until
    /// `stopRejecting(on:)`: a revoked key, say. False, and nothing changed, when `api`'s table has no `reason`.
    @discardableResult
    public func rejectEvery(_ reason: SimulatorReason, on api: SimulatorAPI) -> Bool {
        guard api.answer(for: reason) != nil else { return false }
        state.withLock { state in
            if state.standing.updateValue(reason, forKey: api) == nil { scriptedCount.add(1, ordering: .releasing) }
        }
        return true
    }

    /// Ends `rejectEvery(_:on:)` and drops the answers `rejectNext(_:on:)` scripted for `api`.
    public func stopRejecting(on api: SimulatorAPI) {
        state.withLock { state in
            let dropped = (state.scripted.removeValue(forKey: api)?.count ?? 0) + (state.standing.removeValue(forKey: api) == nil ? 0 : 1)
            if dropped > 0 { scriptedCount.subtract(dropped, ordering: .releasing) }
        }
    }

    /// From now on, pushes to `deviceToken` (hex) are answered 410 `Unregistered` with `at` (default: now) as timestamp.
    public func markDeviceTokenInvalid(_ deviceToken: String, at date: Date? = nil) {
        let date = date ?? clock.now
        state.withLock { $0.invalidTokens[deviceToken.lowercased()] = date }
    }
}
