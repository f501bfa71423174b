// An event's freshness policy in the statements that build its pushes (the broadcast claim, the mirroring and the
// start contents): its own members (`events.freshness`) and its attribute type's (`attribute_type_policies`),
// resolved in Swift by `FreshnessPolicy(event:type:)`, so the rule lives in one place.
import MarqueeCore
import Postgres

enum FreshnessSQL {
    /// Joins `tp`, the policy of the attribute type of the event `e`.
    static let typePolicyJoin: PostgresStaticSQL = "LEFT JOIN attribute_type_policies tp ON tp.attribute_type_id = e.attribute_type_id"
    /// The columns `PostgresRow.freshnessPolicy()` reads.
    static let columns: PostgresStaticSQL = "e.freshness AS event_freshness, tp.freshness AS type_freshness"
}

extension PostgresRow {
    /// A stored policy document (nil: none).
    func freshnessSettings(column: String) throws -> FreshnessSettings? {
        guard let json = try decodeJSON(column: column) else { return nil }
        do {
            return try FreshnessSettings(json: json)
        } catch {
            throw StoredValueError(description: "column \(column): \(error)")
        }
    }

    /// The policy in force, from the row's `FreshnessSQL.columns`.
    func freshnessPolicy() throws -> FreshnessPolicy {
        FreshnessPolicy(event: try freshnessSettings(column: "event_freshness"), type: try freshnessSettings(column: "type_freshness"))
    }
}
