// The APNs simulator's engine, continued: the checks every request passes (provider tokens, bundle ids, injected
// faults and scripted rejections) and the shared header and payload checks. Split from SimulatorEngine.swift by
// what each part does.
import Crypto
import Foundation
import MarqueeCore
import Network
import Synchronization

extension SimulatorEngine {
    // MARK: - Provider tokens (SimulatorProviderToken.swift)

    func authenticate(
        _ authorization: String?, _ connection: inout SimulatorConnectionState, api: SimulatorAPI, now: Date
    ) throws(Rejection) {
        guard let value = authorization, !value.isEmpty else { throw Rejection(.missingProviderToken) }
        // The header the connection's token came in, again: no need to take it apart.
        if let current = connection.token, current.authorization == value {
            try checkAge(issuedAt: current.issuedAt, now: now)
            return
        }
        guard value.utf8.count > 7, value.prefix(7).lowercased() == "bearer " else {
            throw Rejection(.invalidProviderToken)
        }
        // Trimmed by hand: Foundation's trimmingCharacters goes through NSString and cost a fifth of the time.
        var bytes = value.utf8.dropFirst(7)
        while let first = bytes.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { bytes = bytes.dropLast() }
        let jwt = String(decoding: bytes, as: UTF8.self)
        if let current = connection.token, current.jwt == jwt {
            try checkAge(issuedAt: current.issuedAt, now: now)
            connection.token?.authorization = value
            return
        }
        // A new token string on this connection: the only time the signature is verified.
        guard let token = SimulatorProviderToken(jwt: jwt), let trusted = trustedKeys[token.keyID],
            trusted.teamID == token.teamID
        else {
            throw Rejection(.invalidProviderToken)
        }
        connection.tokenVerifications += 1
        guard token.isSigned(by: trusted.key) else { throw Rejection(.invalidProviderToken) }
        // Apple binds one team to a connection. Device pushes name the error (UnrelatedKeyIdInToken: "open a new
        // connection"); the broadcast and channel-management table has no such reason, so the token is invalid there.
        if let team = connection.boundTeamID, team != token.teamID {
            throw Rejection(api == .devicePush ? .unrelatedKeyIdInToken : .invalidProviderToken)
        }
        try checkAge(issuedAt: token.issuedAt, now: now)
        // Apple: "APNs reports an error if you recreate your tokens more often than every 20 minutes" (A7). The
        // tokens' issue times are compared, not the moments they arrived, so a new connection may adopt a token that
        // a process shares among its connections and still take the next one it signs 20 minutes later.
        if let current = connection.token, token.issuedAt.timeIntervalSince(current.issuedAt) < Self.tokenChangeInterval {
            throw Rejection(.tooManyProviderTokenUpdates)
        }
        connection.token = .init(authorization: value, jwt: jwt, keyID: token.keyID, teamID: token.teamID, issuedAt: token.issuedAt)
        connection.boundTeamID = token.teamID
    }

    func checkAge(issuedAt: Date, now: Date) throws(Rejection) {
        let age = now.timeIntervalSince(issuedAt)
        if age > Self.tokenLifetime { throw Rejection(.expiredProviderToken) }
        if age < -Self.tokenFutureTolerance { throw Rejection(.invalidProviderToken) }
    }

    /// Bundle ids in broadcast and management paths: no `.push-type.liveactivity` suffix (`TopicDisallowed`),
    /// and one the key may use (`TopicMismatch`).
    func checkBundle(_ bundleID: String) throws(Rejection) {
        if bundleID.hasSuffix(SimulatorLimits.liveActivityTopicSuffix) { throw Rejection(.topicDisallowed) }
        if !isAllowed(bundleID) { throw Rejection(.topicMismatch) }
    }

    func isAllowed(_ bundleID: String) -> Bool { allowedBundleIDs.isEmpty || allowedBundleIDs.contains(bundleID) }

    func drawFault() -> Rejection? {
        let faults = configuration.faults
        let total = faults.tooManyRequests + faults.internalServerError + faults.serviceUnavailable
        guard total > 0 else { return nil }
        let draw = state.withLock { $0.random.unit() }
        if draw < faults.tooManyRequests { return Rejection(.tooManyRequests) }
        if draw < faults.tooManyRequests + faults.internalServerError { return Rejection(.internalServerError) }
        if draw < total { return Rejection(.serviceUnavailable) }
        return nil
    }

