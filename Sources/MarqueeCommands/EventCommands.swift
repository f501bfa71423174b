// `marquee event create|list|show|update|end`: events through the HTTP API (POST /v1/events, GET /v1/events,
// GET /v1/events/{id}, POST /v1/events/{id}/updates, POST /v1/events/{id}/end); `start` and `starts` are in
// EventStartCommands.swift, `reschedule`, `edit` and `cancel` in EventChangeCommands.swift.
import Foundation
import MarqueeCommandLine
import MarqueeCore

enum EventCommands {
    static let command = Command(
        "event", summary: "Create, list, show, update, move and end events (matches, flights), and start their followers' activities.",
        discussion: """
            Each event gets its own APNs broadcast channel, opened a lead time before it starts. Updates
            become broadcasts; an end sends the final state and the channel is deleted after a delay. A start
            run sends the push-to-start of the followers' Live Activities: on its own --audience-lead before the
            event starts, or at once with 'event start'; 'event starts' shows the runs.

            Example:
              export MARQUEE_URL=http://127.0.0.1:8080 MARQUEE_API_KEY=mq_...
              marquee event create --app 1 --external-id epl-ars-che --kind match \\
                --attribute-type MatchAttributes --starts-at 2026-05-01T19:45:00Z \\
                --attributes '{"home":"ARS","away":"CHE"}' --content-state '{"homeScore":0,"awayScore":0}'

            \(AdminAPIClient.exitCodes)
            """,
        subcommands: [create, list, show, update, end, reschedule, edit, cancel, start, starts])

