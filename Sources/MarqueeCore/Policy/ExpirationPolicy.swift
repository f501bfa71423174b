import Foundation

/// A channel's message storage policy, fixed when the channel is created.
public enum MessageStoragePolicy: String, Sendable, Codable, CaseIterable {
    /// No message stored: only devices connected at send time get it; `apns-expiration` must be 0.
    case notStored = "none"
    /// APNs keeps the most recent message for offline devices, for at most 8 hours.
    case mostRecent

    /// The `message-storage-policy` value in a create-channel request.
    public var apnsValue: Int {
        switch self {
        case .notStored: 0
        case .mostRecent: 1
        }
    }

    public init?(apnsValue: Int) {
        switch apnsValue {
        case 0: self = .notStored
        case 1: self = .mostRecent
        default: return nil
        }
    }
}

/// The `apns-expiration` of a broadcast: 0 without storage, else now plus a TTL of at most 8 hours.
public struct ExpirationPolicy: Sendable, Equatable {
    /// APNs stores a message at most 8 hours.
    public static let maximumTimeToLive: TimeInterval = 8 * 3600

    /// Clamped to 0...8 hours.
    public let timeToLive: TimeInterval

    public init(timeToLive: TimeInterval = 4 * 3600) {
        self.timeToLive = min(max(timeToLive, 0), Self.maximumTimeToLive)
    }

    /// The header value in Unix seconds.
    public func expiration(for storage: MessageStoragePolicy, now: Date) -> Int64 {
        switch storage {
        case .notStored: 0
        case .mostRecent: Int64((now.timeIntervalSince1970 + timeToLive).rounded(.down))
        }
    }
}
