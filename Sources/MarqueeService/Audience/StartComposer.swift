// The payload and expiration of a window of push-to-starts, built once per route (split from StartFanOut.swift).
import Foundation
import MarqueeCore
import MarqueeStore

/// The start payload of one chunk (docs/apns.md#push-to-start): `event: start` with the last broadcast's
/// content-state and aps.timestamp, the attributes, the alert, and the subscription of its route.
struct StartComposer: Sendable {
    let content: StartContent
    let alert: LiveActivityAlert
    let ttl: TimeInterval

    /// The start of `route` sent at `sentAt`: its stale date and relevance are an update's under the event's
    /// freshness policy (a start's own alert does not boost it; the channel's last alert does).
    func body(route: StartRoute, sentAt: Date) throws -> [UInt8] {
        let subscription: StartSubscription? =
            switch route {
            case .channel: content.channelID.map { .channel($0) }
            case .token: .pushToken
            case .plain: nil
            }
        let fields = content.freshness.fields(
            for: .update, explicit: SendTimeFields(staleDate: content.staleDate, relevanceScore: content.relevanceScore),
            carriesAlert: false, lastAlertAt: content.lastAlertAt, sentAt: sentAt)
        return try LiveActivityPayload.start(
            timestamp: content.apsTimestamp, attributesType: content.attributesType, attributes: content.attributes,
            contentState: content.contentState, alert: alert, subscription: subscription, staleDate: fields.staleDate,
            relevanceScore: fields.relevanceScore
        ).body(within: .device)
    }

    /// `min(now + ttl, endsAt)` in Unix seconds: APNs must not keep a start for an offline phone past the event.
    func expiration(now: Date) -> Int64 {
        var until = now.addingTimeInterval(ttl)
        if let endsAt = content.endsAt { until = min(until, endsAt) }
        return max(1, Int64(until.timeIntervalSince1970.rounded(.down)))
    }
}
