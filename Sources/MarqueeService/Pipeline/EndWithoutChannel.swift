// An event that took its end while no channel can carry it (none, planned, or refused for good) has no
// activity to reach: its channel is done, the event ends at once and its pending updates are recorded unsent.
// The ingest of an `end` and the scheduler's automatic end both ask this; ChannelLifecycle decides whether the
// channel can carry the end (an open one does; an unresolved create waits for its answer).
import Foundation
import MarqueeCore
import MarqueeStore

/// Ends an event whose channel cannot carry its end.
struct EndWithoutChannel: Sendable {
    let channels: ChannelRepository
    let events: EventRepository

    /// Ends the event if its current channel cannot carry the end; returns whether it did. A stale channel
    /// (another writer moved it, e.g. the scheduler started its create) leaves the end to the dispatcher.
    @discardableResult
    func endIfNoChannelCarries(eventID: Int, fence: LeaseGrant? = nil, now: Date? = nil) async throws -> Bool {
        let current = try await channels.channels(eventID: eventID).first { record in
            record.lifecycle.map { ChannelLifecycle.currentStates.contains($0.state) } ?? false
        }
        if let current, let lifecycle = current.lifecycle {
            var ended = lifecycle
            guard (try? ended.endRequested()) == ChannelLifecycle.Action.nothing, ended.state == .deleted,
                try await channels.transition(channelID: current.id, from: lifecycle, to: ended, fence: fence, now: now)
            else { return false }
        }
        return try await events.endWithoutChannel(eventID: eventID)
    }
}
