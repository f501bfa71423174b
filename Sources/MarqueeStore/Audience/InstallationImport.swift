// `marquee installation import`: existing registrations brought in from another system's dump, under the
// registry's rules (docs/operations.md#importing-installations). Rows are COPYed into a temporary table and
// applied by a few set-wide statements in one transaction (a million rows take under a minute, not a statement
// each), and a failed import leaves nothing behind. A row changes an installation only when its `registeredAt`
// is newer than the installation's last registration, so an old dump cannot undo rotations, moves or
// invalidations made since.
import Foundation
import MarqueeCore
import Postgres

/// One row of an import, validated: the fields of `PUT /v1/installations/{id}` plus the time the source
/// system last heard from the installation. A nil field leaves the stored value as it is.
public struct ImportedInstallation: Sendable, Equatable {
    /// The row's line in the file (the first line is 1), for reports.
    public var line: Int
    public var installationID: String
    /// Lower-cased, validated by `DeviceTokenText`.
    public var pushToStartToken: String?
    public var osVersion: String?
    public var appBuild: String?
    public var locale: String?
    public var frequentPushesEnabled: Bool?
    public var liveActivitiesEnabled: Bool?
    /// What the installation follows; nil leaves its follows alone, a value replaces them.
    public var follows: ImportedFollows?
    public var registeredAt: Date

    public init(line: Int, installationID: String, registeredAt: Date) {
        self.line = line
        self.installationID = installationID
        self.registeredAt = registeredAt
    }
}

/// The follows of an imported row: events by id or external id, and topics, each without repeats.
public struct ImportedFollows: Sendable, Equatable {
    public var events: [EventReference]
    public var topics: [String]

    public init(events: [EventReference] = [], topics: [String] = []) {
        self.events = events
        self.topics = topics
    }
}

/// A row that cannot be imported: its line, the field at fault when there is one, and why.
public struct InstallationImportProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public let line: Int
    public let field: String?
    public let message: String

    public init(line: Int, field: String?, message: String) {
        self.line = line
        self.field = field
        self.message = message
    }

    public var description: String { "line \(line)" + (field.map { ", \($0)" } ?? "") + ": \(message)" }
}

/// What an import did.
public struct InstallationImportSummary: Sendable, Equatable {
    /// Rows read, bad ones included.
    public var rows = 0
    /// Rows refused (skipped with `skipBad`).
    public var badRows = 0
    /// Installations created, and existing ones updated.
    public var created = 0
    public var updated = 0
    /// Rows that changed nothing: not newer than the installation's last registration, or another row of
    /// the file for the same installation was newer.
    public var unchanged = 0
    /// Push-to-start tokens stored, and of those, taken from another installation of the app.
    public var tokensStored = 0
    public var tokensMoved = 0
    /// Tokens left out: held by a newer registration of another installation, given by a newer row of the
    /// file to another installation, or invalidated by APNs after the row's time.
    public var tokensLeftOut = 0
    /// Follow rows written.
    public var follows = 0

    public init() {}
}

/// Why an import stopped without changing anything.
public enum InstallationImportError: Error, Sendable, CustomStringConvertible {
    /// Rows are bad and `skipBad` was not set.
    case badRows([InstallationImportProblem], rows: Int)
    /// No app with this id.
    case unknownApp(Int)

    public var description: String {
        switch self {
        case .badRows(let problems, let rows): "\(problems.count) of \(rows) rows are bad; nothing was imported"
        case .unknownApp(let id): "no app with id \(id)"
        }
    }
}

/// Writes the rows of an import; given to the caller's feed.
public final class InstallationImportSink {
    let writer: PostgresCopyWriter
    /// The rows written.
    public private(set) var rows = 0

    init(writer: PostgresCopyWriter) { self.writer = writer }

    /// Stages one validated row.
    nonisolated(nonsending) public func write(_ row: ImportedInstallation) async throws {
        rows += 1
        var eventIDs: [String] = []
        var externalIDs: [String] = []
        for reference in row.follows?.events ?? [] {
            switch reference {
            case .id(let id): eventIDs.append(String(id))
            case .externalID(let external): externalIDs.append(external)
            }
        }
        let version = row.osVersion.flatMap(OSVersion.init)
        try await writer.write(
            row.line, row.installationID, row.pushToStartToken, version == nil ? nil : row.osVersion, version?.major, version?.minor,
            version?.patch, row.appBuild, row.locale, row.frequentPushesEnabled, row.liveActivitiesEnabled, row.registeredAt,
            row.follows != nil, eventIDs, externalIDs, row.follows?.topics ?? [])
    }
}

