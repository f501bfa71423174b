// The start fan-out's values as the store reads and writes them: runs, chunks, members, what a start carries, and
// the rows of starts skipped, marked and answered, and the reports of runs.
import Foundation
import MarqueeCore

/// A run just created.
public struct CreatedStartRun: Sendable, Equatable {
    public let id: Int
    public let eventID: Int
    public let state: StartRunState
    public let skipReason: StartRunSkipReason?
}

/// What `advance` did to a run.
public struct StartRunAdvance: Sendable, Equatable {
    public let step: StartRunStep
    public let kind: StartRunKind
    /// Seconds from the run's start to its last accepted start, when this step ended its first pass.
    public let firstPassLag: Double?
}

/// A chunk this instance holds.
public struct ClaimedStartChunk: Sendable, Equatable {
    public let id: Int
    public let runID: Int
    public let eventID: Int
    public let appID: Int
    /// The installations (after, through].
    public let after: Int
    public let through: Int
    public let attempts: Int
    public let runAlert: JSONValue?
    public let channelWaitUntil: Date
    /// The audience round of its run (an activity of this round holds back a start).
    public var audienceRound = 1
}

/// The app of a start, as APNs addresses it.
public struct StartApp: Sendable, Equatable {
    public let bundleID: String
    public let environment: String
}

/// One member of a chunk: the planner's facts and what the store needs to act on them.
public struct StartChunkMember: Sendable, Equatable {
    public let candidate: StartCandidate
    /// This run's planned start of the installation (a retry), whatever its token.
    public let plannedStartID: Int?
    public let plannedToken: String?
    public let osMajor: Int?
}

/// What a start of an event carries, and the event's status.
public struct StartContent: Sendable {
    public let eventStatus: EventStatus
    public let app: StartApp
    public let attributesType: String
    public let attributes: JSONValue
    /// The last broadcast's content-state (or the event's latest before the first broadcast) and the
    /// aps.timestamp a start carries.
    public let contentState: JSONValue
    public let apsTimestamp: Int64
    /// The event's open channel, as APNs names it.
    public let channelID: String?
    /// The run's alert, else the event's.
    public let startAlert: JSONValue?
    public let staleDate: Date?
    public let relevanceScore: Double?
    public let endsAt: Date?
    /// The event's freshness policy and when its channel last broadcast an alert.
    public var freshness: FreshnessPolicy = .defaults
    public var lastAlertAt: Date?
}

/// A start the run decided not to send.
public struct SkippedStart: Sendable, Equatable {
    public let installation: Int
    public let token: String
    public let osMajor: Int?
    public let reason: StartSkipReason
    /// The planned start it settles (else a new row).
    public let plannedStartID: Int?

    public init(installation: Int, token: String, osMajor: Int?, reason: StartSkipReason, plannedStartID: Int?) {
        self.installation = installation
        self.token = token
        self.osMajor = osMajor
        self.reason = reason
        self.plannedStartID = plannedStartID
    }
}

/// A start to mark `sending`.
public struct PlannedStart: Sendable, Equatable {
    public let installation: Int
    public let token: String
    public let osMajor: Int?
    public let route: StartRoute
    public let plannedStartID: Int?

    public init(installation: Int, token: String, osMajor: Int?, route: StartRoute, plannedStartID: Int?) {
        self.installation = installation
        self.token = token
        self.osMajor = osMajor
        self.route = route
        self.plannedStartID = plannedStartID
    }
}

/// A start marked to go: send it now.
public struct SendingStart: Sendable, Equatable {
    public let installation: Int
    public let token: String
    public let osMajor: Int?
    public let route: StartRoute
    /// 1 for the first send, which its window names; a retry is marked in its planned start's row.
    public let attempt: Int
    /// The planned start a retry is marked in, else nil.
    public let retriedStartID: Int?

    public init(installation: Int, token: String, osMajor: Int?, route: StartRoute, attempt: Int, retriedStartID: Int?) {
        self.installation = installation
        self.token = token
        self.osMajor = osMajor
        self.route = route
        self.attempt = attempt
        self.retriedStartID = retriedStartID
    }
}

/// A send window marked just before it goes (Sql/0042): its row, naming its first sends, and every start it sends.
public struct MarkedWindow: Sendable, Equatable {
    /// The window's row in `start_windows`; nil when it sends retries only.
    public let id: Int?
    /// When it was marked: its first sends' `sent_at`.
    public let markedAt: Date
    public let starts: [SendingStart]
}

/// What to write for one answered start.
public struct StartAnswerRecord: Sendable, Equatable {
    public let start: SendingStart
    public let state: StartState
    public let reason: String?
    public let status: Int?
    public let retryAfter: TimeInterval?
    public let apnsUniqueID: String?

    public init(start: SendingStart, state: StartState, reason: String?, status: Int?, retryAfter: TimeInterval?, apnsUniqueID: String?) {
        self.start = start
        self.state = state
        self.reason = reason
        self.status = status
        self.retryAfter = retryAfter
        self.apnsUniqueID = apnsUniqueID
    }
}

/// A run and its counts, as `GET /v1/events/{id}/starts` shows it.
public struct StartRunReport: Sendable {
    public let id: Int
    public let eventID: Int
    public let kind: StartRunKind
    public let state: StartRunState
    public let skipReason: StartRunSkipReason?
    public let topics: [String]?
    public let dueAt: Date
    public let startedAt: Date
    public let firstPassDoneAt: Date?
    public let finishedAt: Date?
    public let lastAcceptedAt: Date?
    public let estimatedAudience: Int
    /// The database's time of the read.
    public let now: Date
    public var counts = StartCounts()
    /// Adopted starts by OS major version (`unknown`: not told).
    public var adoption: [String: Int] = [:]
}

/// A run's starts by state and reason.
public struct StartCounts: Sendable, Equatable {
    public var audience = 0
    public var notStartable = 0
    public var planned = 0
    public var sending = 0
    public var accepted = 0
    public var unknown = 0
    /// Sent or sending with `input-push-token` because the event had no channel.
    public var noChannel = 0
    public var rejected: [String: Int] = [:]
    public var skipped: [String: Int] = [:]

    public init() {}

    /// Members settled: answered, skipped or not startable.
    public var decided: Int { accepted + unknown + rejected.values.reduce(0, +) + skipped.values.reduce(0, +) + notStartable }

    mutating func add(state: StartState, reason: String?, route: StartRoute?, count: Int) {
        audience += count
        if route == .token && StartLifecycle.startedStates.contains(state) { noChannel += count }
        switch state {
        case .planned: planned += count
        case .sending: sending += count
        case .accepted: accepted += count
        case .unknown: unknown += count
        case .rejected: rejected[reason ?? "unknown", default: 0] += count
        case .skipped:
            if reason == StartSkipReason.notStartable.rawValue {
                notStartable += count
            } else {
                skipped[reason ?? "unknown", default: 0] += count
            }
        }
    }
}
