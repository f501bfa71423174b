// The APNs simulator's engine, continued: channel management (create, read, delete), as Apple's channel pages
// describe it. Split from SimulatorEngine.swift by what each part does.
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

extension SimulatorEngine {
    // MARK: - Channel management (sending-channel-management-requests-to-apns)

    func createChannel(bundleID: String, body: [UInt8], now: Date, requestID: String) throws(Rejection) -> Accepted {
        guard !body.isEmpty else { throw Rejection(.payloadEmpty) }
        guard let object = (try? JSONValue(parsing: body))?.objectValue else { throw Rejection(.badRequestPayload) }
        let known: Set = ["message-storage-policy", "push-type"]
        guard object.keys.allSatisfy(known.contains) else { throw Rejection(.badRequestParams) }
        guard let pushType = object["push-type"] else { throw Rejection(.missingPushType) }
        // Documented: "LiveActivity"; other clients send "liveactivity" (unconfirmed at Apple): any casing is read.
        guard let text = pushType.stringValue, text.lowercased() == "liveactivity" else { throw Rejection(.invalidPushType) }
        // Documented: an integer; other clients send the string "1" (unconfirmed at Apple): both are read.
        let policyValue = object["message-storage-policy"]
        guard let number = policyValue?.intValue ?? policyValue?.stringValue.flatMap({ Int64($0) }),
            let policy = SimulatorStoragePolicy(rawValue: Int(number))
        else {
            throw Rejection(.badRequestParams)
        }
        let channel = try state.withLock { state throws(Rejection) -> SimulatorChannel in
            guard state.channels.values.count(where: { $0.bundleID == bundleID }) < state.quota else {
                throw Rejection(.cannotCreateChannelConfig)
            }
            var id: String
            repeat { id = Data(SecureRandom.bytes(16)).base64EncodedString() } while state.channels[id] != nil
            let channel = SimulatorChannel(bundleID: bundleID, id: id, storagePolicy: policy, pushType: "LiveActivity", createdAt: now)
            state.channels[id] = channel
            state.channelOrder[id] = state.nextOrder
            state.nextOrder += 1
            return channel
        }
        let operation = ChannelOperation(kind: .create, bundleID: bundleID, channelID: channel.id, requestID: requestID, at: now)
        return Accepted(
            status: 201, headers: [SimulatorHeader.channelID: channel.id], record: .channel(operation), channelID: channel.id,
            channelsChanged: true)
    }

    func readChannel(bundleID: String, headers: SimulatorRequestHeaders, now: Date, requestID: String) throws(Rejection) -> Accepted {
        let id = try Self.channelID(headers)
        guard let channel = channel(id: id), channel.bundleID == bundleID else { throw Rejection(.channelNotRegistered) }
        let body = JSONValue.object([
            "message-storage-policy": .int(Int64(channel.storagePolicy.rawValue)), "push-type": .string(channel.pushType),
        ])
        let operation = ChannelOperation(kind: .read, bundleID: bundleID, channelID: id, requestID: requestID, at: now)
        return Accepted(
            status: 200, headers: [SimulatorHeader.contentType: "application/json"], body: body.jsonBytes,
            record: .channel(operation), channelID: id)
    }

    func deleteChannel(bundleID: String, headers: SimulatorRequestHeaders, now: Date, requestID: String) throws(Rejection) -> Accepted {
        let id = try Self.channelID(headers)
        let removed = state.withLock { state -> Bool in
            guard state.channels[id]?.bundleID == bundleID else { return false }
            state.channels[id] = nil
            state.channelOrder[id] = nil
            return true
        }
        guard removed else { throw Rejection(.channelNotRegistered) }
        let operation = ChannelOperation(kind: .delete, bundleID: bundleID, channelID: id, requestID: requestID, at: now)
        return Accepted(status: 204, record: .channel(operation), channelID: id, channelsChanged: true)
    }
}