    static let create = Command(
        "create", summary: "Create an event; its channel opens a lead time before it starts.",
        discussion: """
            --attribute-type names a type registered for the app ('marquee attribute-type create' registers one,
            'marquee attribute-type list' shows them); --attributes and --content-state are validated against its
            schema by the server.
            JSON values may be given inline or as @FILE (@- reads standard input). Dates are ISO 8601
            (2026-05-01T19:45:00Z, offsets allowed) or relative to now (now, now+2h, now-15m).

            Example:
              marquee event create --app 1 --external-id epl-ars-che --kind match \\
                --attribute-type MatchAttributes --starts-at now+1h --ends-at now+3h \\
                --topic team:arsenal --topic team:chelsea \\
                --attributes @match.json --content-state '{"homeScore":0,"awayScore":0}'

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .option("app", value: "ID", help: "The app id (marquee app list).", required: true),
            .option("external-id", value: "ID", help: "Your id for the event, unique per app, e.g. epl-2026-ars-che.", required: true),
            .option("kind", value: "KIND", help: "What the event is.", required: true, choices: ["match", "flight", "other"]),
            .option(
                "attribute-type", value: "NAME",
                help: "The attribute type registered for the app (marquee attribute-type list), e.g. MatchAttributes.",
                required: true),
            .option("starts-at", value: "DATE", help: "When it starts.", required: true),
            .option("ends-at", value: "DATE", help: "When it is expected to end (after --starts-at)."),
            .option("storage-policy", value: "POLICY", help: "What APNs keeps for devices that are offline.", choices: ["mostRecent", "none"]),
            .option("topic", value: "TOPIC", help: "An audience topic, e.g. team:arsenal or flight:UA1234.", repeatable: true),
            .option("attributes", value: "JSON", help: "The static attributes, a JSON object or @FILE."),
            .option("content-state", value: "JSON", help: "The initial content state, a JSON object or @FILE.", required: true),
            .option("audience-lead", value: "SECONDS", help: "Start the followers' Live Activities this long before --starts-at (0 to 604800)."),
            .option(
                "start-alert", value: "JSON", help: #"The push-to-start's alert, e.g. {"title":"Kick-off","body":"Arsenal v Chelsea"}, or @FILE."#),
            .option("freshness", value: "JSON", help: Self.freshnessHelp),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        var body: JSONObject = [
            "app": .int(try input.id("app")!),
            "externalId": .string(try arguments.required("external-id")),
            "kind": .string(try arguments.required("kind")),
            "attributeType": .string(try arguments.required("attribute-type")),
            "startsAt": .string(try input.date("starts-at")!),
        ]
        if let endsAt = try input.date("ends-at") {
            if let starts = APIInput.parseDate(body["startsAt"]!.stringValue!, now: Date()),
                let ends = APIInput.parseDate(endsAt, now: Date()), ends <= starts
            {
                throw UsageError("--ends-at must be after --starts-at", commandPath: arguments.commandPath)
            }
            body["endsAt"] = .string(endsAt)
        }
        if let policy = arguments.string("storage-policy") { body["storagePolicy"] = .string(policy) }
        if !arguments.strings("topic").isEmpty { body["topics"] = .array(arguments.strings("topic").map(JSONValue.string)) }
        body["attributes"] = try await input.object("attributes") ?? .object([:])
        body["contentState"] = try await input.object("content-state")
        if let lead = try arguments.int("audience-lead", in: 0...604_800) { body["audienceLead"] = .int(Int64(lead)) }
        if let alert = try await input.object("start-alert") { body["startAlert"] = alert }
        if let freshness = try await input.object("freshness") { body["freshness"] = freshness }
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/events", body: .object(body)) }
        // `EVENT=$(marquee event create ...)`: the id alone; what was created is a note (event show has the record).
        APIText.emit(arguments, answer, text: { APIText.cell($0["id"]) }) { event in
            "created event \(APIText.cell(event["id"])): \(APIText.cell(event["externalId"])), \(APIText.cell(event["status"])), "
                + "starts \(APIText.cell(event["startsAt"]))"
        }
        printWarnings(answer.json)
    }

    static let list = Command(
        "list", summary: "List events by start time, earliest first, with filters; --all follows every page.",
        discussion: """
            Example:
              marquee event list --app 1 --status live
              marquee event list --topic team:arsenal --starts-after now-1d --all --json

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .option("app", value: "ID", help: "Only this app's events."),
            .option("status", value: "STATUS", help: "Only events in this status.", choices: ["scheduled", "live", "ending", "ended", "cancelled"]),
            .option("kind", value: "KIND", help: "Only events of this kind.", choices: ["match", "flight", "other"]),
            .option("topic", value: "TOPIC", help: "Only events with this topic."),
            .option("starts-after", value: "DATE", help: "Only events starting after this date."),
            .option("starts-before", value: "DATE", help: "Only events starting before this date."),
            .option("limit", value: "N", help: "Events per page, 1 to 500 (the server's default is 100)."),
            .option("cursor", value: "CURSOR", help: "Continue from a page's nextCursor (with --all: from there to the last page)."),
            .flag("all", help: "Fetch every page (following nextCursor), printing each as it arrives; with --json, one event per line (JSON Lines)."),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        let limit = try arguments.int("limit", in: 1...500)
        var query: [(String, String?)] = [
            ("app", try input.id("app").map(String.init)), ("status", arguments.string("status")), ("kind", arguments.string("kind")),
            ("topic", arguments.string("topic")), ("startsAfter", try input.date("starts-after")),
            ("startsBefore", try input.date("starts-before")), ("limit", limit.map(String.init)),
        ]
        if arguments.flag("all") {
            var headerPrinted = false
            let count = try await AdminAPIClient.with(arguments) { api in
                try await api.eachPage("/v1/events", query: query, from: arguments.string("cursor"), collection: "events", noun: "events") { events in
                    if arguments.json {
                        for event in events { Terminal.print(event.jsonString) }
                    } else if !events.isEmpty {
                        let table = eventTable(events)
                        Terminal.print(headerPrinted ? String(table.drop { $0 != "\n" }.dropFirst()) : table)
                        headerPrinted = true
                    }
                }
            }
            if count == 0 && !arguments.json { Terminal.print(eventTable([])) }
            return
        }
        query.append(("cursor", arguments.string("cursor")))
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/events", query: query) }
        APIText.emit(
            arguments, answer, text: { page in eventTable(page["events"]?.arrayValue ?? []) },
            note: { page in page["nextCursor"]?.stringValue.map { "more: --cursor \($0) (or --all)" } })
    }

    static let show = Command(
        "show", summary: "Show an event with its channel, latest state and delivery counts.",
        discussion: "Example:\n  marquee event show 42\n\n\(AdminAPIClient.exitCodes)",
        arguments: [.positional("id", help: "The event id (marquee event list).")] + AdminAPIClient.options
    ) { arguments in
        let id = try APIInput(arguments).id("id", positional: true)!
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/events/\(id)") }
        APIText.emit(arguments, answer) { detail in
            var sections = [eventBlock(detail)]
            if let channel = detail["channel"], !channel.isNull {
                sections.append(
                    "channel:\n"
                        + indent(
                            APIText.block([
                                ("id", APIText.cell(channel["id"])), ("state", APIText.cell(channel["state"])),
                                ("apns channel", APIText.cell(channel["apnsChannelId"])), ("opened", APIText.cell(channel["openedAt"])),
                                ("last error", lastError(channel)),
                            ])))
            } else {
                sections.append("channel: none yet")
            }
            if let counts = detail["counts"]?.objectValue {
                sections.append("updates:\n" + indent(APIText.block(counts.map { ($0.key, APIText.cell($0.value)) })))
            }
            return sections.joined(separator: "\n")
        }
    }

