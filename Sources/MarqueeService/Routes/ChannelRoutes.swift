// Channels, for operators (`marquee channel ...`): list and show them, delete or recreate one on an
// operator's word, reconcile with APNs' lists, and run the scheduler's sweep once (cron). Deleting and
// recreating need no lease: each step is a state-guarded transition, so a racing scheduler cannot undo
// it. Reconcile (unless a dry run) and sweep act as the scheduler and answer 409 while another instance leads.
// Every route that waits on APNs answers within `adminTimeout` (an `APNsDeadline`): when APNs has not
// answered by then, 504 `apns_timeout`. What was done is recorded and the scheduler retries the rest.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `/v1/channels...` and `/v1/events/{id}/channel/recreate` (admin).
public struct ChannelRoutes: APIRoutes {
    private let channels: ChannelRepository
    private let deliveries: DeliveryRepository
    private let scheduler: ChannelScheduler
    /// How long a route waits on APNs (`PipelineSettings.adminTimeout`).
    private let adminTimeout: Duration

    public init(pool: PostgresPool, scheduler: ChannelScheduler, adminTimeout: Duration = .seconds(PipelineSettings().adminTimeout)) {
        channels = ChannelRepository(pool: pool)
        deliveries = DeliveryRepository(pool: pool)
        self.scheduler = scheduler
        self.adminTimeout = adminTimeout
    }

    public func register(in table: inout RouteTable) {
        let operate = Operator(timeout: adminTimeout)
        table.add("GET", "/v1/channels", access: .scope(.admin)) { [channels] request in
            let query = request.query
            let list = try await channels.list(
                appID: try query.integer("app"), state: try query.choice("state"),
                eventID: try query.integer("event"),
                limit: try query.integer("limit", in: 1...500) ?? 100)
            return .json(["channels": .array(list.map(EventRoutes.json))])
        }
        table.add("GET", "/v1/channels/{id}", access: .scope(.admin)) { [channels, deliveries] request in
            let channel = try await Self.channel(request, channels)
            guard case .object(var object) = EventRoutes.json(channel) else { return .json(EventRoutes.json(channel)) }
            object["deliveries"] = .array(try await deliveries.recent(channelID: channel.id).map(Self.json))
            return .json(.object(object))
        }
        table.add("DELETE", "/v1/channels/{id}", access: .scope(.admin)) { [channels, scheduler, operate] request in
            let channel = try await Self.channel(request, channels)
            let force = try request.query.flag("force")
            return .json(EventRoutes.json(try await operate { try await scheduler.deleteChannel(id: channel.id, force: force) }), status: 202)
        }
        table.add("POST", "/v1/events/{id}/channel/recreate", access: .scope(.admin)) { [scheduler, operate] request in
            let eventID = try EventRoutes.eventID(request)
            return .json(EventRoutes.json(try await operate { try await scheduler.recreateChannel(eventID: eventID) }), status: 202)
        }
        table.add("POST", "/v1/channels/reconcile", access: .scope(.admin), takesBody: true) { [scheduler, operate] request in
            let body = try request.bodyObject()
            try body.allowOnly(["dryRun", "deleteUnknown"])
            let dryRun = try body.optionalBool("dryRun") ?? false
            let deleteUnknown = try body.optionalBool("deleteUnknown") ?? false
            if dryRun {
                let previews = try await operate { try await scheduler.reconcilePreview() }
                return .json([
                    "apps": .array(
                        previews.map { preview in
                            Self.reconcileJSON(
                                app: preview.appID, unrecorded: preview.unrecorded, unknown: preview.unknown,
                                missing: preview.missing, resurrected: preview.resurrected, deleted: [])
                        })
                ])
            }
            let report = try await operate { try await scheduler.runOnce(reconcile: true, deleteUnknown: deleteUnknown ? true : nil) }
            return .json([
                "apps": .array(
                    report.reconciled.map { app in
                        Self.reconcileJSON(
                            app: app.appID, unrecorded: app.recorded, unknown: app.unknown, missing: app.missing,
                            resurrected: app.resurrected, deleted: app.deleted)
                    }), "sweep": Self.json(report),
            ])
        }
        table.add("POST", "/v1/channels/sweep", access: .scope(.admin)) { [scheduler, operate] _ in
            .json(Self.json(try await operate { try await scheduler.runOnce() }))
        }
    }

