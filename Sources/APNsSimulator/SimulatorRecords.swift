// What the simulator accepted, kept in memory so tests can check exactly what Marquee sent,
// and the channels it knows, which the host also writes to its state folder.
import Foundation
import MarqueeCore
import Network

/// One broadcast channel the simulator created.
public struct SimulatorChannel: Sendable, Hashable, Codable {
    public var bundleID: String
    /// The base64 id issued on create.
    public var id: String
    public var storagePolicy: SimulatorStoragePolicy
    /// `LiveActivity`, as Apple documents it (whatever casing the create used).
    public var pushType: String
    public var createdAt: Date

    public init(bundleID: String, id: String, storagePolicy: SimulatorStoragePolicy, pushType: String = "LiveActivity", createdAt: Date) {
        self.bundleID = bundleID
        self.id = id
        self.storagePolicy = storagePolicy
        self.pushType = pushType
        self.createdAt = createdAt
    }
}

/// A broadcast the simulator accepted.
public struct ReceivedBroadcast: Sendable {
    public var bundleID: String
    public var channelID: String
    public var priority: Int
    public var expiration: Int
    /// The request's headers, without `authorization`.
    public var headers: HTTPHeaders { withoutAuthorization(requestHeaders) }
    /// The request's headers as they came: kept without a copy, the provider token is dropped when they are read.
    var requestHeaders: HTTPHeaders
    public var payload: [UInt8]
    public var requestID: String
    public var uniqueID: String
    public var receivedAt: Date

    /// The payload as JSON (it was checked to parse before it was accepted).
    public var json: JSONValue { (try? JSONValue(parsing: payload)) ?? .null }
}

/// A device-token push the simulator accepted (Live Activity update, end or push-to-start).
public struct ReceivedDevicePush: Sendable {
    /// The whole token, lowercase hex (tests need it; logs only ever show a prefix).
    public var deviceToken: String
    public var topic: String
    public var priority: Int
    public var expiration: Int?
    public var collapseID: String?
    /// The request's headers, without `authorization`.
    public var headers: HTTPHeaders { withoutAuthorization(requestHeaders) }
    /// The request's headers as they came: kept without a copy, the provider token is dropped when they are read.
    var requestHeaders: HTTPHeaders
    public var payload: [UInt8]
    public var apnsID: String
    public var receivedAt: Date

    /// The payload as JSON; `.null` when it does not parse (Apple documents no rejection of it on device pushes).
    public var json: JSONValue { (try? JSONValue(parsing: payload)) ?? .null }
}

private func withoutAuthorization(_ headers: HTTPHeaders) -> HTTPHeaders {
    var copy = headers
    copy.remove(SimulatorHeader.authorization)
    return copy
}

/// A channel-management request the simulator accepted.
public struct ChannelOperation: Sendable, Hashable {
    /// Which management call.
    public enum Kind: String, Sendable, Hashable {
        case create, read, delete, list
    }

    public var kind: Kind
    public var bundleID: String
    /// The channel concerned; nil for list.
    public var channelID: String?
    public var requestID: String
    public var at: Date
}

/// One accepted request, in arrival order.
public enum SimulatorRecord: Sendable {
    case broadcast(ReceivedBroadcast)
    case devicePush(ReceivedDevicePush)
    case channel(ChannelOperation)
}

/// A small seeded generator (SplitMix64) so fault injection repeats run after run.
struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform double in [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