    static let update = Command(
        "update", summary: "Send an update: a new content state (whole or a merge patch), optionally with an alert.",
        discussion: """
            Exactly one of --content-state (the whole state) or --patch (an RFC 7386 JSON merge patch applied to
            the latest state) is required. The server answers once the update is durable; the broadcast follows.
            With --idempotency-key, repeating the same command returns the first answer instead of a second update.

            Example:
              marquee event update 42 --patch '{"homeScore":1}' --alert-title GOAL --alert-body "Saka 54'" \\
                --priority high --idempotency-key feed-8812

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [.positional("id", help: "The event id.")] + stateArguments + alertArguments + [
            .option("priority", value: "PRIORITY", help: "auto: 10 for alerts and significant changes, else 5.", choices: ["auto", "high", "low"]),
            .option("occurred-at", value: "DATE", help: "When it happened at the source (default: now); an older one than the latest is superseded."),
            .option("stale-date", value: "DATE", help: "When the system may show the activity as out of date."),
            .option(
                "relevance-score", value: "NUMBER",
                help: "The activity's relevance among the app's activities, 0 to 1000000 (the policy's scale: 50 unless it says otherwise)."),
            .option("idempotency-key", value: "KEY", help: "1 to 255 printable ASCII characters; a retry with the same key is answered once."),
        ] + AdminAPIClient.ingestOptions
    ) { arguments in
        let input = APIInput(arguments)
        let id = try input.id("id", positional: true)!
        var body = try await stateBody(input, required: true)
        if let alert = try await alert(input) { body["alert"] = alert }
        if let priority = arguments.string("priority") { body["priority"] = .string(priority) }
        if let date = try input.date("occurred-at") { body["occurredAt"] = .string(date) }
        if let date = try input.date("stale-date") { body["staleDate"] = .string(date) }
        if let score = try input.number("relevance-score", in: FreshnessSettings.scoreRange) {
            body["relevanceScore"] = Int64(exactly: score).map(JSONValue.int) ?? .double(score)
        }
        var headers: [(String, String)] = []
        if let key = arguments.string("idempotency-key") {
            guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw UsageError("--idempotency-key takes 1 to 255 printable ASCII characters without spaces", commandPath: arguments.commandPath)
            }
            headers.append(("idempotency-key", key))
        }
        let answer = try await AdminAPIClient.with(arguments) { api in
            try await api.send("POST", "/v1/events/\(id)/updates", body: .object(body), headers: headers)
        }
        APIText.emit(arguments, answer, text: updateID) { updateText($0, event: id) }
        warnIfSuperseded(answer.json)
    }

    /// A 202 that will never be broadcast deserves a word on stderr (with --json too: stdout stays the JSON).
    static func warnIfSuperseded(_ answer: JSONValue) {
        let update = answer["update"] ?? answer
        guard update["disposition"] == "superseded" else { return }
        Terminal.error(
            "marquee: warning: update \(APIText.cell(update["id"])) is superseded: the event already has a later "
                + "occurredAt, so it will not be broadcast (check --occurred-at and the feed's clock)")
    }

    static let end = Command(
        "end", summary: "End an event: a final state, when the activity is dismissed, and optionally when to send it.",
        discussion: """
            Without --content-state or --patch the latest state is the final one. --dismissal-date says when
            devices remove the ended activity; --at holds the end broadcast until then.

            Example:
              marquee event end 42 --patch '{"period":"FT"}' --dismissal-date now+1h

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [.positional("id", help: "The event id.")] + stateArguments + alertArguments + [
            .option("dismissal-date", value: "DATE", help: "When devices remove the ended activity."),
            .option("at", value: "DATE", help: "Do not send the end broadcast before this date."),
            .flag("replace", help: "Replace the end an ending event took already (its state, dismissal date and --at)."),
        ] + AdminAPIClient.ingestOptions
    ) { arguments in
        let input = APIInput(arguments)
        let id = try input.id("id", positional: true)!
        var body = try await stateBody(input, required: false)
        if let alert = try await alert(input) { body["alert"] = alert }
        if let date = try input.date("dismissal-date") { body["dismissalDate"] = .string(date) }
        if let date = try input.date("at") { body["at"] = .string(date) }
        if arguments.flag("replace") { body["replace"] = true }
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/events/\(id)/end", body: .object(body)) }
        APIText.emit(arguments, answer, text: updateID) { updateText($0, event: id) }
        printWarnings(answer.json)
    }

    // MARK: Shared pieces

    static let stateArguments: [Argument] = [
        .option("content-state", value: "JSON", help: "The whole new content state, a JSON object or @FILE."),
        .option("patch", value: "JSON", help: "A JSON merge patch for the latest content state, or @FILE."),
    ]

