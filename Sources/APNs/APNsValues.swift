// Validated values that go into APNs requests. Each checks what the caller gives once, at construction,
// so a request built from them is well-formed and APNs' 400s mean something about the data, not our encoding.
import Crypto
import Foundation
import MarqueeCore
import Synchronization

/// A value given to build an APNs request was malformed; fix the value, retrying will not help.
public enum APNsRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidRequestID(String)
    case invalidChannelID(String)
    case invalidDeviceToken(String)
    case invalidBundleID(String)
    case invalidPriority(Int)
    case invalidExpiration(Int)
    case invalidCollapseID(String)
    case emptyPayload
    case payloadTooLarge(size: Int, limit: Int)

    public var description: String {
        switch self {
        case .invalidRequestID(let value): "not a canonical UUID (8-4-4-4-12 hex): \(value)"
        case .invalidChannelID(let value): "not a base64 channel id: \(value)"
        case .invalidDeviceToken(let reason): "invalid device token: \(reason)"
        case .invalidBundleID(let value):
            "invalid bundle id \(value): letters, digits, '-' and '.', without the .push-type.liveactivity suffix"
        case .invalidPriority(let value): "invalid apns-priority \(value): broadcasts take 10, 5 or 1; device pushes 10 or 5"
        case .invalidExpiration(let value): "invalid apns-expiration \(value): epoch seconds, 0 for no storage"
        case .invalidCollapseID(let value): "invalid apns-collapse-id \(value): 1 to 64 bytes"
        case .emptyPayload: "empty payload: APNs rejects it with PayloadEmpty"
        case .payloadTooLarge(let size, let limit): "payload of \(size) bytes exceeds APNs' limit of \(limit) bytes"
        }
    }
}

/// A canonical UUID as APNs headers carry it (`apns-request-id`, `apns-id`), always lowercase when sent.
public struct APNsRequestID: Sendable, Hashable, CustomStringConvertible {
    public let value: String

    public init(_ uuid: UUID) { value = uuid.uuidString.lowercased() }

    /// Accepts the canonical 8-4-4-4-12 form in either case.
    public init(_ text: String) throws(APNsRequestError) {
        let utf8 = Array(text.utf8)
        let dashes = [8, 13, 18, 23]
        guard utf8.count == 36,
            utf8.indices.allSatisfy({ index in
                dashes.contains(index) ? utf8[index] == UInt8(ascii: "-") : Self.hexDigits.contains(utf8[index])
            })
        else { throw .invalidRequestID(text) }
        value = text.lowercased()
    }

    private static let hexDigits = Set("0123456789abcdefABCDEF".utf8)

    /// A new random (version 4) id. Request ids need to be unique, not secret, so they come from SplitMix64
    /// over a counter seeded once from the system generator: no system call per id (Foundation's `UUID()` on
    /// Linux opens /dev/urandom on every call, a tenth of the simulator's time under load).
    public static func random() -> APNsRequestID {
        let halves = (RequestIDSource.next(), RequestIDSource.next())
        // One allocation: the 36 characters are written straight into the string's storage.
        let text = String(unsafeUninitializedCapacity: 36) { buffer in
            withUnsafeBytes(of: halves) { raw in
                let digits: StaticString = "0123456789abcdef"
                var out = 0
                for index in 0..<16 {
                    var byte = raw[index]
                    if index == 6 { byte = (byte & 0x0F) | 0x40 }
                    if index == 8 { byte = (byte & 0x3F) | 0x80 }
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        buffer[out] = UInt8(ascii: "-")
                        out += 1
                    }
                    buffer[out] = digits.utf8Start[Int(byte >> 4)]
                    buffer[out + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    out += 2
                }
                return out
            }
        }
        return APNsRequestID(validated: text)
    }

    private init(validated value: String) { self.value = value }

    public var description: String { value }
}

/// SplitMix64 over a process-wide counter: distinct counter values give distinct outputs.
private enum RequestIDSource {
    static let counter = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    static func next() -> UInt64 {
        var value = counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}

/// A broadcast channel id: the base64 string APNs returned on create. Its length is not assumed.
public struct APNsChannelID: Sendable, Hashable, CustomStringConvertible {
    public let value: String

    /// Accepts standard base64 (padding included), as APNs issues channel ids.
    public init(_ text: String) throws(APNsRequestError) {
        guard !text.isEmpty, text.utf8.allSatisfy({ Self.alphabet.contains($0) }), Data(base64Encoded: text) != nil else {
            throw .invalidChannelID(text)
        }
        value = text
    }

    /// An id as APNs sent it, kept verbatim.
    init(received text: String) { value = text }

    static let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=".utf8)

    public var description: String { value }
}

/// A device token (update or push-to-start) in lowercase hex. Its description shows only a prefix, for logs.
public struct APNsDeviceToken: Sendable, Hashable, CustomStringConvertible {
    /// The full token, lowercase hex, as it goes into `/3/device/<token>`.
    public let hex: String

    /// Accepts what `DeviceTokenText` accepts: 64 to 200 hexadecimal characters (APNs tokens are usually 32
    /// bytes, but their length is not fixed), the same rule the API applies to registered tokens.
    public init(hex text: String) throws(APNsRequestError) {
        switch DeviceTokenText.validate(text) {
        case .success(let lowercased): hex = lowercased
        case .failure(let error): throw .invalidDeviceToken(error.description)
        }
    }

    public var description: String { String(hex.prefix(8)) + "…" }
}

/// `apns-priority`: when APNs delivers and whether it counts against the device's budget.
public enum APNsPriority: Int, Sendable, Hashable, CaseIterable, Codable {
    /// Deliver immediately; counts against the Live Activity budget.
    case immediate = 10
    /// Deliver considering power; not charged to the budget.
    case powerConsidered = 5
    /// Prioritise the device's power, never wake it (broadcasts only).
    case low = 1

    /// Parses 10, 5 or 1.
    public init(validating value: Int) throws(APNsRequestError) {
        guard let priority = APNsPriority(rawValue: value) else { throw .invalidPriority(value) }
        self = priority
    }
}

/// A channel's message storage policy, fixed at creation.
public enum APNsMessageStoragePolicy: Int, Sendable, Hashable, CaseIterable, Codable {
    /// Only connected devices receive a broadcast; `apns-expiration` must be 0.
    case noMessageStored = 0
    /// The most recent message is kept for offline devices, up to 8 hours.
    case mostRecentMessageStored = 1
}
