// Per-connection state of the simulator and the connection actions it asks the host to perform.
// APNs binds a team and a provider token to a connection, and adjusts the connection's stream limit
// after each answer; the engine does the bookkeeping here and the host only applies the actions.
import Foundation
import Network

/// Which of the simulator's two listeners a request arrived on.
public enum SimulatorListener: String, Sendable, Hashable {
    /// Device pushes and broadcasts (`api.push.apple.com`).
    case push
    /// Channel management (`api-manage-broadcast.push.apple.com`).
    case management
}

/// What the engine remembers about one HTTP/2 connection; the host keeps one per connection.
public struct SimulatorConnectionState: Sendable {
    /// The SETTINGS_MAX_CONCURRENT_STREAMS the connection last advertised.
    public internal(set) var streamLimit: UInt32
    /// Requests answered on this connection.
    public internal(set) var requestCount = 0
    /// True once a GOAWAY was asked for.
    public internal(set) var goAwaySent = false
    /// ES256 verifications done for this connection (once per new token string, not per request).
    public internal(set) var tokenVerifications = 0
    /// The team bound by the first verified token.
    public internal(set) var boundTeamID: String?
    /// The verified token in use, so its signature is checked only when the token string changes.
    var token: VerifiedToken?

    struct VerifiedToken: Sendable {
        /// The `authorization` header it last came in: the same header again needs no parsing.
        var authorization: String
        var jwt: String
        var keyID: String
        var teamID: String
        /// `iat`: the next token on this connection must be issued 20 minutes later or more.
        var issuedAt: Date
    }

    init(streamLimit: UInt32) { self.streamLimit = streamLimit }
}

/// Something the host must do to the connection after answering.
public enum SimulatorConnectionAction: Sendable, Equatable {
    /// Send SETTINGS_MAX_CONCURRENT_STREAMS.
    case setMaxConcurrentStreams(UInt32)
    /// Send GOAWAY with this error code and debug data (APNs' JSON `{"reason":...}`).
    case goAway(errorCode: UInt32, debugData: [UInt8])
}

/// The engine's answer to one request.
public struct SimulatorReply: Sendable {
    public var response: HTTPResponse
    /// To apply to the connection, in order.
    public var actions: [SimulatorConnectionAction]
    /// Added latency: the host sends the response this much later.
    public var delay: Duration
    /// The request was acted on and must not be answered: the host resets the stream (`--drop-answers`).
    public var dropsAnswer = false
}
