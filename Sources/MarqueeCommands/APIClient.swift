// What the API commands (`event`, `channel`, `status`) share: the connection options, one HTTP/1.1 client
// per command run, API answers turned into documented exit codes, and the local checks of flag values
// (JSON, dates, ids) that fail as usage errors naming the flag before anything is sent.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import Network
import Synchronization

/// A client of Marquee's HTTP API for one command run: `--url`, `--api-key`, `--ca-file`, `--timeout`.
struct AdminAPIClient: Sendable {
    /// The options every API command takes (plus `--json` and `--help`, which every command has), for a command
    /// that needs an admin key.
    static let options = makeOptions(keyHelp: "An API key of scope admin; never printed.")

    /// The options of a command a feed may call with its ingest key (event update, end, reschedule, cancel).
    static let ingestOptions = makeOptions(keyHelp: "An API key of scope ingest (a feed's) or admin; never printed.")

    private static func makeOptions(keyHelp: String) -> [Argument] {
        [
            .option(
                "url", value: "URL", help: "The Marquee API (http:// or https://).", environment: "MARQUEE_URL",
                default: "http://\(ServeConfiguration.defaultListen)"),
            .option("api-key", value: "KEY", help: keyHelp, environment: "MARQUEE_API_KEY"),
            .option(
                "ca-file", value: "PATH", help: "A PEM file of CAs to trust for an https URL, besides the system's.", environment: "MARQUEE_CA_FILE"),
            .option("timeout", value: "SECONDS", help: "How long one request may take.", default: "30"),
        ]
    }

    /// The exit codes of the API commands, for their `--help`: 409 is a refusal (1), like the database commands'.
    static let exitCodes = ExitCode.help([.success, .failure, .usage, .dataError, .noInput, .unavailable, .temporaryFailure, .permissionDenied])

    /// The API's request body limit: a larger body is refused here, before sending.
    static let maxBodySize = APIServer.defaultMaxBodySize

    private let client: HTTP1Client
    private let loop: EventLoop
    private let apiKey: String?
    let arguments: ParsedArguments

