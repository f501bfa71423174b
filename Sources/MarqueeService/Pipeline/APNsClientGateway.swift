// The one gateway to APNs for every sender: broadcasts and channel requests (`BroadcastChannelAPNs`, the dispatcher's
// and the scheduler's), and device pushes (`DevicePushAPNs`, the start fan-out's and mirroring's). Each operation
// becomes one `APNsRequest` sent through the app's `APNsClient` (which retries transient failures itself and reports
// every attempt), and comes back as one `APNsExchange`, which `APNsExchange.verdict` reads once for every sender.
import APNs
import Foundation
import MarqueeCore

/// `BroadcastChannelAPNs` over `APNsClient`s, one per signing key, chosen per app by `client(for:)`.
public struct APNsClientGateway: BroadcastChannelAPNs {
    /// The client for an app's bundle id and environment (its key, team and hosts).
    public let client: @Sendable (PipelineApp) async throws -> APNsClient

    public init(client: @escaping @Sendable (PipelineApp) async throws -> APNsClient) {
        self.client = client
    }

    public func createChannel(app: PipelineApp, storagePolicy: MessageStoragePolicy) async throws -> APNsExchange {
        let policy: APNsMessageStoragePolicy = storagePolicy == .notStored ? .noMessageStored : .mostRecentMessageStored
        return try await send(.createChannel(bundleID: app.bundleID, storagePolicy: policy), for: app)
    }

    public func deleteChannel(app: PipelineApp, channelID: String) async throws -> APNsExchange {
        try await send(.deleteChannel(bundleID: app.bundleID, channelID: try APNsChannelID(channelID)), for: app)
    }

    public func listChannels(app: PipelineApp) async throws -> APNsExchange {
        try await send(.listChannels(bundleID: app.bundleID), for: app)
    }

    public func broadcast(
        app: PipelineApp, channelID: String, payload: [UInt8], expiration: Int64,
        priority: PushPriority
    ) async throws -> APNsExchange {
        let apnsPriority: APNsPriority = priority == .high ? .immediate : .powerConsidered
        return try await send(
            .broadcast(
                bundleID: app.bundleID, channelID: try APNsChannelID(channelID), payload: payload,
                expiration: Int(expiration), priority: apnsPriority, requestID: .random()),
            for: app)
    }

    /// Sends `request` with `retryPolicy` (nil: the client's own) and returns everything that happened to it.
    fileprivate func send(_ request: APNsRequest, for app: PipelineApp, retryPolicy: RetryPolicy? = nil) async throws -> APNsExchange {
        let outcome = try await client(app).send(request, retryPolicy: retryPolicy)
        return APNsExchange(
            result: outcome.result,
            attempts: outcome.attempts.map { attempt in
                APNsExchangeAttempt(
                    result: attempt.result, requestID: attempt.requestID, uniqueID: attempt.uniqueID, latency: attempt.latency,
                    outcomeUnknown: attempt.outcomeUnknown)
            })
    }
}

/// What the fan-out needs from APNs: one device push, retried as `retryPolicy` says, with every attempt.
public protocol DevicePushAPNs: Sendable {
    func devicePush(
        app: PipelineApp, token: String, payload: [UInt8], expiration: Int64, priority: PushPriority, retryPolicy: RetryPolicy
    ) async throws -> APNsExchange
}

extension APNsClientGateway: DevicePushAPNs {
    public func devicePush(
        app: PipelineApp, token: String, payload: [UInt8], expiration: Int64, priority: PushPriority, retryPolicy: RetryPolicy
    ) async throws -> APNsExchange {
        let request = try APNsRequest.devicePush(
            bundleID: app.bundleID, deviceToken: try APNsDeviceToken(hex: token), payload: payload,
            priority: priority == .high ? .immediate : .powerConsidered, expiration: Int(expiration), apnsID: .random())
        return try await send(request, for: app, retryPolicy: retryPolicy)
    }
}
