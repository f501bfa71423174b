// Provider tokens: ES256 JWTs that authenticate to APNs. One token per signing key is shared by every
// connection of the process, refreshed on a schedule (about every 50 minutes; APNs wants between 20 and 60)
// and at once after ExpiredProviderToken. Concurrent callers that saw the same expired token cause one refresh:
// each says which token failed, and only a caller holding the current one replaces it.
import Crypto
import Foundation
import MarqueeCore
import Synchronization

/// A provider token could not be made or read; fix the key or its ids.
public enum ProviderTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Key ids and team ids are the 10 letters and digits Apple assigns.
    case invalidIdentifier(String)
    /// Signing failed inside OpenSSL.
    case signingFailed(CryptoError)
    /// A JWT that is not an ES256 APNs provider token: what is wrong.
    case malformed(String)

    public var description: String {
        switch self {
        case .invalidIdentifier(let value): "not a 10-character Apple key or team id: \(value)"
        case .signingFailed(let error): "could not sign the provider token: \(error)"
        case .malformed(let reason): "not an APNs provider token: \(reason)"
        }
    }
}

/// An APNs signing key: the `.p8` key with its key id and the team it belongs to.
public struct APNsSigningKey: Sendable {
    /// What a token is cached by: one token per key and team in the process.
    public struct Identity: Sendable, Hashable, CustomStringConvertible {
        public let keyID: String
        public let teamID: String
        public var description: String { "\(teamID)/\(keyID)" }
    }

    public let identity: Identity
    public let key: P256.SigningKey

    public init(keyID: String, teamID: String, key: P256.SigningKey) throws(ProviderTokenError) {
        for id in [keyID, teamID] where !Self.isAppleIdentifier(id) { throw .invalidIdentifier(id) }
        identity = Identity(keyID: keyID, teamID: teamID)
        self.key = key
    }

    /// Ten ASCII letters or digits.
    static func isAppleIdentifier(_ id: String) -> Bool {
        id.utf8.count == 10 && id.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) }
    }
}

/// A signed provider token. Its description never shows the JWT.
public struct ProviderToken: Sendable, Hashable, CustomStringConvertible {
    /// The compact JWS `header.claims.signature`.
    public let jwt: String
    public let keyID: String
    public let teamID: String
    /// `iat`, whole seconds.
    public let issuedAt: Date

    /// Signs a token `{alg: ES256, kid}.{iss: team, iat}`; `iat` is `issuedAt` rounded down to the second.
    public init(signingKey: APNsSigningKey, issuedAt: Date) throws(ProviderTokenError) {
        let seconds = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let identity = signingKey.identity
        // The ids are letters and digits only, so they need no JSON escaping.
        let header = Base64URL.encode(#"{"alg":"ES256","kid":"\#(identity.keyID)"}"#.utf8)
        let claims = Base64URL.encode(#"{"iss":"\#(identity.teamID)","iat":\#(seconds)}"#.utf8)
        let signingInput = header + "." + claims
        let signature: [UInt8]
        do { signature = try signingKey.key.signature(for: signingInput.utf8) } catch { throw .signingFailed(error) }
        jwt = signingInput + "." + Base64URL.encode(signature)
        keyID = identity.keyID
        teamID = identity.teamID
        self.issuedAt = Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// Reads a token (as the simulator receives it) without checking its signature; see `hasValidSignature`.
    public init(parsing jwt: String) throws(ProviderTokenError) {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected three dot-separated parts") }
        guard let header = Base64URL.decode(parts[0]).flatMap({ APNsResult.json($0) as? [String: Any] }),
            let claims = Base64URL.decode(parts[1]).flatMap({ APNsResult.json($0) as? [String: Any] })
        else {
            throw .malformed("header or claims are not base64url JSON objects")
        }
        guard header["alg"] as? String == "ES256" else { throw .malformed("alg is not ES256") }
        guard let keyID = header["kid"] as? String else { throw .malformed("no kid") }
        guard let teamID = claims["iss"] as? String else { throw .malformed("no iss") }
        guard let iat = APNsResult.integer(claims["iat"]) else { throw .malformed("no numeric iat") }
        guard Base64URL.decode(parts[2])?.count == P256.rawSignatureByteCount else {
            throw .malformed("the signature is not 64 base64url bytes")
        }
        self.jwt = jwt
        self.keyID = keyID
        self.teamID = teamID
        issuedAt = Date(timeIntervalSince1970: TimeInterval(iat))
    }

    /// True when the JWT's signature verifies under `key`.
    public func hasValidSignature(from key: P256.VerifyingKey) -> Bool {
        guard let dot = jwt.lastIndex(of: "."), let signature = Base64URL.decode(jwt[jwt.index(after: dot)...]) else {
            return false
        }
        return key.isValidSignature(signature, for: jwt[..<dot].utf8)
    }

    /// The `authorization` header value: `bearer <jwt>`.
    public var authorization: String { APNsProtocol.bearerPrefix + jwt }

    public var description: String { "ProviderToken(team: \(teamID), key: \(keyID), iat: \(Int64(issuedAt.timeIntervalSince1970)))" }
}

/// The process's provider tokens: one per signing key, shared by all connections, refreshed on schedule.
public final class ProviderTokenSigner: Sendable {
    /// Shortest and longest token lifetimes APNs tolerates: a token changed sooner than 20 minutes on a connection
    /// gets 429 TooManyProviderTokenUpdates, one older than 60 minutes gets 403 ExpiredProviderToken.
    public static let lifetimeBounds: ClosedRange<TimeInterval> = 20 * 60...60 * 60

    public let clock: any WallClock
    /// Age after which a token is replaced, within `lifetimeBounds` (below 60 minutes, so a token is never sent stale).
    public let refreshAge: TimeInterval
    private let tokens = Mutex<[APNsSigningKey.Identity: ProviderToken]>([:])

    /// `refreshAge` defaults to 50 minutes and is clamped to 20…55 minutes.
    public init(clock: any WallClock = SystemWallClock(), refreshAge: TimeInterval = 50 * 60) {
        self.clock = clock
        self.refreshAge = min(max(refreshAge, Self.lifetimeBounds.lowerBound), 55 * 60)
    }

    /// The current token for `key`, signing a new one only when there is none or it reached `refreshAge`.
    /// Cheap: call it for every request.
    public func token(for key: APNsSigningKey) throws(ProviderTokenError) -> ProviderToken {
        try token(for: key, replacing: nil)
    }

    /// After APNs answered `ExpiredProviderToken` to a request sent with `expired`: a new token issued now,
    /// unless another caller already replaced `expired`, in which case that replacement is returned.
    public func tokenAfterExpiry(of expired: ProviderToken, for key: APNsSigningKey) throws(ProviderTokenError) -> ProviderToken {
        try token(for: key, replacing: expired)
    }

    private func token(for key: APNsSigningKey, replacing expired: ProviderToken?) throws(ProviderTokenError) -> ProviderToken {
        try tokens.withLock { tokens throws(ProviderTokenError) -> ProviderToken in
            let now = clock.now
            if let current = tokens[key.identity], current.jwt != expired?.jwt,
                now.timeIntervalSince(current.issuedAt) < refreshAge
            {
                return current
            }
            let token = try ProviderToken(signingKey: key, issuedAt: now)
            tokens[key.identity] = token
            return token
        }
    }
}
