// The lifecycles' states and named state sets as SQL text. Statements filter and set states with these
// rather than with literals of their own, so a state's name is spelled once (in MarqueeCore) and the
// partial indexes the hot statements rely on stay provable in generic plans (see `PostgresStaticSQL`).
// `SchemaIndexTests` holds each partial index of `Sql/` against the set it is written from.
import MarqueeCore
import Postgres

extension RawRepresentable where Self: CaseIterable, RawValue == String {
    /// The stored name as an SQL string literal: `'open'`.
    var sql: PostgresStaticSQL { .literal(self) }
}

extension Sequence where Element: RawRepresentable & CaseIterable, Element.RawValue == String {
    /// The stored names as an SQL list for `IN`: `('open', 'ending')`.
    var sql: PostgresStaticSQL { .list(self) }
}

extension EventLifecycle {
    /// `CASE <column> WHEN 'from' THEN 'to' ... END`: the status `event` leaves an event in, for each status
    /// that accepts it. A statement that performs the event filters on `states(accepting: event).sql`.
    static func sqlStatus(after event: Event, column: PostgresStaticSQL) -> PostgresQuery {
        var cases: PostgresQuery = "CASE \(column)"
        for from in states(accepting: event) {
            guard let to = transition(from: from, on: event)?.to else { continue }
            cases = "\(fragment: cases) WHEN \(from.sql) THEN \(to.sql)"
        }
        return "\(fragment: cases) END"
    }
}

extension StartRunLifecycle {
    /// `CASE <column> WHEN 'from' THEN 'to' ... END`: the state `event` leaves a run in, for each open state. A
    /// statement that performs the event filters on the open states.
    static func sqlState(after event: Event, column: PostgresStaticSQL) -> PostgresQuery {
        var cases: PostgresQuery = "CASE \(column)"
        for from in openStates {
            guard let to = transition(from: from, on: event) else { continue }
            cases = "\(fragment: cases) WHEN \(from.sql) THEN \(to.sql)"
        }
        return "\(fragment: cases) END"
    }
}

extension ChannelLifecycle {
    /// `CASE <column> WHEN 'from' THEN 'to' ... ELSE <column> END`: the state `events` leave a channel in, for each
    /// of `states` (a state they do not apply to keeps its value). The statement filters on those states.
    static func sqlState(after events: [Event], from states: [State], column: PostgresStaticSQL) -> PostgresQuery {
        var cases: PostgresQuery = "CASE \(column)"
        for from in states {
            guard let to = after(events, from: from)?.state else { continue }
            cases = "\(fragment: cases) WHEN \(from.sql) THEN \(to.sql)"
        }
        return "\(fragment: cases) ELSE \(column) END"
    }
}
