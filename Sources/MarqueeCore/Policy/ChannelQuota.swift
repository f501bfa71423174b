/// APNs allows 10,000 channels per app and environment; creating one past that fails. The count
/// (channels Marquee holds for one app and environment) comes from the store.
public struct ChannelQuota: Sendable, Equatable {
    public var limit: Int
    /// Warn once the channels in use after a create reach this share of the limit.
    public var warningFraction: Double

    public init(limit: Int = 10_000, warningFraction: Double = 0.8) {
        self.limit = limit
        self.warningFraction = warningFraction
    }

    /// How things stand after one more channel is created.
    public enum Status: Sendable, Equatable {
        case ok
        case nearLimit(inUse: Int, limit: Int)
    }

    /// Checks whether one more channel may be created while `inUse` channels exist.
    public func admitCreate(inUse: Int) throws(ChannelQuotaExhausted) -> Status {
        guard inUse < limit else { throw ChannelQuotaExhausted(inUse: inUse, limit: limit) }
        let after = inUse + 1
        return Double(after) >= Double(limit) * warningFraction ? .nearLimit(inUse: after, limit: limit) : .ok
    }
}

/// No channel may be created: the app and environment hold the maximum.
public struct ChannelQuotaExhausted: Error, Equatable, CustomStringConvertible {
    public var inUse: Int
    public var limit: Int

    public var description: String {
        "channel quota exhausted: \(inUse) of \(limit) channels in use for this app and environment; "
            + "delete ended channels or reconcile unknown ones before creating more"
    }
}
