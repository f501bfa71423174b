// The life of one push-to-start, as a value: one row per (event, installation, run), recorded before it
// is sent, so no device is started twice for one event. A duplicated Live Activity is worse than a missing
// one (the app can still start a missing one), so a start is sent again only after an answer that proves
// APNs did nothing; after a timeout, a reset of a written request, or a crash before the answer was
// recorded, it is `unknown`, counted and never resent (docs/apns.md#push-to-start).
//
//   planned → sending → accepted | rejected | unknown
//   planned → skipped                       (the run decided not to send it: a cap, a limit, no alert)
//   sending → planned                       (the answer proved APNs did nothing: it may go again)
// accepted, rejected, unknown and skipped are final.

/// Where one start stands (`starts.state`). Raw values are what the store persists.
public enum StartState: String, Sendable, Codable, CaseIterable {
    /// Chosen for the run; not yet handed to APNs.
    case planned
    /// Marked just before the send; an instance that dies here leaves it for recovery to call `unknown`.
    case sending
    /// APNs answered 200. (Not adoption: only the app's registration of the activity shows that.)
    case accepted
    /// APNs refused it (400, 403, 410...): not delivered.
    case rejected
    /// Nobody can tell whether APNs took it: never resent.
    case unknown
    /// Not sent by decision of the run.
    case skipped
}

/// The state machine of one start.
public enum StartLifecycle {
    /// What happened to a start.
    public enum Event: Sendable, Equatable {
        /// Its batch is about to be sent.
        case sendBegan
        /// APNs answered 200.
        case accepted
        /// APNs refused it with a final answer (the reason is recorded).
        case rejected
        /// The answer proves APNs did nothing (429, 500, 503, `ExpiredProviderToken`, a stream above GOAWAY's
        /// last id, `REFUSED_STREAM`, a connection that never carried it).
        case notDone
        /// A timeout, a reset or an I/O error after the request was written.
        case outcomeUnknown
        /// Recovery found it `sending` under a holder that is gone (a crash before the answer was recorded).
        case holderLost
        /// The run decided not to send it.
        case skipped
    }

    /// The state `event` leads to from `state`, or nil when it does not apply there.
    public static func transition(from state: StartState, on event: Event) -> StartState? {
        switch (state, event) {
        case (.planned, .sendBegan): .sending
        case (.planned, .skipped): .skipped
        case (.sending, .accepted): .accepted
        case (.sending, .rejected): .rejected
        case (.sending, .notDone): .planned
        case (.sending, .outcomeUnknown), (.sending, .holderLost): .unknown
        default: nil
        }
    }

    /// States a run still has work in.
    public static let openStates: [StartState] = StartState.allCases.filter { transition(from: $0, on: .sendBegan) != nil || $0 == .sending }
    /// States no event leaves.
    public static let finalStates: [StartState] = StartState.allCases.filter { state in
        [Event.sendBegan, .accepted, .rejected, .notDone, .outcomeUnknown, .holderLost, .skipped].allSatisfy {
            transition(from: state, on: $0) == nil
        }
    }
    /// States that count as "started" for the event: the installation is not started again by a later run.
    public static let startedStates: [StartState] = [.sending, .accepted, .unknown]
}

/// How one installation of an event's audience is started, decided by its OS version and the event's channel
/// (docs/apns.md#device-versions).
public enum StartPath: Sendable, Equatable {
    /// iOS 18 and later: a start with `input-push-channel`, so the activity joins the event's channel.
    case channel(String)
    /// iOS 17.2 to 17.x (or no version told): a plain start; the activity's update token reaches the app,
    /// which registers it, and mirroring keeps it current. `input-push-channel` and `input-push-token` are
    /// iOS 18 keys.
    case plain
    /// iOS 18 and later while the event has no channel yet: wait for it.
    case waitForChannel
    /// iOS 18 and later once the wait for a channel is over: a start with `input-push-token: 1`, served by
    /// mirroring, counted `no_channel`.
    case tokenRequested
    /// Below iOS 17.2: push-to-start does not exist there.
    case notStartable

    /// The path for a device on `os` (nil: not told), with the event's open channel (nil: none yet), once
    /// the wait for a channel has or has not ended.
    public static func decide(os: OSVersion?, channelID: String?, channelWaitEnded: Bool) -> StartPath {
        guard let os else { return .plain }
        if os < .pushToStart { return .notStartable }
        if os < .channels { return .plain }
        if let channelID { return .channel(channelID) }
        return channelWaitEnded ? .tokenRequested : .waitForChannel
    }
}
