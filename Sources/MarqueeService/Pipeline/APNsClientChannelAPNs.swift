// The production `BroadcastChannelAPNs`: each operation becomes one `APNsRequest` sent through the
// app's `APNsClient` (which retries transient failures itself and reports every attempt).
import APNs
import Foundation
import MarqueeCore

/// `BroadcastChannelAPNs` over `APNsClient`s, one per signing key, chosen per app by `client(for:)`.
public struct APNsClientChannelAPNs: BroadcastChannelAPNs {
    /// The client for an app's bundle id and environment (its key, team and hosts).
    public let client: @Sendable (PipelineApp) async throws -> APNsClient

    public init(client: @escaping @Sendable (PipelineApp) async throws -> APNsClient) {
        self.client = client
    }

    public func createChannel(app: PipelineApp, storagePolicy: MessageStoragePolicy) async throws -> ChannelAPNsOutcome {
        let policy: APNsMessageStoragePolicy = storagePolicy == .notStored ? .noMessageStored : .mostRecentMessageStored
        return try await send(.createChannel(bundleID: app.bundleID, storagePolicy: policy), for: app)
    }

    public func deleteChannel(app: PipelineApp, channelID: String) async throws -> ChannelAPNsOutcome {
        try await send(.deleteChannel(bundleID: app.bundleID, channelID: try APNsChannelID(channelID)), for: app)
    }

    public func listChannels(app: PipelineApp) async throws -> ChannelAPNsOutcome {
        try await send(.listChannels(bundleID: app.bundleID), for: app)
    }

    public func broadcast(
        app: PipelineApp, channelID: String, payload: [UInt8], expiration: Int64,
        priority: PushPriority
    ) async throws -> ChannelAPNsOutcome {
        let apnsPriority: APNsPriority = priority == .high ? .immediate : .powerConsidered
        return try await send(
            .broadcast(
                bundleID: app.bundleID, channelID: try APNsChannelID(channelID), payload: payload,
                expiration: Int(expiration), priority: apnsPriority, requestID: .random()),
            for: app)
    }

    private func send(_ request: APNsRequest, for app: PipelineApp) async throws -> ChannelAPNsOutcome {
        let outcome = try await client(app).send(request)
        return ChannelAPNsOutcome(
            result: outcome.result,
            attempts: outcome.attempts.map { attempt in
                ChannelAPNsAttempt(
                    result: attempt.result, requestID: attempt.requestID, uniqueID: attempt.uniqueID, latency: attempt.latency,
                    outcomeUnknown: attempt.outcomeUnknown)
            })
    }
}