    /// Runs operator actions within the APNs bound: the scheduler's refusals become 404 and 409 answers, an
    /// APNs that did not answer in time 504.
    private struct Operator: Sendable {
        let timeout: Duration

        func callAsFunction<T>(_ action: () async throws -> T) async throws -> T {
            let deadline = APNsDeadline(after: timeout)
            let outcome: Result<T, any Error>
            do {
                outcome = .success(try await APNsDeadline.$current.withValue(deadline) { try await action() })
            } catch {
                outcome = .failure(error)
            }
            if deadline.cutShort {
                throw APIError.apnsTimeout(
                    "APNs did not answer within \(timeout.components.seconds) s (serve --admin-timeout); "
                        + "what was done is recorded and the scheduler retries the rest")
            }
            do {
                return try outcome.get()
            } catch let error as ChannelSchedulerError {
                switch error {
                case .channelNotFound(let what): throw APIError.notFound(what)
                case .refused(let why): throw APIError.conflict(why)
                case .leaseHeldElsewhere: throw APIError.conflict("\(error)")
                case .listFailed: throw APIError.unavailable("\(error)")
                }
            }
        }
    }

    private static func channel(_ request: APIRequest, _ channels: ChannelRepository) async throws -> ChannelRecord {
        guard let id = Int(request.parameter("id")), id > 0, let channel = try await channels.get(id: id) else {
            throw APIError.notFound("channel")
        }
        return channel
    }

    /// One app's reconcile, the same shape for a dry run (what it would do) and a real one (what it did).
    private static func reconcileJSON(
        app: Int, unrecorded: [String], unknown: [String], missing: [Int], resurrected: [Int],
        deleted: [String]
    ) -> JSONValue {
        [
            "app": .int(Int64(app)), "unrecorded": .array(unrecorded.map(JSONValue.string)), "unknown": .array(unknown.map(JSONValue.string)),
            "missing": ids(missing), "resurrected": ids(resurrected), "deleted": .array(deleted.map(JSONValue.string)),
        ]
    }

    private static func ids(_ ids: [Int]) -> JSONValue { .array(ids.map { .int(Int64($0)) }) }
    static func optional(_ int: Int?) -> JSONValue { int.map { .int(Int64($0)) } ?? .null }
    private static func optional(_ int: Int64?) -> JSONValue { int.map(JSONValue.int) ?? .null }

    /// The API's view of one APNs exchange.
    public static func json(_ delivery: DeliveryRecord) -> JSONValue {
        let draft = delivery.draft
        return [
            "id": .int(Int64(delivery.id)), "app": .int(Int64(draft.appID)), "kind": .string(draft.kind.rawValue),
            "channel": optional(draft.channelID), "update": optional(draft.updateID),
            "apnsRequestId": draft.apnsRequestID.map { .string($0.uuidString.lowercased()) } ?? .null,
            "apnsUniqueId": draft.apnsUniqueID.map { .string($0.uuidString.lowercased()) } ?? .null,
            "status": optional(draft.status), "reason": draft.reason.map(JSONValue.string) ?? .null,
            "latencyMicroseconds": optional(draft.latencyMicroseconds), "priority": optional(draft.priority),
            "attempt": .int(Int64(draft.attempt)), "apsTimestamp": optional(draft.apsTimestamp),
            "sentAt": EventRoutes.json(delivery.sentAt),
        ]
    }

    /// The API's view of a sweep.
    public static func json(_ report: SweepReport) -> JSONValue {
        [
            "opened": ids(report.opened), "createRetries": ids(report.createRetries), "createsUnknown": ids(report.createsUnknown),
            "createsFailed": ids(report.createsFailed), "quotaRefused": ids(report.quotaRefused),
            "eventsStarted": ids(report.eventsStarted), "eventsEnded": ids(report.eventsEnded),
            "deleted": ids(report.deleted), "lost": ids(report.lost), "parked": ids(report.parked),
            "unknown": .array(report.unknown.map(JSONValue.string)),
            "unknownDeleted": .array(report.unknownDeleted.map(JSONValue.string)),
        ]
    }
}
