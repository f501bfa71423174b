// Reconciling with Apple's channel lists: what the database believes against what APNs lists, for the
// scheduler's sweeps (unresolved creates, the hourly pass) and the operator's dry run.
import APNs
import Foundation
import MarqueeCore
import MarqueeStore

extension ChannelRequests {
    /// Compares the app's channel list at APNs with the database: settles timed-out creates, flags
    /// channels APNs lost, deletes resurrected ones, reports unknown ones (deleting old ones if configured).
    func reconcile(
        appID: Int, unresolved: [ChannelRecord], deleteUnknown: Bool, fence: LeaseGrant,
        report: inout SweepReport
    ) async throws {
        guard let app = try await catalog.app(id: appID) else { return }
        let appLabel = "\(app.bundleID)/\(app.environment)"
        if await parking.heldUntil(appID: appID) != nil {
            logger.debug("reconcile skipped: the app's credentials are parked", ["app": .string(appLabel)])
            return
        }
        let listedAt = clock.now
        guard let listed = try await list(app).ids else { return }
        let result = try await channels.reconcile(appID: appID, apnsChannelIDs: listed, fence: fence, now: databaseNow)
        var appReport = AppReconcileReport(appID: appID)
        defer { report.reconciled.append(appReport) }
        let listedSet = Set(listed)
        for channel in unresolved {
            guard let before = channel.lifecycle else { continue }
            if let id = channel.apnsChannelID, listedSet.contains(id) {
                try await advance(channel, from: before, by: { try $0.reconcileFound() }, fence: fence, report: &report)
                report.opened.append(channel.id)
            } else {
                // Any channel the timed-out create made shows up below as unknown.
                try await advance(channel, from: before, by: { try $0.reconcileNotFound() }, fence: fence, report: &report)
            }
        }
        // Channels first seen after the list was taken cannot be in it.
        for channel in result.missing where (channel.firstSeenAt ?? .distantPast) < listedAt {
            guard let before = channel.lifecycle else { continue }
            try await advance(
                channel, from: before, by: { try $0.reconcileNotFound() }, error: "not in APNs' channel list", fence: fence,
                report: &report)
            appReport.missing.append(channel.id)
        }
        for channel in result.resurrected {
            guard let before = channel.lifecycle else { continue }
            appReport.resurrected.append(channel.id)
            try await advance(channel, from: before, by: { try $0.reconcileFound() }, fence: fence, report: &report)
        }
        for label in PipelineMetrics.appLabels(app) { metrics.unknownChannels.set(Double(result.unknown.count), [label]) }
        let newlyRecorded = Set(result.newlyRecorded.map(\.id))
        for channel in result.unknown {
            guard let apnsID = channel.apnsChannelID else { continue }
            report.unknown.append(apnsID)
            appReport.unknown.append(apnsID)
            if newlyRecorded.contains(channel.id) {
                appReport.recorded.append(apnsID)
                logger.warning(
                    "unknown channel in APNs' list",
                    [
                        "app": .string(appLabel), "apns_channel_id": .string(apnsID),
                        "delete_unknown": .bool(deleteUnknown),
                    ])
            }
            guard deleteUnknown,
                let seen = channel.firstSeenAt, clock.now.timeIntervalSince(seen) >= configuration.unknownDeleteGrace
            else { continue }
            if try await self.deleteUnknown(channel, fence: fence, report: &report) {
                report.unknownDeleted.append(apnsID)
                appReport.deleted.append(apnsID)
            }
        }
    }

    /// Lists every app's channels at APNs and compares them with the database, changing nothing but
    /// the delivery rows of the list requests. Needs no lease.
    func reconcilePreview() async throws -> [ReconcilePreview] {
        var previews: [ReconcilePreview] = []
        for app in try await catalog.apps() {
            let (listed, failure) = try await list(app)
            guard let listed else { throw ChannelSchedulerError.listFailed(appID: app.id, reason: failure) }
            previews.append(try await channels.reconcilePreview(appID: app.id, apnsChannelIDs: listed))
        }
        return previews
    }

    /// The app's channel list at APNs, or nil (logged, with why) when APNs did not give it.
    private func list(_ app: PipelineApp) async throws -> (ids: [String]?, failure: String) {
        let outcome = await call("channel_list") { try await apns.listChannels(app: app) }
        try await record(outcome, kind: .channelList, appID: app.id, channelID: nil, firstAttempt: 1)
        if case .parkCredentials(let reason) = outcome.verdict { _ = try await parking.refused(app, reason: reason) }
        let failure = outcome.failure.map { "\($0)" } ?? "unknown"
        guard let listed = outcome.acceptance?.channels?.map(\.value) else {
            logger.warning("channel list failed", ["app": .string("\(app.bundleID)/\(app.environment)"), "reason": .string(failure)])
            return (nil, failure)
        }
        await parking.succeeded(app)
        return (listed, failure)
    }
}
