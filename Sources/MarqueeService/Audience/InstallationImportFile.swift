// The files `marquee installation import` reads (docs/operations.md#importing-installations): CSV with a
// header, or JSON Lines with the registration's own field names. Each line becomes a validated
// `ImportedInstallation` or a problem naming its line and field, under the rules of
// `PUT /v1/installations/{id}` (the same validators and limits); blank lines are skipped.
import Foundation
import MarqueeCore
import MarqueeStore

/// The format of an import file.
public enum InstallationImportFormat: String, Sendable, CaseIterable {
    /// A header line naming the columns, then one installation a line (RFC 4180 quoting, a record on one line).
    case csv
    /// One JSON object a line.
    case jsonl

    /// The format a file's name suggests: `.jsonl` and `.ndjson` are JSON Lines, anything else CSV.
    public init(fileName: String) {
        let lower = fileName.lowercased()
        self = lower.hasSuffix(".jsonl") || lower.hasSuffix(".ndjson") ? .jsonl : .csv
    }
}

/// Reads an import file's lines into rows.
public struct InstallationImportParser: Sendable {
    /// The columns a CSV file may have; `installationId` and `registeredAt` are required. `events` holds
    /// external ids and `eventIds` Marquee's ids, each list separated by `;`, as is `topics`.
    public static let csvColumns = [
        "installationId", "pushToStartToken", "osVersion", "appBuild", "locale", "frequentPushesEnabled", "liveActivitiesEnabled",
        "events", "eventIds", "topics", "registeredAt",
    ]
    static let followColumns: Set<String> = ["events", "eventIds", "topics"]
    static let jsonFields: Set<String> = [
        "installationId", "pushToStartToken", "osVersion", "appBuild", "locale", "frequentPushesEnabled", "liveActivitiesEnabled",
        "follows", "registeredAt",
    ]
    /// How far ahead of the importer's clock a `registeredAt` may be (clocks differ); later is refused, since
    /// a time in the future would keep later imports from changing the installation.
    public static let clockSkew: TimeInterval = 300

    public let format: InstallationImportFormat
    /// The time `registeredAt` values are checked against.
    public let now: Date
    /// The CSV header's column names by position (nil for JSON Lines, or before the header is read).
    private(set) var columns: [String]?

    public init(format: InstallationImportFormat, now: Date = Date()) {
        self.format = format
        self.now = now
    }

