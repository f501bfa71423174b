// `marquee event start|starts`: the start runs of an event through the HTTP API (POST /v1/events/{id}/starts,
// GET /v1/events/{id}/starts). A run sends the push-to-start of the followers' Live Activities; `starts --follow`
// polls the newest one until it is no longer running.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import Synchronization

extension EventCommands {
    static let start = Command(
        "start", summary: "Start the followers' Live Activities now: a manual start run.",
        discussion: """
            Sends the event's push-to-start to its audience (the installations that follow the event or one of
            its topics); --topic narrows the audience to those of the event's topics. Without --alert-title and
            --alert-body the run uses the event's start alert (event create --start-alert). The answer is the
            new run; follow it with 'marquee event starts ID --follow'.

            The server refuses an event that is ending, ended or cancelled (409 event_over: exit 1), an event
            with no start alert here or on the event (422 no_alert: exit 65), and a --topic that is not one of
            the event's (422: exit 65).

            Example:
              marquee event start 42 --topic team:arsenal --alert-title Kick-off --alert-body "Arsenal v Chelsea"

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("id", help: "The event id (marquee event list)."),
            .option("topic", value: "TOPIC", help: "Only installations that follow this topic of the event.", repeatable: true),
            .option("alert-title", value: "TEXT", help: "The push-to-start's alert title (with --alert-body)."),
            .option("alert-body", value: "TEXT", help: "The push-to-start's alert body (with --alert-title)."),
            .option("alert-sound", value: "NAME", help: "The alert's sound, e.g. default (with --alert-title and --alert-body)."),
        ] + AdminAPIClient.options
    ) { arguments in
        let id = try APIInput(arguments).id("id", positional: true)!
        let body = try startBody(arguments)
        let answer = try await AdminAPIClient.with(arguments) { api in
            try await api.send("POST", "/v1/events/\(id)/starts", body: .object(body))
        }
        // `RUN=$(marquee event start ...)`: the new run's id; its state and where to follow it are a note.
        APIText.emit(
            arguments, answer, text: { run in APIText.cell(run["id"]) },
            note: { run in
                "start run \(APIText.cell(run["id"])) of event \(id): \(StartRunText.state(run))"
                    + (run["state"] == "running" ? "; follow it with: marquee event starts \(id) --follow" : "")
            })
    }

    static let starts = Command(
        "starts", summary: "List an event's start runs, newest first; --follow watches the newest one.",
        discussion: """
            A run is automatic (the fan-out before the event starts, --audience-lead ahead) or manual (marquee
            event start). Its state is running (the first pass over the audience), rolling (first pass done;
            followers who come late are started until shortly before the event ends), done, skipped (never
            ran: too late, or no start alert) or stopped (the event ended or was cancelled during the run).

            Columns: AUDIENCE, the installations considered; ACCEPTED, push-to-starts APNs accepted; REJECTED
            and SKIPPED, totals of each reason (event start's answer and --json break them down); UNKNOWN, no
            answer known; ADOPTION, started activities the app registered within 10 minutes of the start. An
            APNs 200 is not adoption: it shows only for apps that register activities with PUT
            /v1/installations/{id}/activities/{activityId}.

            --follow polls every --interval seconds and shows the newest run's progress on standard error
            (a bar drawn in place on a terminal, else a line per poll: decided of the estimated audience, rate,
            time left) until the run is done, skipped or stopped, then prints the run (with --json, the run
            object alone). Before the event has a run it waits for one (the automatic run comes at the audience
            lead); a rolling run is followed through its late passes. While the run waits for the event's
            channel (iOS 18 devices start on it), the line says so. Ctrl-C stops following and says how far the
            run got (exit 130).

            Example:
              marquee event starts 42
              marquee event starts 42 --follow --interval 2

            \(ExitCode.help([.success, .failure, .usage, .dataError, .noInput, .unavailable, .temporaryFailure, .permissionDenied, .interrupted]))
            """,
        arguments: [
            .positional("id", help: "The event id (marquee event list)."),
            .flag("follow", help: "Poll the newest run (waiting for one) until it is done, skipped or stopped, showing its progress."),
            .option("interval", value: "SECONDS", help: "Seconds between polls with --follow, 0.1 to 3600 (default 1)."),
        ] + AdminAPIClient.options
    ) { arguments in
        let id = try APIInput(arguments).id("id", positional: true)!
        let interval = try followInterval(arguments)
        guard let interval else {
            let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/events/\(id)/starts") }
            return APIText.emit(arguments, answer) { StartRunText.table($0["runs"]?.arrayValue ?? []) }
        }
        let run = try await AdminAPIClient.with(arguments) { api in try await follow(api, event: id, every: interval) }
        Terminal.emit(arguments, text: StartRunText.block(run), json: run)
    }

    // MARK: Input

    /// The body of `event start`: `topics` and `alert`, checked before anything is sent.
    static func startBody(_ arguments: ParsedArguments) throws -> JSONObject {
        let path = arguments.commandPath
        var body = JSONObject()
        let topics = arguments.strings("topic")
        if topics.contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
            throw UsageError("--topic takes a topic of the event, e.g. team:arsenal, not an empty string", commandPath: path)
        }
        if !topics.isEmpty { body["topics"] = .array(topics.map(JSONValue.string)) }
        let title = arguments.string("alert-title")
        let text = arguments.string("alert-body")
        let sound = arguments.string("alert-sound")
        switch (title, text) {
        case (let title?, let text?):
            var alert: JSONObject = ["title": .string(title), "body": .string(text)]
            if let sound { alert["sound"] = .string(sound) }
            body["alert"] = .object(alert)
        case (nil, nil):
            if sound != nil {
                throw UsageError(
                    "--alert-sound needs --alert-title and --alert-body (without all three the event's start alert is used)", commandPath: path)
            }
        case (nil, _?):
            throw UsageError("missing --alert-title: an alert needs a title and a body (or neither, for the event's start alert)", commandPath: path)
        case (_?, nil):
            throw UsageError("missing --alert-body: an alert needs a title and a body (or neither, for the event's start alert)", commandPath: path)
        }
        return body
    }

    /// The seconds between polls with --follow (default 1), nil without it; --interval without --follow is a usage error.
    static func followInterval(_ arguments: ParsedArguments) throws -> Double? {
        let interval = try arguments.seconds("interval", in: 0.1...3600)
        guard arguments.flag("follow") else {
            if interval != nil { throw UsageError("--interval goes with --follow", commandPath: arguments.commandPath) }
            return nil
        }
        return interval ?? 1
    }

    // MARK: --follow

    /// Polls the event's runs until the newest one (the first that appears, when there is none yet) is over (done,
    /// skipped or stopped: a rolling run is followed through its late passes), and returns it. Its progress goes to
    /// standard error, unless --json; a Ctrl-C says where the run was and exits 130.
    static func follow(_ api: AdminAPIClient, event id: Int64, every interval: Double) async throws -> JSONValue {
        let json = api.arguments.json
        let line = StatusLine(enabled: !json)
        let latest = Mutex(JSONValue?.none)
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler {
            // Exits holding the lock: no poll's line is drawn between the run read here and the exit.
            latest.withLock { run in
                line.finish()
                if json, let run { Terminal.print(run.jsonString) }
                Terminal.error(StartRunText.interruption(run, event: id))
                exit(ExitCode.interrupted.rawValue)
            }
        }
        interrupt.resume()
        defer {
            interrupt.cancel()
            signal(SIGINT, SIG_DFL)
        }
        var followed: Int64?
        do {
            while true {
                let runs = try await api.send("GET", "/v1/events/\(id)/starts").json["runs"]?.arrayValue ?? []
                guard let run = runs.first(where: { followed != nil && $0["id"]?.intValue == followed }) ?? runs.first else {
                    // No run yet: the automatic one comes at the audience lead (or an operator starts one).
                    line.show(StartRunText.waitingForARun(event: id))
                    try await Task.sleep(for: .seconds(interval))
                    continue
                }
                followed = run["id"]?.intValue
                // A running run's iOS 18 starts wait for the event's channel: say so while it is not open.
                var channelState: String?
                if run["state"] == "running" {
                    channelState = try await api.send("GET", "/v1/events/\(id)").json["channel"]?["state"]?.stringValue ?? "none"
                }
                latest.withLock { last in
                    last = run
                    line.show(
                        StartRunText.progressLine(run, barWidth: line.inPlace ? StartRunText.barWidth : nil)
                            + (StartRunText.channelWait(run, channelState: channelState).map { "; " + $0 } ?? ""))
                }
                guard StartRunText.isOpen(run) else { break }
                try await Task.sleep(for: .seconds(interval))
            }
        } catch {
            line.finish()
            throw error
        }
        line.finish()
        return latest.withLock { $0 }!
    }
}

/// Human output of start runs, pure functions of the run objects the API answers.
enum StartRunText {
    /// The width of `--follow`'s bar: with the rest of the line it fits 80 columns.
    static let barWidth = 24

    /// `event starts`: one row per run, its skips by reason.
    static func table(_ runs: [JSONValue]) -> String {
        guard !runs.isEmpty else { return "(no start runs)" }
        return Terminal.table(
            ["ID", "KIND", "STATE", "AUDIENCE", "ACCEPTED", "REJECTED", "SKIPPED", "UNKNOWN", "ADOPTION"],
            runs.map { run in
                let counts = run["counts"]
                return [
                    APIText.cell(run["id"]), APIText.cell(run["kind"]), state(run), APIText.cell(counts?["audience"]),
                    APIText.cell(counts?["accepted"]), String(total(counts?["rejected"])), breakdown(counts?["skipped"]),
                    APIText.cell(counts?["unknown"]), APIText.cell(run["adoption"]?["total"]),
                ]
            })
    }

    /// `event start` and the end of `event starts --follow`: one run, every count broken down.
    static func block(_ run: JSONValue) -> String {
        let counts = run["counts"]
        var audience = APIText.cell(counts?["audience"])
        if let below = integer(counts?["notStartable"]), below > 0 { audience += " (\(below) not startable: below iOS 17.2)" }
        var accepted = APIText.cell(counts?["accepted"])
        if let bare = integer(counts?["noChannel"]), bare > 0 { accepted += " (\(bare) without a channel: the event had none)" }
        // null: every topic of the event.
        let topics = run["topics"]?.arrayValue.map { APIText.cell(.array($0)) } ?? "all of the event's"
        return APIText.block([
            ("id", APIText.cell(run["id"])), ("event", APIText.cell(run["eventId"])), ("kind", APIText.cell(run["kind"])),
            ("state", state(run)), ("topics", topics), ("due", APIText.cell(run["dueAt"])), ("started", APIText.cell(run["startedAt"])),
            ("first pass done", APIText.cell(run["firstPassDoneAt"])), ("finished", APIText.cell(run["finishedAt"])),
            ("audience", audience), ("planned", APIText.cell(counts?["planned"])), ("sending", APIText.cell(counts?["sending"])),
            ("accepted", accepted), ("unknown", APIText.cell(counts?["unknown"])),
            ("rejected", breakdown(counts?["rejected"])), ("skipped", breakdown(counts?["skipped"])),
            ("progress", progressSummary(run)), ("lag", run["lagSeconds"]?.doubleValue.map(duration) ?? "-"),
            ("adoption", adoption(run["adoption"])),
        ])
    }

    /// `--follow`'s line for one poll; with `barWidth`, a bar for a terminal.
    /// `run 3 running [############            ] 50% 650/~1300, 812.5/s, eta 0.8s`
    static func progressLine(_ run: JSONValue, barWidth: Int? = nil) -> String {
        let progress = run["progress"]
        let decided = integer(progress?["decided"]) ?? 0
        var line = "run \(APIText.cell(run["id"])) \(state(run))"
        if let barWidth {
            let total = integer(progress?["estimatedAudience"]).map { max($0, decided) } ?? 0
            line += " [\(ProgressBar.bar(done: Int(decided), total: Int(total), width: barWidth))]"
        }
        return line + " " + progressSummary(run)
    }

    /// `50% 650/~1300, 812.5/s, eta 0.8s`: the decided share of the estimated audience, the rate and the time left.
    static func progressSummary(_ run: JSONValue) -> String {
        let progress = run["progress"]
        let decided = integer(progress?["decided"]) ?? 0
        var parts: [String] = []
        if let estimate = integer(progress?["estimatedAudience"]) {
            let total = max(estimate, decided)
            parts.append((total > 0 ? "\(decided * 100 / total)% " : "") + "\(decided)/~\(estimate)")
        } else {
            parts.append("\(decided) decided")
        }
        if let rate = progress?["ratePerSecond"]?.doubleValue { parts.append(String(format: "%.1f/s", rate)) }
        parts.append("eta " + (progress?["etaSeconds"]?.doubleValue.map(duration) ?? "?"))
        return parts.joined(separator: ", ")
    }

    /// Whether `--follow` goes on polling the run: running (its first pass) or rolling (late passes to come).
    static func isOpen(_ run: JSONValue) -> Bool { run["state"] == "running" || run["state"] == "rolling" }

    /// `--follow`'s line before the event has a run.
    static func waitingForARun(event: Int64) -> String {
        "event \(event) has no start run yet: waiting for one (the automatic run comes at the audience lead; "
            + "'marquee event start \(event)' starts one now)"
    }

    /// What `--follow` adds while a running run's iOS 18 starts wait for the event's channel (`channelState`: the
    /// channel's state, `none` without one; nil when not asked).
    static func channelWait(_ run: JSONValue, channelState: String?) -> String? {
        guard run["state"] == "running", let channelState, channelState != "open" else { return nil }
        return "iOS 18 devices wait for the event's channel (\(channelState == "none" ? "not planned yet" : channelState))"
    }

    /// What a Ctrl-C during `--follow` says: how far the run was at the last poll; it goes on at the server.
    static func interruption(_ run: JSONValue?, event: Int64) -> String {
        guard let run else { return "marquee: interrupted; event \(event) had no start run yet" }
        return "marquee: interrupted; start run \(APIText.cell(run["id"])) of event \(event) goes on at the server "
            + "(last seen \(state(run)): \(progressSummary(run)))"
    }

    /// The state, with the reason of a skipped run: `skipped (late)`.
    static func state(_ run: JSONValue) -> String {
        let state = APIText.cell(run["state"])
        guard let reason = run["skipReason"]?.stringValue else { return state }
        return "\(state) (\(reason))"
    }

    /// The sum of an object of counts (`rejected`, `skipped`); 0 when absent.
    static func total(_ counts: JSONValue?) -> Int64 {
        (counts?.objectValue ?? [:]).reduce(0) { $0 + (integer($1.value) ?? 0) }
    }

    /// `3: BadDeviceToken 1, Unregistered 2`, the reasons that count, in the server's order; `0` when none do.
    static func breakdown(_ counts: JSONValue?) -> String {
        let parts = (counts?.objectValue ?? [:]).compactMap { key, value in
            integer(value).flatMap { $0 > 0 ? "\(key) \($0)" : nil }
        }
        return parts.isEmpty ? "0" : "\(total(counts)): " + parts.joined(separator: ", ")
    }

    /// `900 (iOS 17: 300, iOS 18: 600)`, by OS major version in order.
    static func adoption(_ adoption: JSONValue?) -> String {
        var text = APIText.cell(adoption?["total"])
        let byMajor = (adoption?["byOSMajor"]?.objectValue ?? [:]).compactMap { key, value in integer(value).map { (key, $0) } }
            .sorted { (Int($0.0) ?? .max, $0.0) < (Int($1.0) ?? .max, $1.0) }
        if !byMajor.isEmpty { text += " (" + byMajor.map { "iOS \($0.0): \($0.1)" }.joined(separator: ", ") + ")" }
        return text
    }

    /// `0.8s`, `42s`, `3m05s`, `2h07m`.
    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "?" }
        if seconds < 10 { return String(format: "%.1fs", seconds) }
        let whole = Int(seconds.rounded())
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return String(format: "%dm%02ds", whole / 60, whole % 60) }
        return String(format: "%dh%02dm", whole / 3600, whole % 3600 / 60)
    }

    /// A count as a whole number (the API sends integers; a double is cut).
    static func integer(_ value: JSONValue?) -> Int64? {
        if let number = value?.intValue { return number }
        return value?.doubleValue.flatMap { $0.isFinite ? Int64($0) : nil }
    }
}
