// `marquee event reschedule|edit|cancel`: events that move, through the HTTP API (PATCH /v1/events/{id},
// POST /v1/events/{id}/cancel). Warnings of the answer go to standard error, so --json output stays the answer.
import Foundation
import MarqueeCommandLine
import MarqueeCore

extension EventCommands {
    static let reschedule = Command(
        "reschedule", summary: "Move an event: new start and end times (and audience lead); the channel, starts and end follow.",
        discussion: """
            The scheduler follows the new times: the channel opens a lead time before the new start, the audience
            is started its lead before it, and the automatic end comes after the new end. A start moved later by
            more than serve's --restart-on-postpone after the start run went out postpones the event: the running
            activities end with --postponed-state and the audience is started again at the new lead. An 'ingest'
            key may reschedule. An ended or cancelled event answers 409.

            Example:
              marquee event reschedule 42 --starts-at 2026-05-01T21:15:00Z --ends-at 2026-05-01T23:30:00Z

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("id", help: "The event id (marquee event list)."),
            .option("starts-at", value: "DATE", help: "The new start."),
            .option("ends-at", value: "DATE", help: "The new expected end (after the start)."),
            .option("audience-lead", value: "SECONDS", help: "Start the followers' Live Activities this long before the start (0 to 604800)."),
            .option(
                "postponed-state", value: "JSON",
                help:
                    "The state that ends the running activities if this postpones the event past serve's --restart-on-postpone (default: the latest)."
            ),
        ] + AdminAPIClient.ingestOptions
    ) { arguments in
        let input = APIInput(arguments)
        let id = try input.id("id", positional: true)!
        var body = JSONObject()
        if let date = try input.date("starts-at") { body["startsAt"] = .string(date) }
        if let date = try input.date("ends-at") { body["endsAt"] = .string(date) }
        if let starts = body["startsAt"]?.stringValue.flatMap({ APIInput.parseDate($0, now: Date()) }),
            let ends = body["endsAt"]?.stringValue.flatMap({ APIInput.parseDate($0, now: Date()) }), ends <= starts
        {
            throw UsageError("--ends-at must be after --starts-at", commandPath: arguments.commandPath)
        }
        if let lead = try arguments.int("audience-lead", in: 0...604_800) { body["audienceLead"] = .int(Int64(lead)) }
        let postponedState = try await input.object("postponed-state")
        guard !body.isEmpty else {
            throw UsageError("give --starts-at, --ends-at or --audience-lead", commandPath: arguments.commandPath)
        }
        if let postponedState { body["postponedState"] = postponedState }
        try await patch(arguments, id: id, body: body, verb: "rescheduled")
    }

    static let edit = Command(
        "edit", summary: "Change who an event starts, what its push-to-start says, and its freshness policy.",
        discussion: """
            --topic replaces the event's topics (repeat it for several; --no-topics removes them all). The start
            alert is the alert of the followers' push-to-start. Both need an 'admin' key. --freshness replaces the
            event's own freshness members (an 'ingest' key will do); pushes sent from then on follow it.
            Attributes never change: running activities keep the ones they were started with.

            Examples:
              marquee event edit 42 --topic team:arsenal --topic team:chelsea \\
                --start-alert-title "Kick-off delayed" --start-alert-body "Arsenal v Chelsea, now 21:15"
              marquee event edit 42 --freshness '{"staleAfter": 300, "dismissAfter": 900}'

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("id", help: "The event id (marquee event list)."),
            .option("topic", value: "TOPIC", help: "An audience topic, e.g. team:arsenal; replaces the event's topics.", repeatable: true),
            .flag("no-topics", help: "Remove every topic of the event."),
            .option("start-alert-title", value: "TEXT", help: "The push-to-start alert's title."),
            .option("start-alert-body", value: "TEXT", help: "The push-to-start alert's body (with --start-alert-title)."),
            .option("start-alert", value: "JSON", help: "The whole push-to-start alert as JSON or @FILE."),
            .flag("no-start-alert", help: "Remove the start alert: automatic start runs are skipped."),
            .option("freshness", value: "JSON", help: Self.freshnessHelp),
            .flag("no-freshness", help: "Remove the event's own freshness members: its attribute type's policy applies."),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        let id = try input.id("id", positional: true)!
        var body = JSONObject()
        let topics = arguments.strings("topic")
        if arguments.flag("no-topics") {
            guard topics.isEmpty else { throw UsageError("give --topic or --no-topics, not both", commandPath: arguments.commandPath) }
            body["topics"] = .array([])
        } else if !topics.isEmpty {
            body["topics"] = .array(topics.map(JSONValue.string))
        }
        let title = arguments.string("start-alert-title")
        let text = arguments.string("start-alert-body")
        let whole = try await input.object("start-alert")
        if arguments.flag("no-start-alert") {
            guard title == nil, text == nil, whole == nil else {
                throw UsageError("--no-start-alert takes no other start alert option", commandPath: arguments.commandPath)
            }
            body["startAlert"] = .null
        } else if let whole {
            guard title == nil, text == nil else {
                throw UsageError("give either --start-alert or --start-alert-title/--start-alert-body, not both", commandPath: arguments.commandPath)
            }
            body["startAlert"] = whole
        } else if title != nil || text != nil {
            guard let title else { throw UsageError("--start-alert-body needs --start-alert-title", commandPath: arguments.commandPath) }
            body["startAlert"] = ["title": .string(title), "body": .string(text ?? "")]
        }
        let freshness = try await input.object("freshness")
        if arguments.flag("no-freshness") {
            guard freshness == nil else { throw UsageError("give --freshness or --no-freshness, not both", commandPath: arguments.commandPath) }
            body["freshness"] = .null
        } else if let freshness {
            body["freshness"] = freshness
        }
        guard !body.isEmpty else {
            throw UsageError(
                "give --topic, --no-topics, --start-alert-title, --start-alert, --no-start-alert, --freshness or --no-freshness",
                commandPath: arguments.commandPath)
        }
        try await patch(arguments, id: id, body: body, verb: "edited")
    }

