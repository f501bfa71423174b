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
    public static let csvColumns = CSVColumn.allCases.map { String(describing: $0) }
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
    /// The CSV header's columns by position (nil for JSON Lines, or before the header is read).
    private(set) var columns: [CSVColumn]?

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
        // ASCII is UTF-8; anything else is checked whole (delimiters are ASCII, so a valid line's cells are valid).
        guard bytes.allSatisfy({ $0 < 0x80 }) || String(validating: bytes, as: UTF8.self) != nil else {
            return .failure(InstallationImportProblem(line: line, field: nil, message: "not UTF-8 text"))
        }
        switch format {
        case .jsonl: return Self.parseJSON(String(decoding: bytes, as: UTF8.self), line: line, now: now)
        case .csv:
            guard let columns else {
                switch Self.header(bytes) {
                case .success(let names): columns = names
                case .failure(let error):
                    columns = []
                    return .failure(InstallationImportProblem(line: line, field: nil, message: error.message))
                }
                return nil
            }
            guard !columns.isEmpty else { return .failure(InstallationImportProblem(line: line, field: nil, message: "the header is not valid")) }
            return Self.parseCSV(bytes, columns: columns, line: line, now: now)
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

    static func header(_ line: ArraySlice<UInt8>) -> Result<[CSVColumn], CSVLineError> {
        guard case .success(let names) = cells(line) else { return .failure(CSVLineError("the header is not a CSV line")) }
        var columns: [CSVColumn] = []
        for name in names {
            guard let column = CSVColumn(name: name) else {
                return .failure(CSVLineError("unknown column '\(name)'; the columns are \(csvColumns.joined(separator: ", "))"))
            }
            guard !columns.contains(column) else { return .failure(CSVLineError("a column is named twice")) }
            columns.append(column)
        }
        for required in [CSVColumn.installationId, .registeredAt] where !columns.contains(required) {
            return .failure(CSVLineError("the header has no \(required.name) column"))
        }
        return .success(columns)
    }

    static func parseCSV(_ line: ArraySlice<UInt8>, columns: [CSVColumn], line number: Int, now: Date)
        -> Result<ImportedInstallation, InstallationImportProblem>
    {
        func problem(_ field: CSVColumn?, _ message: String) -> Result<ImportedInstallation, InstallationImportProblem> {
            .failure(InstallationImportProblem(line: number, field: field?.name, message: message))
        }
        // The row's non-empty cells by column.
        var cell = [String?](repeating: nil, count: CSVColumn.allCases.count)
        let scanned = forEachCell(line) { position, bytes in
            if position < columns.count && !bytes.isEmpty { cell[columns[position].rawValue] = String(decoding: bytes, as: UTF8.self) }
        }
        let count: Int
        switch scanned {
        case .success(let cells): count = cells
        case .failure(let error): return problem(nil, error.message)
        }
        guard count == columns.count else { return problem(nil, "\(count) cells; the header has \(columns.count) columns") }
        func value(_ column: CSVColumn) -> String? { cell[column.rawValue] }
        guard let installationID = value(.installationId) else { return problem(.installationId, "required") }
        guard let registered = value(.registeredAt) else { return problem(.registeredAt, "required") }
        guard let registeredAt = Date(iso8601: registered) else {
            return problem(.registeredAt, "expected an ISO 8601 date such as 2026-11-29T18:30:00Z")
        }
        var row = ImportedInstallation(line: number, installationID: installationID, registeredAt: registeredAt)
        if let token = value(.pushToStartToken) {
            switch DeviceTokenText.validate(token) {
            case .success(let lowered): row.pushToStartToken = lowered
            case .failure(let error): return problem(.pushToStartToken, "not a device token: \(error)")
            }
        }
        row.osVersion = value(.osVersion)
        // The column lists are static: a literal array here would be an allocation a row.
        for (column, limits) in CSVColumn.shortTexts {
            if let text = value(column), !limits.contains(text.count) {
                return problem(column, "\(limits.lowerBound) to \(limits.upperBound) characters")
            }
        }
        row.appBuild = value(.appBuild)
        row.locale = value(.locale)
        for column in CSVColumn.flags {
            guard let text = value(column) else { continue }
            let flag: Bool
            switch text.lowercased() {
            case "true", "1": flag = true
            case "false", "0": flag = false
            default: return problem(column, "expected true or false")
            }
            if column == .frequentPushesEnabled { row.frequentPushesEnabled = flag } else { row.liveActivitiesEnabled = flag }
        }
        if columns.contains(where: \.isFollows) {
            var follows = ImportedFollows()
            for external in list(value(.events)) {
                guard RegistrationLimits.identifier.contains(external.count) else {
                    return problem(.events, "an external id is 1 to 200 characters")
                }
                if !follows.events.contains(.externalID(external)) { follows.events.append(.externalID(external)) }
            }
            for text in list(value(.eventIds)) {
                guard let id = Int(text), id > 0 else { return problem(.eventIds, "'\(text)' is not an event id") }
                if !follows.events.contains(.id(id)) { follows.events.append(.id(id)) }
            }
            for topic in list(value(.topics)) {
                guard RegistrationLimits.identifier.contains(topic.count) else { return problem(.topics, "a topic is 1 to 200 characters") }
                if !follows.topics.contains(topic) { follows.topics.append(topic) }
            }
            row.follows = follows
        }
        return checked(row, now: now)
    }

    /// A `;`-separated list, without empty items, each trimmed of white space.
    static func list(_ cell: String?) -> [String] {
        guard let cell else { return [] }
        return cell.split(separator: ";").compactMap { item in
            // Most items have no space at either end: no trimming pass.
            let plain = item.utf8.first.map(isPlain) == true && item.utf8.last.map(isPlain) == true
            let trimmed = plain ? String(item) : item.trimmingCharacters(in: .whitespaces)
            return trimmed.isEmpty ? nil : trimmed
        }
    }

    /// An ASCII byte that is not white space (anything else may be, as part of a wider character).
    private static func isPlain(_ byte: UInt8) -> Bool { byte > 32 && byte < 0x80 }

    /// The cells of one CSV line: separated by commas, a quoted cell may hold commas and `""` for a quote.
    static func cells(_ line: ArraySlice<UInt8>) -> Result<[String], CSVLineError> {
        var cells: [String] = []
        return forEachCell(line) { _, bytes in cells.append(String(decoding: bytes, as: UTF8.self)) }.map { _ in cells }
    }

    /// Calls `body` with each cell's position and bytes (a quoted cell's without its quotes, `""` read as `"`);
    /// returns how many cells the line has. A quote opens a quoted cell only as the cell's first byte;
    /// elsewhere in an unquoted cell it is text.
    static func forEachCell(_ line: ArraySlice<UInt8>, _ body: (Int, ArraySlice<UInt8>) -> Void) -> Result<Int, CSVLineError> {
        let quote = UInt8(ascii: "\"")
        let comma = UInt8(ascii: ",")
        var position = 0
        var index = line.startIndex
        while true {
            if index < line.endIndex && line[index] == quote {
                var text: [UInt8] = []
                var scan = index + 1
                while true {
                    guard let next = line[scan...].firstIndex(of: quote) else {
                        return .failure(CSVLineError("a quoted cell is not closed on its line"))
                    }
                    text += line[scan..<next]
                    if next + 1 < line.endIndex && line[next + 1] == quote {
                        text.append(quote)
                        scan = next + 2
                    } else {
                        index = next + 1
                        break
                    }
                }
                guard index == line.endIndex || line[index] == comma else {
                    return .failure(CSVLineError("text after a quoted cell's closing quote"))
                }
                body(position, text[...])
            } else {
                let end = line[index...].firstIndex(of: comma) ?? line.endIndex
                body(position, line[index..<end])
                index = end
            }
            position += 1
            guard index < line.endIndex else { return .success(position) }
            index += 1  // past the comma
        }
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

/// A column a CSV import file may have: a header names it by its case name. The raw value is its slot in a
/// row's cells.
enum CSVColumn: Int, CaseIterable {
    case installationId, pushToStartToken, osVersion, appBuild, locale, frequentPushesEnabled, liveActivitiesEnabled
    case events, eventIds, topics, registeredAt

    init?(name: String) {
        guard let index = InstallationImportParser.csvColumns.firstIndex(of: name) else { return nil }
        self.init(rawValue: index)
    }

    /// The name a header gives it.
    var name: String { InstallationImportParser.csvColumns[rawValue] }

    static let shortTexts: [(CSVColumn, ClosedRange<Int>)] = [(.appBuild, RegistrationLimits.appBuild), (.locale, RegistrationLimits.locale)]
    static let flags: [CSVColumn] = [.frequentPushesEnabled, .liveActivitiesEnabled]

    /// Whether a header with this column replaces each row's follows.
    var isFollows: Bool { self == .events || self == .eventIds || self == .topics }
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