    /// What one line says: nothing (a blank line or the CSV header), a row, or a problem. A header that cannot
    /// be read is a problem of line 1, and every later line is refused with it.
    public mutating func parse(_ bytes: ArraySlice<UInt8>, line: Int) -> Result<ImportedInstallation, InstallationImportProblem>? {
        var bytes = bytes
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        if bytes.allSatisfy({ $0 == 32 || $0 == 9 }) { return nil }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(InstallationImportProblem(line: line, field: nil, message: "not UTF-8 text"))
        }
        switch format {
        case .jsonl: return Self.parseJSON(text, line: line, now: now)
        case .csv:
            guard let columns else {
                switch Self.header(text) {
                case .success(let names): columns = names
                case .failure(let error):
                    columns = []
                    return .failure(InstallationImportProblem(line: line, field: nil, message: error.message))
                }
                return nil
            }
            guard !columns.isEmpty else { return .failure(InstallationImportProblem(line: line, field: nil, message: "the header is not valid")) }
            return Self.parseCSV(text, columns: columns, line: line, now: now)
        }
    }

    // MARK: JSON Lines

    static func parseJSON(_ text: String, line: Int, now: Date) -> Result<ImportedInstallation, InstallationImportProblem> {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: text)
        } catch {
            return .failure(InstallationImportProblem(line: line, field: nil, message: "not JSON: \(error)"))
        }
        do throws(APIError) {
            let fields = try JSONFields(value, at: .root)
            try fields.allowOnly(jsonFields)
            var row = ImportedInstallation(
                line: line, installationID: try fields.string("installationId"), registeredAt: try fields.date("registeredAt"))
            row.pushToStartToken = try InstallationRoutes.token(fields, "pushToStartToken")
            row.osVersion = try fields.optionalString("osVersion")
            row.appBuild = try InstallationRoutes.shortText(fields, "appBuild", limits: RegistrationLimits.appBuild)
            row.locale = try InstallationRoutes.shortText(fields, "locale", limits: RegistrationLimits.locale)
            row.frequentPushesEnabled = try fields.optionalBool("frequentPushesEnabled")
            row.liveActivitiesEnabled = try fields.optionalBool("liveActivitiesEnabled")
            if let follows = fields.optional("follows"), follows != .null {
                let (events, topics) = try InstallationRoutes.followTargets(try JSONFields(follows, at: JSONPath.root.appending(key: "follows")))
                var unique: [EventReference] = []
                for event in events where !unique.contains(event) { unique.append(event) }
                row.follows = ImportedFollows(events: unique, topics: topics)
            }
            return checked(row, now: now)
        } catch {
            return .failure(InstallationImportProblem(line: line, field: error.field, message: error.message))
        }
    }

    // MARK: CSV

    static func header(_ text: String) -> Result<[String], CSVLineError> {
        guard case .success(let names) = cells(text) else { return .failure(CSVLineError("the header is not a CSV line")) }
        let known = Set(csvColumns)
        if let unknown = names.first(where: { !known.contains($0) }) {
            return .failure(CSVLineError("unknown column '\(unknown)'; the columns are \(csvColumns.joined(separator: ", "))"))
        }
        guard Set(names).count == names.count else { return .failure(CSVLineError("a column is named twice")) }
        for required in ["installationId", "registeredAt"] where !names.contains(required) {
            return .failure(CSVLineError("the header has no \(required) column"))
        }
        return .success(names)
    }

    static func parseCSV(_ text: String, columns: [String], line: Int, now: Date) -> Result<ImportedInstallation, InstallationImportProblem> {
        func problem(_ field: String?, _ message: String) -> Result<ImportedInstallation, InstallationImportProblem> {
            .failure(InstallationImportProblem(line: line, field: field, message: message))
        }
        let values: [String]
        switch cells(text) {
        case .success(let cells): values = cells
        case .failure(let error): return problem(nil, error.message)
        }
        guard values.count == columns.count else { return problem(nil, "\(values.count) cells; the header has \(columns.count) columns") }
        var cell: [String: String] = [:]
        for (name, value) in zip(columns, values) where !value.isEmpty { cell[name] = value }
        guard let installationID = cell["installationId"] else { return problem("installationId", "required") }
        guard let registered = cell["registeredAt"] else { return problem("registeredAt", "required") }
        guard let registeredAt = Date(iso8601: registered) else {
            return problem("registeredAt", "expected an ISO 8601 date such as 2026-11-29T18:30:00Z")
        }
        var row = ImportedInstallation(line: line, installationID: installationID, registeredAt: registeredAt)
        if let token = cell["pushToStartToken"] {
            switch DeviceTokenText.validate(token) {
            case .success(let lowered): row.pushToStartToken = lowered
            case .failure(let error): return problem("pushToStartToken", "not a device token: \(error)")
            }
        }
        row.osVersion = cell["osVersion"]
        for (name, limits) in [("appBuild", RegistrationLimits.appBuild), ("locale", RegistrationLimits.locale)] {
            if let value = cell[name], !limits.contains(value.count) {
                return problem(name, "\(limits.lowerBound) to \(limits.upperBound) characters")
            }
        }
        row.appBuild = cell["appBuild"]
        row.locale = cell["locale"]
        for name in ["frequentPushesEnabled", "liveActivitiesEnabled"] {
            guard let value = cell[name] else { continue }
            let flag: Bool
            switch value.lowercased() {
            case "true", "1": flag = true
            case "false", "0": flag = false
            default: return problem(name, "expected true or false")
            }
            if name == "frequentPushesEnabled" { row.frequentPushesEnabled = flag } else { row.liveActivitiesEnabled = flag }
        }
        if columns.contains(where: followColumns.contains) {
            var follows = ImportedFollows()
            for external in list(cell["events"]) {
                guard RegistrationLimits.identifier.contains(external.count) else {
                    return problem("events", "an external id is 1 to 200 characters")
                }
                if !follows.events.contains(.externalID(external)) { follows.events.append(.externalID(external)) }
            }
            for text in list(cell["eventIds"]) {
                guard let id = Int(text), id > 0 else { return problem("eventIds", "'\(text)' is not an event id") }
                if !follows.events.contains(.id(id)) { follows.events.append(.id(id)) }
            }
            for topic in list(cell["topics"]) {
                guard RegistrationLimits.identifier.contains(topic.count) else { return problem("topics", "a topic is 1 to 200 characters") }
                if !follows.topics.contains(topic) { follows.topics.append(topic) }
            }
            row.follows = follows
        }
        return checked(row, now: now)
    }

    /// A `;`-separated list, without empty items.
    static func list(_ cell: String?) -> [String] {
        guard let cell else { return [] }
        return cell.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The cells of one CSV line: separated by commas, a quoted cell may hold commas and `""` for a quote.
    static func cells(_ text: String) -> Result<[String], CSVLineError> {
        var cells: [String] = []
        var current: [UInt8] = []
        var quoted = false
        var wasQuoted = false
        var bytes = Array(text.utf8)[...]
        while let byte = bytes.popFirst() {
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if bytes.first == UInt8(ascii: "\"") {
                        current.append(byte)
                        bytes.removeFirst()
                    } else {
                        quoted = false
                    }
                } else {
                    current.append(byte)
                }
            } else if byte == UInt8(ascii: ",") {
                cells.append(String(decoding: current, as: UTF8.self))
                current = []
                wasQuoted = false
            } else if byte == UInt8(ascii: "\"") && current.isEmpty && !wasQuoted {
                quoted = true
                wasQuoted = true
            } else if wasQuoted {
                return .failure(CSVLineError("text after a quoted cell's closing quote"))
            } else {
                current.append(byte)
            }
        }
        guard !quoted else { return .failure(CSVLineError("a quoted cell is not closed on its line")) }
        cells.append(String(decoding: current, as: UTF8.self))
        return .success(cells)
    }

    // MARK: Rules both formats share

    /// The checks that do not depend on the format: the installation id's length, the OS version, the follow
    /// limit, and a `registeredAt` that is not in the future.
    static func checked(_ row: ImportedInstallation, now: Date) -> Result<ImportedInstallation, InstallationImportProblem> {
        func problem(_ field: String, _ message: String) -> Result<ImportedInstallation, InstallationImportProblem> {
            .failure(InstallationImportProblem(line: row.line, field: field, message: message))
        }
        guard RegistrationLimits.identifier.contains(row.installationID.count) else {
            return problem("installationId", "an installation id is 1 to 200 characters")
        }
        if let version = row.osVersion, OSVersion(version) == nil {
            return problem("osVersion", "an OS version is major[.minor[.patch]], each 1 to 3 digits, like 17.2.1")
        }
        if let follows = row.follows, follows.events.count + follows.topics.count > InstallationRepository.followLimit {
            return problem(
                "follows",
                "\(follows.events.count + follows.topics.count) follows; an installation follows at most \(InstallationRepository.followLimit) events and topics"
            )
        }
        guard row.registeredAt <= now.addingTimeInterval(clockSkew) else {
            return problem("registeredAt", "in the future; a registration time is when the app last registered")
        }
        return .success(row)
    }
}

/// Why a CSV line cannot be read.
struct CSVLineError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Reads a file in large blocks and hands out its lines (without their newline), numbered from 1.
public struct LineReader {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var finished = false
    /// The line number of the last line returned.
    public private(set) var line = 0
    /// The bytes read from the file so far.
    public private(set) var bytesRead = 0

    public init(handle: FileHandle) { self.handle = handle }

    /// The next line, or nil at the end of the file (a last line without a newline is a line).
    public mutating func next() throws -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer[start...].firstIndex(of: 10) {
                let slice = buffer[start..<newline]
                start = newline + 1
                line += 1
                return slice
            }
            if finished {
                guard start < buffer.count else { return nil }
                let slice = buffer[start...]
                start = buffer.count
                line += 1
                return slice
            }
            buffer.removeFirst(start)
            start = 0
            guard let data = try handle.read(upToCount: 1 << 20), !data.isEmpty else {
                finished = true
                continue
            }
            bytesRead += data.count
            buffer.append(contentsOf: data)
        }
    }
}