    /// Runs `body` with a client for the command's `--url`, then closes it and its loop.
    static func with<T: Sendable>(_ arguments: ParsedArguments, _ body: (AdminAPIClient) async throws -> T) async throws -> T {
        let path = arguments.commandPath
        let seconds = try arguments.int("timeout", in: 1...3600) ?? 30
        let url = try arguments.required("url")
        let caFile = arguments.string("ca-file")
        let configuration = HTTP1ClientConfiguration(timeout: .seconds(seconds), extraCAFile: caFile)
        let loop = EventLoop(name: "marquee-api")
        defer { loop.shutdown() }
        // For https the client reads the CA files: on a thread of its own, never on Swift's cooperative pool.
        let made = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
                    return continuation.resume(
                        returning: Result<HTTP1Client, UsageError>.failure(UsageError("--ca-file: cannot read \(caFile)", commandPath: path)))
                }
                do throws(HTTP1ClientError) {
                    continuation.resume(returning: .success(try HTTP1Client(url: url, loop: loop, configuration: configuration)))
                } catch {
                    let flag = if case .invalidURL = error { "--url" } else { "--ca-file" }
                    continuation.resume(returning: .failure(UsageError("\(flag): \(error)", commandPath: path)))
                }
            }
        }
        let client = try made.get()
        // Checked here, after the command line: a request without a key would only come back 401.
        guard arguments.string("api-key")?.isEmpty == false else {
            await client.close()
            throw CommandFailure(
                "no API key: pass --api-key or set MARQUEE_API_KEY (make one with 'marquee key create --scope admin')",
                exitCode: .permissionDenied, code: "missing_api_key", field: "api-key")
        }
        let api = AdminAPIClient(client: client, loop: loop, apiKey: arguments.string("api-key"), arguments: arguments)
        do {
            let result = try await body(api)
            await client.close()
            return result
        } catch {
            await client.close()
            throw error
        }
    }

    /// One request; a 2xx answer's body (parsed, and as sent for `--json`), anything else a `CommandFailure`.
    func send(
        _ method: String, _ path: String, query: [(String, String?)] = [], body: JSONValue? = nil,
        headers extra: [(String, String)] = []
    ) async throws -> APIAnswer {
        var headers: HTTPHeaders = ["accept": "application/json", "user-agent": "marquee-cli"]
        if let apiKey { headers.add("authorization", "Bearer \(apiKey)") }
        if body != nil { headers.add("content-type", "application/json") }
        for (name, value) in extra { headers.add(name, value) }
        let items = query.compactMap { name, value in value.map { "\(name)=\(Self.percentEncoded($0))" } }
        let target = items.isEmpty ? path : path + "?" + items.joined(separator: "&")
        let bytes = body?.jsonBytes ?? []
        guard bytes.count <= Self.maxBodySize else {
            throw CommandFailure(
                "the request body is \(bytes.count) bytes, over the API's \(Self.maxBodySize)-byte limit; nothing was sent",
                exitCode: .dataError, code: "payload_too_large")
        }
        let response: HTTPResponse
        do {
            response = try await client.send(HTTPRequest(method: method, path: target, headers: headers, body: bytes))
        } catch {
            throw Self.failure(error)
        }
        let json: JSONValue
        do {
            json = response.body.isEmpty ? .null : try JSONValue(parsing: response.body)
        } catch {
            if response.status == 413 {
                throw CommandFailure("the server refused the request body as too large (413)", exitCode: .dataError, code: "payload_too_large")
            }
            throw CommandFailure(
                "\(client.url) answered \(method) \(path) with \(response.status) and a body that is not JSON: is --url a Marquee server?",
                exitCode: .unavailable, code: "unexpected_response")
        }
        guard (200..<300).contains(response.status) else { throw Self.failure(status: response.status, json: json, plain: arguments.json) }
        return APIAnswer(json: json, text: String(decoding: response.body, as: UTF8.self))
    }

    /// Follows `nextCursor` from the first page (or `start`) to the last, handing each page's `collection` to `body` as it
    /// arrives (so nothing printed is lost to a Ctrl-C); returns how many items came. On SIGINT it says on
    /// stderr how far it got and the cursor to resume from, then exits 130.
    func eachPage(
        _ path: String, query: [(String, String?)], from start: String? = nil, collection: String, noun: String,
        _ body: ([JSONValue]) -> Void
    ) async throws -> Int {
        let progress = Mutex((count: 0, cursor: String?.none))
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler {
            // Exits holding the lock: no page can be printed between the count read here and the exit.
            progress.withLock { state in
                Terminal.error("\nmarquee: interrupted after \(state.count) \(noun)" + (state.cursor.map { "; resume with --cursor \($0)" } ?? ""))
                exit(ExitCode.interrupted.rawValue)
            }
        }
        interrupt.resume()
        defer {
            interrupt.cancel()
            signal(SIGINT, SIG_DFL)
        }
        var cursor = start
        repeat {
            let page = try await send("GET", path, query: query + [("cursor", cursor)]).json
            let items = page[collection]?.arrayValue ?? []
            cursor = page["nextCursor"]?.stringValue
            // Printed and counted under the lock the interrupt takes: what it reports is exactly what was printed.
            progress.withLock { state in
                body(items)
                state = (state.count + items.count, cursor)
            }
        } while cursor != nil
        return progress.withLock { $0.count }
    }

    /// A transport failure: 69 when the server cannot be reached (refused, TLS, certificate) with what to check,
    /// 75 when it was reached and the answer did not come (a timeout, a closed connection): try again later.
    static func failure(_ error: HTTP1ClientError) -> CommandFailure {
        switch error {
        case .certificateRejected: CommandFailure("\(error); pass its CA with --ca-file", exitCode: .unavailable, code: "unreachable")
        case .timedOut, .connectionClosed: CommandFailure("\(error); try again later", exitCode: .temporaryFailure, code: "temporary_failure")
        default: CommandFailure("\(error)", exitCode: .unavailable, code: "unreachable")
        }
    }

    /// An API error answer: the server's message and field, and the exit code for its status. `plain` keeps
    /// the server's message as it is (for `--json`), else the status and a hint are added for a person.
    static func failure(status: Int, json: JSONValue, plain: Bool) -> CommandFailure {
        let error = json["error"]
        let code = error?["code"]?.stringValue ?? "http_\(status)"
        var message = error?["message"]?.stringValue ?? "the server answered \(status)"
        let field = error?["field"]?.stringValue
        if !plain {
            if let field, !message.hasPrefix(field) { message += " (field: \(field))" }
            message += " [HTTP \(status) \(code)]"
            if status == 401 { message += "; pass an API key with --api-key or MARQUEE_API_KEY (marquee key create --scope admin)" }
        }
        let exitCode: ExitCode
        switch status {
        case 401, 403: exitCode = .permissionDenied
        case 404: exitCode = .noInput
        case 409: exitCode = .failure
        case 429: exitCode = .temporaryFailure
        case 400..<500: exitCode = .dataError
        default: exitCode = .temporaryFailure
        }
        return CommandFailure(message, exitCode: exitCode, code: code, field: field)
    }

    private static func percentEncoded(_ value: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}

/// A successful API answer: parsed, and the body as the server sent it (what `--json` prints).
struct APIAnswer: Sendable {
    let json: JSONValue
    let text: String
}