    static let alertArguments: [Argument] = [
        .option("alert-title", value: "TEXT", help: "The alert's title."),
        .option("alert-body", value: "TEXT", help: "The alert's body."),
        .option("alert-sound", value: "NAME", help: "The alert's sound, e.g. default (as event start's --alert-sound)."),
        .option("sound", value: "NAME", help: "The older spelling of --alert-sound."),
        .option(
            "alert", value: "JSON", help: #"The whole alert as JSON or @FILE, for localized text: {"title":{"locKey":"goal","locArgs":["Saka"]}}."#),
    ]

    /// `contentState` or `contentStatePatch`, never both.
    static func stateBody(_ input: APIInput, required: Bool) async throws -> JSONObject {
        var body = JSONObject()
        switch (try await input.object("content-state"), try await input.object("patch")) {
        case (let state?, nil): body["contentState"] = state
        case (nil, let patch?): body["contentStatePatch"] = patch
        case (_?, _?): throw UsageError("give either --content-state or --patch, not both", commandPath: input.path)
        case (nil, nil):
            if required { throw UsageError("give the new state with --content-state JSON or --patch JSON", commandPath: input.path) }
        }
        return body
    }

    static func alert(_ input: APIInput) async throws -> JSONValue? {
        let arguments = input.arguments
        if let whole = try await input.object("alert") {
            guard ["alert-title", "alert-body", "alert-sound", "sound"].allSatisfy({ arguments.string($0) == nil }) else {
                throw UsageError("give either --alert or --alert-title/--alert-body/--alert-sound, not both", commandPath: input.path)
            }
            return whole
        }
        var alert = JSONObject()
        if let title = arguments.string("alert-title") { alert["title"] = .string(title) }
        if let body = arguments.string("alert-body") { alert["body"] = .string(body) }
        if arguments.string("alert-sound") != nil && arguments.string("sound") != nil {
            throw UsageError("give --alert-sound or --sound (its older spelling), not both", commandPath: input.path)
        }
        if let sound = arguments.string("alert-sound") ?? arguments.string("sound") { alert["sound"] = .string(sound) }
        return alert.isEmpty ? nil : .object(alert)
    }

    static func eventBlock(_ event: JSONValue) -> String {
        APIText.block([
            ("id", APIText.cell(event["id"])), ("app", APIText.cell(event["app"])), ("external id", APIText.cell(event["externalId"])),
            ("kind", APIText.cell(event["kind"])), ("attribute type", APIText.cell(event["attributeType"])),
            (
                "status",
                APIText.cell(event["status"]) + (event["channelLost"]?.boolValue == true ? " (CHANNEL LOST: see marquee channel recreate)" : "")
            ),
            ("starts", APIText.cell(event["startsAt"])), ("ends", APIText.cell(event["endsAt"])),
            ("storage policy", APIText.cell(event["storagePolicy"])), ("topics", APIText.cell(event["topics"])),
            ("freshness", APIText.cell(event["freshness"])),
            ("attributes", APIText.cell(event["attributes"])), ("content state", APIText.cell(event["contentState"])),
            ("state at", APIText.cell(event["contentStateAt"])), ("created", APIText.cell(event["createdAt"])),
            ("updated", APIText.cell(event["updatedAt"])),
        ])
    }

    static func eventTable(_ events: [JSONValue]) -> String {
        guard !events.isEmpty else { return "(no events)" }
        return Terminal.table(
            ["ID", "APP", "EXTERNAL ID", "KIND", "STATUS", "STARTS", "ENDS", "TOPICS"],
            events.map { event in
                [
                    APIText.cell(event["id"]), APIText.cell(event["app"]), APIText.cell(event["externalId"]), APIText.cell(event["kind"]),
                    APIText.cell(event["status"]) + (event["channelLost"]?.boolValue == true ? " (channel lost)" : ""),
                    APIText.cell(event["startsAt"]), APIText.cell(event["endsAt"]), APIText.cell(event["topics"]),
                ]
            })
    }

    /// What `event update` and `event end` print on standard output: the id of the update they created.
    static func updateID(_ answer: JSONValue) -> String { APIText.cell((answer["update"] ?? answer)["id"]) }

    static func updateText(_ answer: JSONValue, event: Int64) -> String {
        let update = answer["update"] ?? answer
        let action = update["action"]?.stringValue ?? "update"
        return "accepted \(action) \(APIText.cell(update["id"])) for event \(event): \(APIText.cell(update["disposition"]))"
            + " (occurred \(APIText.cell(update["occurredAt"])), received \(APIText.cell(update["receivedAt"])))"
    }

    static func lastError(_ channel: JSONValue) -> String {
        guard let error = channel["lastError"], !error.isNull else { return "-" }
        return "\(APIText.cell(error)) at \(APIText.cell(channel["lastErrorAt"]))"
    }

    static func indent(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { "  " + $0 }.joined(separator: "\n")
    }
}