    func nextScripted(on api: SimulatorAPI, now: Date) -> Rejection? {
        // `scriptedCount` counts the scripted answers and the standing rejections, so the common case takes no lock.
        guard scriptedCount.load(ordering: .acquiring) > 0,
            let reason = state.withLock({ state -> SimulatorReason? in
                guard var queue = state.scripted[api], !queue.isEmpty else { return state.standing[api] }
                let reason = queue.removeFirst()
                state.scripted[api] = queue
                scriptedCount.subtract(1, ordering: .releasing)
                return reason
            })
        else { return nil }
        // Every 410 carries the time the token became invalid, in milliseconds (handling-notification-responses-from-apns).
        let timestamp = api.answer(for: reason)?.status == 410 ? Int64((now.timeIntervalSince1970 * 1000).rounded(.down)) : nil
        return Rejection(reason, timestamp: timestamp)
    }

    // MARK: - Shared checks

    /// The path's device token as lowercase hex; nil (`BadDeviceToken`) unless it is hexadecimal bytes (Apple: "the
    /// hexadecimal bytes that identify the user's device"; "Don't make assumptions about device token size": up to
    /// 200 bytes are taken, today's tokens have 32 or 100).
    static func deviceTokenHex(_ token: String) -> String? {
        let count = token.utf8.count
        guard count % 2 == 0, (2...400).contains(count) else { return nil }
        if allBytes(of: token, are: { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) { return token }
        guard allBytes(of: token, are: { (0x30...0x39).contains($0) || (0x61...0x66).contains($0 | 0x20) }) else { return nil }
        return token.lowercased()
    }

    /// Whether every byte of `text` passes `test`, read through the string's storage (its UTF8View's iterator is slower).
    static func allBytes(of text: String, are test: (UInt8) -> Bool) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(test) } ?? text.utf8.allSatisfy(test)
    }

    /// Letters, digits, `-` and `.`: what a bundle id (and so a topic) is made of.
    static func isBundleIDByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."):
            true
        default: false
        }
    }

    static func channelID(_ headers: SimulatorRequestHeaders) throws(Rejection) -> String {
        guard let text = headers.channelID, !text.isEmpty else { throw Rejection(.missingChannelId) }
        guard text.utf8.count <= maximumChannelIDLength, SimulatorIdentifiers.isBase64(text) else { throw Rejection(.badChannelId) }
        return text
    }

    /// A decimal integer header; `allowed` nil means any value ≥ 0.
    static func integer(_ text: String, allowed: Set<Int>?, else reason: SimulatorReason) throws(Rejection) -> Int {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = Int(text),
            allowed?.contains(value) ?? true
        else {
            throw Rejection(reason)
        }
        return value
    }

    /// Empty → `PayloadEmpty`; over the limit → 413 `PayloadTooLarge`; not a JSON object with an `aps` object →
    /// `BadRequestPayload`.
    static func checkPayload(_ body: [UInt8], limit: Int) throws(Rejection) {
        guard !body.isEmpty else { throw Rejection(.payloadEmpty) }
        guard body.count <= limit else { throw Rejection(.payloadTooLarge) }
        switch PayloadScanner.verdict(body) {
        case .apsObject: return
        case .rejected: throw Rejection(.badRequestPayload)
        case .undecided:
            guard (try? JSONValue(parsing: body))?["aps"]?.objectValue != nil else { throw Rejection(.badRequestPayload) }
        }
    }

    /// Device-push answers carry `apns-id`; channel-management and broadcast answers `apns-request-id`.
    static func idHeader(listener: SimulatorListener, path: String) -> String {
        listener == .push && path.hasPrefix("/3/device/") ? SimulatorHeader.id : SimulatorHeader.requestID
    }

    /// The path for logs: a device token is cut to its first 8 characters.
    static func loggablePath(_ path: String) -> String {
        let prefix = "/3/device/"
        guard path.hasPrefix(prefix) else { return path }
        return prefix + String(path.dropFirst(prefix.count).prefix(8)) + "…"
    }

    static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1000 + Double(attoseconds) / 1e15
    }
}