    static let cancel = Command(
        "cancel", summary: "Call an event off: running activities end with a final state; nothing is sent if none started.",
        discussion: """
            Without --content-state or --patch the latest state is the final one. With activities that may be
            running, the final state goes out as the end (to the channel and to activity tokens) and the channel is
            deleted after the usual delay; with none, nothing is sent and an open channel is deleted at once. Start
            runs stop. An 'ingest' key may cancel; an ended or cancelled event answers 409.

            Example:
              marquee event cancel 42 --patch '{"period":"fullTime"}' --dismissal-date now+30m

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [.positional("id", help: "The event id (marquee event list).")] + stateArguments + [
            .option("dismissal-date", value: "DATE", help: "When devices remove the ended activity (at most 4 hours after the end).")
        ] + AdminAPIClient.ingestOptions
    ) { arguments in
        let input = APIInput(arguments)
        let id = try input.id("id", positional: true)!
        var body = try await stateBody(input, required: false)
        if let date = try input.date("dismissal-date") { body["dismissalDate"] = .string(date) }
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/events/\(id)/cancel", body: .object(body)) }
        APIText.emit(arguments, answer, text: { _ in "" }) { answer in
            let unreachable = Int(answer["unreachableStarts"]?.intValue ?? 0)
            let how =
                if answer["broadcast"] == true {
                    "the end goes out with update \(APIText.cell(answer["update"]?["id"])) to the channel and the activity tokens; "
                        + "the channel is deleted after the delay"
                } else {
                    "nothing was sent (no channel broadcasts and no activity token is registered to carry an end); "
                        + "its channel, if open, is deleted now"
                }
            let lost =
                unreachable > 0
                ? "; \(unreachable) accepted start\(unreachable == 1 ? "" : "s") cannot be reached (the app never registered the activity)"
                : ""
            return "cancelled event \(id): \(how)\(lost)"
        }
        printWarnings(answer.json)
    }

    static let freshnessHelp =
        #"The event's own freshness policy members, e.g. {"staleAfter":300,"relevanceScore":60,"dismissAfter":900}, or @FILE "#
        + "(docs/api.md, Freshness policies)."

    /// `PATCH /v1/events/{id}`, printing the event and its warnings.
    static func patch(_ arguments: ParsedArguments, id: Int64, body: JSONObject, verb: String) async throws {
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("PATCH", "/v1/events/\(id)", body: .object(body)) }
        // The event as it is now is the data; what was done is a note.
        APIText.emit(arguments, answer, text: eventBlock) { event in
            let postponed = event["postponed"] == true ? " (postponed: running activities end, the audience starts again)" : ""
            return "\(verb) event \(APIText.cell(event["id"]))\(postponed)"
        }
        printWarnings(answer.json)
    }

    /// The answer's `warnings`, one line each on standard error (with --json too: stdout stays the JSON).
    static func printWarnings(_ answer: JSONValue) {
        for warning in answer["warnings"]?.arrayValue ?? [] {
            Terminal.error("marquee: warning: \(APIText.cell(warning["message"])) (\(APIText.cell(warning["code"])))")
        }
    }
}
