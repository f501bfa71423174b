// The push-to-start token's rules, as a value: what a registration (rotate), a move to another installation, a
// clear and an APNs refusal do to an installation's token columns. The store writes them as SQL (a CASE list that
// the import also applies to many rows at once); a store test runs every row of this value's truth table through
// that SQL on a real database, so the two cannot drift apart.
import Foundation

/// An installation's push-to-start token and what the registry keeps with it (the token columns of `installations`).
public struct PushToStartTokenSlot: Sendable, Equatable {
    /// The current token; nil: none.
    public var token: String?
    /// When the current token was first registered (a registration of the same token keeps it).
    public var registeredAt: Date?
    /// When the app last sent the current token; a 410 older than this leaves it.
    public var seenAt: Date?
    /// APNs' refusal of the current token (BadDeviceToken, DeviceTokenNotForTopic): flagged, not removed.
    public var refusedReason: String?
    public var refusedAt: Date?
    /// The token the current one replaced, kept to match a late 410 until `previousUntil`.
    public var previous: String?
    public var previousUntil: Date?

    public init(
        token: String? = nil, registeredAt: Date? = nil, seenAt: Date? = nil, refusedReason: String? = nil, refusedAt: Date? = nil,
        previous: String? = nil, previousUntil: Date? = nil
    ) {
        self.token = token
        self.registeredAt = registeredAt
        self.seenAt = seenAt
        self.refusedReason = refusedReason
        self.refusedAt = refusedAt
        self.previous = previous
        self.previousUntil = previousUntil
    }

    /// What happens to an installation's token.
    public enum Event: Sendable, Equatable {
        /// The app registered `token` as of `at` (the API: now; an import: its row's time). A registration that carries
        /// no token (nil) never touches the stored one.
        case registered(String?, at: Date)
        /// Another installation of the app registered this token (the app was reinstalled): it moves there.
        case movedAway
        /// The app turned push-to-start off, or the prune found the token unsent for too long.
        case cleared
        /// APNs refused the token.
        case refused(TokenRefusal)
    }

    /// Which write the event asks for (what the store's statements perform).
    public enum Action: String, Sendable, Equatable, CaseIterable {
        /// Nothing changes.
        case keep
        /// The token is new: the current one becomes the previous one, the refusal goes.
        case rotate
        /// The same token again: only seen again.
        case seenAgain
        /// No token any more: the token, its times and its refusal go (the previous one stays).
        case clear
        /// Flag the refusal and keep the token.
        case flagRefused
    }

    /// Applies `event` at `now` (the database's clock: a rotation keeps the previous token until `now + retention`)
    /// and returns the write it asks for.
    public mutating func handle(_ event: Event, now: Date, previousRetention retention: TimeInterval) -> Action {
        switch event {
        case .registered(nil, _):
            return .keep
        case .registered(let new?, let at) where new == token:
            seenAt = max(seenAt ?? at, at)
            return .seenAgain
        case .registered(let new?, let at):
            if let token {
                previous = token
                previousUntil = now.addingTimeInterval(retention)
            }
            self = PushToStartTokenSlot(token: new, registeredAt: at, seenAt: at, previous: previous, previousUntil: previousUntil)
            return .rotate
        case .movedAway, .cleared:
            guard token != nil else { return .keep }
            self = PushToStartTokenSlot(previous: previous, previousUntil: previousUntil)
            return .clear
        case .refused(let refusal):
            switch refusal.outcome(tokenSeenAt: token == nil ? nil : seenAt) {
            case .invalidated:
                self = PushToStartTokenSlot(previous: previous, previousUntil: previousUntil)
                return .clear
            case .refused:
                refusedReason = refusal.reason
                refusedAt = refusedAt ?? now
                return .flagRefused
            case .kept, .unmatched:
                return .keep
            }
        }
    }

    /// What a refusal of the slot's token records in `token_invalidations`.
    public func outcome(of refusal: TokenRefusal) -> InvalidationOutcome {
        refusal.outcome(tokenSeenAt: token == nil ? nil : seenAt)
    }
}