/// Flag values checked before anything is sent; each failure is a usage error naming the flag.
struct APIInput {
    let arguments: ParsedArguments
    var path: [String] { arguments.commandPath }

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    /// A positive integer id, from a positional or an option.
    func id(_ name: String, positional: Bool = false) throws -> Int64? {
        guard let text = arguments.string(name) else { return nil }
        guard let value = Int64(text), value > 0 else {
            throw UsageError(
                "\(positional ? name.uppercased() : "--\(name)") takes a positive whole number, not '\(text)'", field: name,
                commandPath: path)
        }
        return value
    }

    /// A JSON object given inline or as `@FILE` (`@-` reads standard input).
    func object(_ name: String) async throws -> JSONValue? {
        guard let text = arguments.string(name) else { return nil }
        var bytes = Array(text.utf8)
        if text.hasPrefix("@") {
            let file = String(text.dropFirst())
            do {
                bytes = file == "-" ? try await Self.readStandardInput() : try await APNsCommandLine.readFile(file)
            } catch {
                throw UsageError("--\(name): cannot read \(file): \(error.localizedDescription)", commandPath: path)
            }
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            throw UsageError("--\(name) is not valid JSON: \(error)", commandPath: path)
        }
        guard value.objectValue != nil else { throw UsageError("--\(name) must be a JSON object, not \(value.typeName)", commandPath: path) }
        return value
    }

    /// A date as the API wants it (ISO 8601 with Z): ISO 8601 with Z or an offset, `now`, or `now+90s`, `now-15m`, `now+2h`, `now+1d`.
    func date(_ name: String, now: Date = Date()) throws -> String? {
        guard let text = arguments.string(name) else { return nil }
        guard let date = Self.parseDate(text, now: now) else {
            throw UsageError(
                "--\(name) takes an ISO 8601 date such as 2026-05-01T19:45:00Z, or now, now+2h, now-15m; not '\(text)'",
                commandPath: path)
        }
        return Self.format(date)
    }

    /// A number, checked against a range.
    func number(_ name: String, in range: ClosedRange<Double>) throws -> Double? {
        guard let text = arguments.string(name) else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            func bound(_ number: Double) -> String { Int64(exactly: number).map(String.init) ?? String(number) }
            throw UsageError(
                "--\(name) takes a number from \(bound(range.lowerBound)) to \(bound(range.upperBound)), not '\(text)'", commandPath: path)
        }
        return value
    }

    static func parseDate(_ text: String, now: Date) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed == "now" { return now }
        if trimmed.hasPrefix("now"), trimmed.count > 4 {
            let sign: Double = trimmed.dropFirst(3).first == "-" ? -1 : 1
            guard ["+", "-"].contains(trimmed.dropFirst(3).first), let unit = trimmed.last,
                let amount = Double(trimmed.dropFirst(4).dropLast()), amount.isFinite
            else { return nil }
            let seconds: Double? =
                switch unit {
                case "s": 1
                case "m": 60
                case "h": 3600
                case "d": 86400
                default: nil
                }
            return seconds.map { now.addingTimeInterval(sign * amount * $0) }
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: trimmed) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: trimmed)
    }

    static func format(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        let whole = date.timeIntervalSince1970.rounded(.down) == date.timeIntervalSince1970
        formatter.formatOptions = whole ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    private static func readStandardInput() async throws -> [UInt8] {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: [UInt8](FileHandle.standardInput.readDataToEndOfFile())) }
        }
    }
}

/// Human output of API objects: key: value blocks and table cells.
enum APIText {
    /// `key: value` lines with the values aligned.
    static func block(_ rows: [(String, String)]) -> String {
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { key, value in "\((key + ":").padding(toLength: width + 1, withPad: " ", startingAt: 0)) \(value)" }
            .joined(separator: "\n")
    }

    /// A JSON value as one cell: `-` for null or absent, strings bare, lists joined, objects as compact JSON.
    static func cell(_ value: JSONValue?) -> String {
        switch value {
        case nil, .null?: "-"
        case .string(let text)?: text.isEmpty ? "-" : text
        case .bool(let flag)?: flag ? "yes" : "no"
        case .int(let number)?: String(number)
        case .double(let number)?: String(number)
        case .array(let items)? where items.allSatisfy({ $0.stringValue != nil || $0.intValue != nil }):
            items.isEmpty ? "-" : items.map { cell($0) }.joined(separator: ", ")
        case let other?: other.jsonString
        }
    }

    /// Prints `--json` as the server sent it, else the human text: the data on standard output (nothing when
    /// `text` is empty) and the `note` for a person on standard error.
    static func emit(
        _ arguments: ParsedArguments, _ answer: APIAnswer, text: (JSONValue) -> String,
        note: (JSONValue) -> String? = { _ in nil }
    ) {
        guard !arguments.json else { return Terminal.print(answer.text) }
        let data = text(answer.json)
        if !data.isEmpty { Terminal.print(data) }
        if let note = note(answer.json) { Terminal.error(note) }
    }
}
