// What the status page and `marquee status` read (scope `status`, which an `admin` key includes): `GET /v1/status`,
// the figures an operator checks first (quota per app, parked credentials, the outbox, lost channels, the last
// errors, start runs and mirroring), and `GET /v1/status/board`, the rest of a match day's picture (live and
// upcoming events, broadcasts and their latency histogram, APNs errors by reason, start runs in progress with their
// counts and ETA, the scheduler's leader). Both read the database, so every instance answers the same.
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `GET /v1/status` and `GET /v1/status/board`.
public struct StatusRoutes: APIRoutes {
    private let status: StatusRepository
    private let board: StatusBoardRepository
    private let starts: StartRepository
    private let scheduler: ChannelScheduler

    public init(pool: PostgresPool, scheduler: ChannelScheduler) {
        status = StatusRepository(pool: pool)
        board = StatusBoardRepository(pool: pool)
        starts = StartRepository(pool: pool)
        self.scheduler = scheduler
    }

    public func register(in table: inout RouteTable) {
        table.add("GET", "/v1/status", access: .scope(.status)) { [status, scheduler] _ in
            let current = try await status.status()
            let quota = scheduler.configuration.quota.limit
            return .json([
                "apps": .array(
                    current.apps.map { app in
                        [
                            "app": .int(Int64(app.appID)), "bundleId": .string(app.bundleID), "environment": .string(app.environment),
                            "quota": .int(Int64(quota)), "inUse": .int(Int64(app.quotaInUse)),
                            "channelsByState": .object(
                                app.channelsByState.sorted { $0.key < $1.key }.reduce(into: JSONObject()) {
                                    $0[$1.key] = .int(Int64($1.value))
                                }),
                            "credentialsFault": app.credentialsPark.map { park -> JSONValue in
                                [
                                    "reason": .string(park.reason), "since": EventRoutes.json(park.since), "strikes": .int(Int64(park.strikes)),
                                    "retryAt": EventRoutes.json(park.retryAt), "lastRefusedAt": EventRoutes.json(park.lastAt),
                                ]
                            } ?? .null,
                        ]
                    }),
                "outboxBacklog": .int(Int64(current.outboxBacklog)),
                "oldestOutboxAgeSeconds": current.oldestOutboxAge.map(JSONValue.double) ?? .null,
                "lostChannels": .array(
                    current.lostChannels.map { lost in
                        [
                            "event": .int(Int64(lost.eventID)), "app": .int(Int64(lost.appID)), "externalId": .string(lost.externalID),
                            "channel": ChannelRoutes.optional(lost.channelID), "apnsChannelId": lost.apnsChannelID.map(JSONValue.string) ?? .null,
                            "lastError": lost.lastError.map(JSONValue.string) ?? .null,
                        ]
                    }),
                "lastErrors": .array(current.lastErrors.map(ChannelRoutes.json)),
                "startRunsInProgress": .int(Int64(current.startRunsInFirstPass)),
                "mirroring": [
                    "passesRunning": .int(Int64(current.mirrorPassesRunning)),
                    "oldestPassAgeSeconds": current.oldestMirrorPassAge.map(JSONValue.double) ?? .null,
                ],
            ])
        }
        table.add("GET", "/v1/status/board", access: .scope(.status)) { [self] _ in
            .json(try await boardJSON())
        }
    }

    private func boardJSON() async throws -> JSONValue {
        let current = try await board.board(leaseName: scheduler.configuration.leaseName)
        var runs: [JSONValue] = []
        for event in current.eventsWithOpenStartRuns {
            for run in try await starts.runs(eventID: event) where StartRunState.openStates.contains(run.state) {
                runs.append(StartRoutes.json(run))
            }
        }
        let accepted = current.broadcastsAccepted
        /// The smallest bound under which `share` of the broadcasts fell; nil without broadcasts or beyond the last bound.
        func quantile(_ share: Double) -> JSONValue {
            guard accepted > 0 else { return .null }
            return current.latencyBuckets.first { Double($0.count) >= share * Double(accepted) }.map { .double($0.bound) } ?? .null
        }
        return [
            "events": .array(
                current.events.map { event in
                    [
                        "id": .int(Int64(event.id)), "app": .int(Int64(event.appID)), "externalId": .string(event.externalID),
                        "kind": .string(event.kind), "status": .string(event.status.rawValue), "startsAt": EventRoutes.json(event.startsAt),
                        "endsAt": EventRoutes.json(event.endsAt), "channelState": event.channelState.map(JSONValue.string) ?? .null,
                        "channelLost": .bool(event.channelLost),
                    ]
                }),
            "broadcasts": [
                "windowSeconds": .double(current.window), "accepted": .int(Int64(accepted)),
                "perSecond": .double((Double(accepted) / current.window * 100).rounded() / 100),
                "latency": [
                    "buckets": .array(current.latencyBuckets.map { ["le": .double($0.bound), "count": .int(Int64($0.count))] }),
                    "p50": quantile(0.5), "p99": quantile(0.99),
                ],
            ],
            "errorsByReason": .array(
                current.errorsByReason.map { error in
                    [
                        "reason": .string(error.reason), "status": ChannelRoutes.optional(error.status), "count": .int(Int64(error.count)),
                        "lastAt": EventRoutes.json(error.lastAt),
                    ]
                }),
            "startRuns": .array(runs),
            "scheduler": ["leader": current.schedulerLeader.map(JSONValue.string) ?? .null],
        ]
    }
}
