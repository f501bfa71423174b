// The operators' channel actions (`marquee channel recreate`, `delete`, `reconcile --dry-run`). They need no
// lease: every step is a transition guarded by the state read, performed by `ChannelRequests` at once (an
// operator's request does not wait for a parked app).
import Foundation
import MarqueeCore
import MarqueeStore

extension ChannelScheduler {
    /// `marquee channel recreate`: a new APNs channel for an event whose channel APNs lost or refused
    /// to create, or an operator deleted while it was live (`deleteChannel(force:)`). Activities already
    /// running stay on the old id; those started from now on use the new one.
    public func recreateChannel(eventID: Int) async throws -> ChannelRecord {
        guard var channel = try await channels.channels(eventID: eventID).first else {
            throw ChannelSchedulerError.channelNotFound("a channel of event \(eventID)")
        }
        // Deleted while live: a new channel row (the event's updates resume once it is open); lost or refused:
        // the same row, created again.
        var deletedWhileLive = false
        if channel.state == .lifecycle(.deleted) { deletedWhileLive = try await events.get(id: eventID)?.channelLost == true }
        if deletedWhileLive { channel = try await channels.createPlanned(eventID: eventID) }
        guard var lifecycle = channel.lifecycle,
            deletedWhileLive ? lifecycle.state == .planned : lifecycle.state == .lost || lifecycle.state == .createFailed
        else {
            throw ChannelSchedulerError.refused(
                "channel \(channel.id) of event \(eventID) is \(channel.state); only a lost or refused channel is recreated")
        }
        let before = lifecycle
        let action = deletedWhileLive ? try lifecycle.leadTimeReached() : try lifecycle.retryCreateRequested()
        var report = SweepReport()
        try await requests.perform(ChannelStep(channel: channel, before: before, after: lifecycle, action: action), fence: nil, report: &report)
        logger.info("channel recreated on an operator's request", ["channel": .int(channel.id), "event": .int(eventID)])
        return try await channels.get(id: channel.id) ?? channel
    }

    /// `marquee channel delete`: deletes the channel at APNs now. An open channel needs `force`
    /// (running activities stop getting updates); an unresolved create is refused until it settles. An event
    /// whose live channel went this way is flagged `channel_lost`, as when APNs loses one: its broadcasts stop,
    /// `status` lists it, and `recreateChannel` gives it a new channel.
    public func deleteChannel(id: Int, force: Bool) async throws -> ChannelRecord {
        guard let channel = try await channels.get(id: id) else { throw ChannelSchedulerError.channelNotFound("channel \(id)") }
        var report = SweepReport()
        if channel.state == .unknown {
            _ = try await requests.deleteUnknown(channel, fence: nil, report: &report)
        } else if let current = channel.lifecycle {
            var next = current
            let action: ChannelLifecycle.Action
            do {
                action = try next.deleteRequested(force: force)
            } catch {
                let hint =
                    current.state == .open || current.state == .ending
                    ? "it still carries the event's updates; end the event first, or force the delete"
                    : "its create is unresolved; try again once it settled"
                throw ChannelSchedulerError.refused("channel \(id) is \(current.state.rawValue): \(hint)")
            }
            try await requests.perform(ChannelStep(channel: channel, before: current, after: next, action: action), fence: nil, report: &report)
            if case .deleteChannel = action {
                if ChannelLifecycle.broadcastingStates.contains(current.state), let eventID = channel.eventID,
                    try await channels.get(id: id)?.state == .lifecycle(.deleted)
                {
                    try await channels.stopBroadcasting(eventID: eventID)
                    logger.warning(
                        "a live channel was deleted: its event is flagged channel_lost until 'marquee channel recreate'",
                        ["channel": .int(id), "event": .int(eventID)])
                }
            }
        }
        logger.info("channel deleted on an operator's request", ["channel": .int(id), "force": .bool(force)])
        return try await channels.get(id: id) ?? channel
    }

    /// Lists every app's channels at APNs and compares them with the database, changing nothing but
    /// the delivery rows of the list requests. Needs no lease.
    public func reconcilePreview() async throws -> [ReconcilePreview] { try await requests.reconcilePreview() }
}