/// Imports installations into one app.
public struct InstallationImporter: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Stages the rows `feed` writes and applies them in one transaction. `feed` returns the problems it found
    /// while reading (rows it did not write); rows that name an event the app does not have are found here.
    /// Any problem rolls everything back with `badRows`, unless `skipBad`, which imports the rest.
    /// `previousTokenRetention` is the API's `--previous-token-retention`: a rotated-away token stays matched
    /// to its installation that long.
    public func importInstallations(
        appID: Int, skipBad: Bool, previousTokenRetention: TimeInterval,
        feed: (InstallationImportSink) async throws -> [InstallationImportProblem]
    ) async throws -> (InstallationImportSummary, problems: [InstallationImportProblem]) {
        try await pool.withTransaction { tx in
            guard try await tx.query("SELECT 1 FROM apps WHERE id = \(appID)").first != nil else {
                throw InstallationImportError.unknownApp(appID)
            }
            // The newest row per installation and per token are sorts and hash joins over every staged row: with
            // the default 4 MB each spilled to disk in batches. For this transaction only.
            try await tx.execute("SET LOCAL work_mem = '128MB'")
            // Temporary tables write no WAL and vanish at the end of the transaction, whatever its outcome.
            try await tx.execute(
                """
                CREATE TEMPORARY TABLE installation_import (
                    line integer NOT NULL, installation_id text NOT NULL, token text, os_version text, os_major integer,
                    os_minor integer, os_patch integer, app_build text, locale text, frequent_pushes_enabled boolean,
                    live_activities_enabled boolean, registered_at timestamptz NOT NULL, follows_given boolean NOT NULL,
                    event_ids text[] NOT NULL, external_ids text[] NOT NULL, topics text[] NOT NULL
                ) ON COMMIT DROP
                """)
            var feedProblems: [InstallationImportProblem] = []
            var staged = 0
            try await tx.copyFrom(
                """
                COPY installation_import (line, installation_id, token, os_version, os_major, os_minor, os_patch, app_build, locale,
                                          frequent_pushes_enabled, live_activities_enabled, registered_at, follows_given, event_ids,
                                          external_ids, topics) FROM STDIN
                """
            ) { writer in
                let sink = InstallationImportSink(writer: writer)
                feedProblems = try await feed(sink)
                staged = sink.rows
            }
            var summary = InstallationImportSummary()
            let problems = (feedProblems + (try await Self.unknownEvents(appID: appID, on: tx))).sorted { $0.line < $1.line }
            summary.rows = staged + feedProblems.count
            summary.badRows = Set(problems.map(\.line)).count
            if !problems.isEmpty {
                guard skipBad else { throw InstallationImportError.badRows(problems, rows: summary.rows) }
                try await tx.execute("DELETE FROM installation_import WHERE line = ANY(\(problems.map { String($0.line) })::text[]::integer[])")
            }
            try await Self.apply(appID: appID, previousTokenRetention: previousTokenRetention, summary: &summary, on: tx)
            return (summary, problems)
        }
    }

    /// Rows that follow an event the app does not have, one problem per row and unknown reference.
    static func unknownEvents(appID: Int, on tx: PostgresConnection) async throws -> [InstallationImportProblem] {
        try await tx.query(
            """
            WITH referenced AS (
                SELECT DISTINCT unnest(external_ids) AS external_id, NULL::bigint AS event_id FROM installation_import
                UNION ALL
                SELECT DISTINCT NULL, unnest(event_ids)::bigint FROM installation_import
            ), unknown AS (
                SELECT r.external_id, r.event_id FROM referenced r
                WHERE NOT EXISTS (
                    SELECT 1 FROM events e
                    WHERE e.app_id = \(appID) AND (e.external_id = r.external_id OR e.id = r.event_id))
            )
            SELECT s.line, u.external_id, u.event_id FROM unknown u
            JOIN installation_import s ON u.external_id = ANY(s.external_ids) OR u.event_id::text = ANY(s.event_ids)
            ORDER BY s.line
            """
        ).map { row in
            let event: String =
                if let external = try row.decode(String?.self, column: "external_id") { "external id '\(external)'" } else {
                    "id \(try row.decode(Int.self, column: "event_id"))"
                }
            return InstallationImportProblem(line: try row.decode(column: "line"), field: "events", message: "the app has no event with \(event)")
        }
    }

    /// Applies the staged rows: the newest row per installation (and per token) wins, and only where it is
    /// newer than what is stored. Tokens are decided before the rows are written, so each installation row is
    /// written once: updated in place, or inserted with its token.
    static func apply(appID: Int, previousTokenRetention: TimeInterval, summary: inout InstallationImportSummary, on tx: PostgresConnection)
        async throws
    {
        // The newest row of each installation, and whether it is newer than the stored installation (or new).
        try await tx.execute(
            """
            CREATE TEMPORARY TABLE installation_import_latest ON COMMIT DROP AS
            SELECT DISTINCT ON (s.installation_id) s.*, i.id AS installation,
                   (i.id IS NULL OR i.registered_at < s.registered_at) AS applies
            FROM installation_import s
            LEFT JOIN installations i ON i.app_id = \(appID) AND i.installation_id = s.installation_id
            ORDER BY s.installation_id, s.registered_at DESC, s.line DESC
            """)
        try await tx.execute("ANALYZE installation_import_latest")
        // Tokens left out: given by a newer row of the file to another installation, invalidated by APNs after
        // the row's time, or held by another installation that registered at or after it. Three joins (hash
        // joins over a million rows), each on the tokens the one before left in.
        summary.tokensLeftOut = try await tx.execute(
            """
            UPDATE installation_import_latest r SET token = NULL
            FROM (SELECT installation_id, row_number() OVER (PARTITION BY token ORDER BY registered_at DESC, line DESC) AS rank
                  FROM installation_import_latest WHERE applies AND token IS NOT NULL) ranked
            WHERE ranked.rank > 1 AND r.installation_id = ranked.installation_id
            """)
        summary.tokensLeftOut += try await tx.execute(
            """
            UPDATE installation_import_latest r SET token = NULL
            FROM token_invalidations t
            WHERE r.applies AND t.app_id = \(appID) AND t.token = r.token AND t.outcome = \(InvalidationOutcome.invalidated.sql)
              AND coalesce(to_timestamp(t.apns_timestamp_ms / 1000.0), t.recorded_at) > r.registered_at
            """)
        summary.tokensLeftOut += try await tx.execute(
            """
            UPDATE installation_import_latest r SET token = NULL
            FROM installations h
            WHERE r.applies AND h.app_id = \(appID) AND h.push_to_start_token = r.token AND h.installation_id <> r.installation_id
              AND h.registered_at >= r.registered_at
            """)
        // A token moves: the other installations of the app that hold it (registered earlier) lose it.
        summary.tokensMoved = try await tx.execute(
            """
            UPDATE installations h SET \(InstallationRepository.tokenCleared)
            FROM installation_import_latest r
            WHERE h.app_id = \(appID) AND h.push_to_start_token = r.token AND h.installation_id <> r.installation_id AND r.applies
            """)
        try await tx.execute(
            """
            CREATE TEMPORARY TABLE installation_import_applied (
                installation bigint NOT NULL, installation_id text NOT NULL, created boolean NOT NULL, token_given boolean NOT NULL
            ) ON COMMIT DROP
            """)
        // Existing installations last registered before their row: fields and token in one write, the token
        // under the API's rotation rule (the one it replaces is kept as previous).
        try await tx.execute(
            """
            WITH updated AS (
                UPDATE installations i SET
                    os_version = coalesce(r.os_version, i.os_version),
                    os_major = CASE WHEN r.os_version IS NULL THEN i.os_major ELSE r.os_major END,
                    os_minor = CASE WHEN r.os_version IS NULL THEN i.os_minor ELSE r.os_minor END,
                    os_patch = CASE WHEN r.os_version IS NULL THEN i.os_patch ELSE r.os_patch END,
                    app_build = coalesce(r.app_build, i.app_build), locale = coalesce(r.locale, i.locale),
                    frequent_pushes_enabled = coalesce(r.frequent_pushes_enabled, i.frequent_pushes_enabled),
                    live_activities_enabled = coalesce(r.live_activities_enabled, i.live_activities_enabled),
                    \(fragment: InstallationRepository.tokenRotation(to: "r.token", at: "r.registered_at", retention: previousTokenRetention)),
                    registered_at = r.registered_at, updated_at = now()
                FROM installation_import_latest r
                WHERE r.applies AND r.installation IS NOT NULL AND i.id = r.installation AND i.registered_at < r.registered_at
                RETURNING i.id, i.installation_id, r.token IS NOT NULL AS token_given
            )
            INSERT INTO installation_import_applied SELECT id, installation_id, false, token_given FROM updated
            """)
        // New installations, with their tokens. One registered through the API meanwhile is newer than any row,
        // so a conflict leaves the API's.
        try await tx.execute(
            """
            WITH created AS (
                INSERT INTO installations (app_id, installation_id, os_version, os_major, os_minor, os_patch, app_build, locale,
                                           frequent_pushes_enabled, live_activities_enabled, push_to_start_token,
                                           token_registered_at, token_seen_at, registered_at)
                SELECT \(appID), r.installation_id, r.os_version, r.os_major, r.os_minor, r.os_patch, r.app_build, r.locale,
                       coalesce(r.frequent_pushes_enabled, true), coalesce(r.live_activities_enabled, true), r.token,
                       CASE WHEN r.token IS NOT NULL THEN r.registered_at END, CASE WHEN r.token IS NOT NULL THEN r.registered_at END,
                       r.registered_at
                FROM installation_import_latest r
                WHERE r.installation IS NULL
                ON CONFLICT (app_id, installation_id) DO NOTHING
                RETURNING id, installation_id, push_to_start_token IS NOT NULL AS token_given
            )
            INSERT INTO installation_import_applied SELECT id, installation_id, true, token_given FROM created
            """)
        let counts = try await tx.query(
            """
            SELECT count(*) FILTER (WHERE created)::bigint AS created, count(*) FILTER (WHERE NOT created)::bigint AS updated,
                   count(*) FILTER (WHERE token_given)::bigint AS tokens
            FROM installation_import_applied
            """)[0]
        summary.created = try counts.decode(column: "created")
        summary.updated = try counts.decode(column: "updated")
        summary.tokensStored = try counts.decode(column: "tokens")
        summary.unchanged = summary.rows - summary.badRows - summary.created - summary.updated
        try await tx.execute("ANALYZE installation_import_applied")
        summary.follows = try await applyFollows(appID: appID, on: tx)
    }

    /// The applied rows' follows replace the stored ones, for rows that give them. Returns the rows written.
    static func applyFollows(appID: Int, on tx: PostgresConnection) async throws -> Int {
        try await tx.execute(
            """
            DELETE FROM follows f USING installation_import_applied a, installation_import_latest r
            WHERE f.installation = a.installation AND NOT a.created AND r.installation_id = a.installation_id AND r.follows_given
            """)
        // The few events the file names are resolved once; each row's references are then joined to them.
        return try await tx.execute(
            """
            WITH named AS (
                SELECT e.id, e.external_id FROM events e
                WHERE e.app_id = \(appID)
                  AND (e.external_id IN (SELECT unnest(external_ids) FROM installation_import_latest)
                       OR e.id IN (SELECT unnest(event_ids)::bigint FROM installation_import_latest))
            ), given AS (
                SELECT a.installation, r.external_ids, r.event_ids, r.topics
                FROM installation_import_applied a JOIN installation_import_latest r USING (installation_id)
                WHERE r.follows_given
            )
            INSERT INTO follows (installation, app_id, event_id, topic)
            SELECT g.installation, \(appID), n.id, NULL FROM given g CROSS JOIN LATERAL unnest(g.external_ids) x (external_id)
            JOIN named n ON n.external_id = x.external_id
            UNION ALL
            SELECT g.installation, \(appID), n.id, NULL FROM given g CROSS JOIN LATERAL unnest(g.event_ids) x (event_id)
            JOIN named n ON n.id = x.event_id::bigint
            UNION ALL
            SELECT g.installation, \(appID), NULL, x.topic FROM given g CROSS JOIN LATERAL unnest(g.topics) x (topic)
            ON CONFLICT DO NOTHING
            """)
    }
}
