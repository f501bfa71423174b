// `marquee channel list|show|delete|recreate|reconcile|sweep`: APNs broadcast channels through the HTTP API.
import Foundation
import MarqueeCommandLine
import MarqueeCore

enum ChannelCommands {
    static let command = Command(
        "channel", summary: "List, inspect, delete, recreate and reconcile APNs broadcast channels through the API.",
        discussion: """
            Channels count against a quota of 10,000 per app and environment and never expire: Marquee opens one
            per event ahead of its start and deletes it after the event ends. sweep runs that pass once (for cron);
            reconcile compares Apple's channel list with the database.

            Example:
              marquee channel list --app 1 --state open
              marquee channel reconcile --dry-run

            \(AdminAPIClient.exitCodes)
            """,
        subcommands: [list, show, delete, recreate, reconcile, sweep])

    static let list = Command(
        "list", summary: "List channels, with filters.",
        discussion: "Example:\n  marquee channel list --app 1 --state open\n\n\(AdminAPIClient.exitCodes)",
        arguments: [
            .option("app", value: "ID", help: "Only this app's channels."),
            .option(
                "state", value: "STATE", help: "Only channels in this state.",
                choices: ChannelLifecycle.State.allCases.map(\.rawValue) + ["unknown"]),
            .option("event", value: "ID", help: "Only this event's channels."),
            .option("limit", value: "N", help: "At most this many channels, 1 to 500 (the server's default is 100)."),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        let query: [(String, String?)] = [
            ("app", try input.id("app").map(String.init)), ("state", arguments.string("state")),
            ("event", try input.id("event").map(String.init)), ("limit", try arguments.int("limit", in: 1...500).map(String.init)),
        ]
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/channels", query: query) }
        APIText.emit(arguments, answer) { channelTable($0["channels"]?.arrayValue ?? []) }
    }

    static let show = Command(
        "show", summary: "Show a channel and its newest deliveries.",
        discussion: "Example:\n  marquee channel show 7\n\n\(AdminAPIClient.exitCodes)",
        arguments: [.positional("id", help: "The channel id (marquee channel list).")] + AdminAPIClient.options
    ) { arguments in
        let id = try APIInput(arguments).id("id", positional: true)!
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/channels/\(id)") }
        APIText.emit(arguments, answer) { channel in
            let deliveries = channel["deliveries"]?.arrayValue ?? []
            return channelBlock(channel) + "\n\ndeliveries (newest first):\n"
                + (deliveries.isEmpty ? "(none)" : deliveryTable(deliveries))
        }
    }

    static let delete = Command(
        "delete", summary: "Delete a channel at APNs now (no end broadcast is sent).",
        discussion: """
            Devices subscribed to a deleted channel get no more updates. The server refuses (409) to delete an
            open channel unless --force is given, and a create whose outcome is still unknown until it settles.
            To end a live event first, use 'marquee event end'. A forced delete of a live channel flags its event
            channel_lost (its broadcasts stop; 'marquee status' lists it) until 'marquee channel recreate' gives it a
            new one. Asks for confirmation on a terminal; scripts pass --yes.

            Example:
              marquee channel delete 7

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("id", help: "The channel id."),
            .flag("force", help: "Delete even an open channel (its running activities stop getting updates)."),
            Confirmation.flag,
        ] + AdminAPIClient.options
    ) { arguments in
        let id = try APIInput(arguments).id("id", positional: true)!
        try await Confirmation.require(arguments, "Delete channel \(id) at APNs\(arguments.flag("force") ? ", even if open" : "")?")
        let answer = try await AdminAPIClient.with(arguments) { api in
            try await api.send("DELETE", "/v1/channels/\(id)", query: [("force", arguments.flag("force") ? "true" : nil)])
        }
        APIText.emit(arguments, answer, text: { _ in "" }) { channel in
            "deleting channel \(id) at APNs (state \(APIText.cell(channel["state"]))); see 'marquee channel show \(id)'"
        }
    }

    static let recreate = Command(
        "recreate", summary: "Give an event whose channel APNs lost, or refused to create, a new channel.",
        discussion: """
            Only for an event whose channel is lost (marquee status lists them) or whose create APNs refused
            for good (state create_failed); otherwise the server answers 409. Activities already running stay
            subscribed to the old channel id and get no more updates: only new activities, or ones started
            again, follow the new channel.

            Example:
              marquee channel recreate 42

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [.positional("event", help: "The event id (not the channel id).")] + AdminAPIClient.options
    ) { arguments in
        let event = try APIInput(arguments).id("event", positional: true)!
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/events/\(event)/channel/recreate") }
        // The channel's id is the data (the same row when APNs lost or refused it, a new one after a forced delete).
        APIText.emit(arguments, answer, text: { APIText.cell($0["id"]) }) { channel in
            "planned a new channel for event \(event): channel \(APIText.cell(channel["id"])), state \(APIText.cell(channel["state"]))"
        }
    }

    static let reconcile = Command(
        "reconcile", summary: "Compare Apple's channel list with the database, per app.",
        discussion: """
            Columns, per app (each a count; --json lists the ids):
              UNRECORDED   channels Apple lists that Marquee had no row for, recorded now as unknown (first seen
                           now; a dry run records nothing)
              UNKNOWN      every channel Apple lists that no event of Marquee's owns: perhaps another backend's,
                           e.g. staging on the same bundle id
              MISSING      channels Marquee has open or ending that Apple no longer lists: flagged lost (their
                           event shows in 'marquee status'), or settled as deleted
              RESURRECTED  channels Marquee deleted that Apple still lists: deleted again
              DELETED      unknown channels deleted now (only with --delete-unknown, once seen for serve's
                           --unknown-channel-grace)

            Example:
              marquee channel reconcile --dry-run
              marquee channel reconcile --delete-unknown

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .flag("dry-run", help: "Report only; change nothing."),
            .flag("delete-unknown", help: "Delete unknown channels older than the grace period."),
        ] + AdminAPIClient.options
    ) { arguments in
        let body: JSONValue = ["dryRun": .bool(arguments.flag("dry-run")), "deleteUnknown": .bool(arguments.flag("delete-unknown"))]
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/channels/reconcile", body: body) }
        APIText.emit(arguments, answer) { report in
            // Per app what was found; a real run also answers with the scheduler's whole pass (as sweep does).
            let apps = report["apps"]?.arrayValue ?? []
            let columns = ["unrecorded", "unknown", "missing", "resurrected", "deleted"]
            var text =
                apps.isEmpty
                ? "(no apps)"
                : Terminal.table(
                    ["APP"] + columns.map { $0.uppercased() },
                    apps.map { app in
                        [APIText.cell(app["app"])] + columns.map { APIText.cell(app[$0]) }
                    })
            if let sweep = report["sweep"], !sweep.isNull { text += "\n\nsweep:\n" + EventCommands.indent(sweepText(sweep)) }
            return text
        } note: { _ in
            arguments.flag("dry-run") ? "(dry run: nothing changed)" : nil
        }
    }

    static let sweep = Command(
        "sweep", summary: "Run the scheduler's pass once: open due channels, end and delete finished ones.",
        discussion: """
            For cron, when no serve instance runs the scheduler. The server refuses (409, exit 1) while another
            instance holds the scheduler lease.

            Example:
              marquee channel sweep --json

            \(AdminAPIClient.exitCodes)
            """,
        arguments: AdminAPIClient.options
    ) { arguments in
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/channels/sweep") }
        APIText.emit(arguments, answer, text: sweepText)
    }

    // MARK: Shared pieces

    /// A sweep report: each list's count and members (event, channel or APNs ids).
    static func sweepText(_ report: JSONValue) -> String {
        guard let object = report.objectValue else { return report.jsonString }
        return APIText.block(
            object.map { key, value in
                let count = value.arrayValue?.count ?? 0
                return (key, count == 0 ? "0" : "\(count): \(APIText.cell(value))")
            })
    }

    static func channelTable(_ channels: [JSONValue]) -> String {
        guard !channels.isEmpty else { return "(no channels)" }
        return Terminal.table(
            ["ID", "APP", "EVENT", "STATE", "APNS CHANNEL", "ATTEMPTS", "OPENED", "LAST ERROR"],
            channels.map { channel in
                [
                    APIText.cell(channel["id"]), APIText.cell(channel["app"]), APIText.cell(channel["event"]), APIText.cell(channel["state"]),
                    APIText.cell(channel["apnsChannelId"]), APIText.cell(channel["attempts"]), APIText.cell(channel["openedAt"]),
                    APIText.cell(channel["lastError"]),
                ]
            })
    }

    static func channelBlock(_ channel: JSONValue) -> String {
        APIText.block([
            ("id", APIText.cell(channel["id"])), ("app", APIText.cell(channel["app"])), ("event", APIText.cell(channel["event"])),
            ("state", APIText.cell(channel["state"])), ("apns channel", APIText.cell(channel["apnsChannelId"])),
            ("storage policy", APIText.cell(channel["storagePolicy"])), ("attempts", APIText.cell(channel["attempts"])),
            ("next attempt", APIText.cell(channel["nextAttemptAt"])), ("requested", APIText.cell(channel["requestedAt"])),
            ("opened", APIText.cell(channel["openedAt"])), ("ended", APIText.cell(channel["endedAt"])),
            ("deleted", APIText.cell(channel["deletedAt"])), ("first seen", APIText.cell(channel["firstSeenAt"])),
            ("last timestamp", APIText.cell(channel["lastApsTimestamp"])), ("last error", EventCommands.lastError(channel)),
            ("created", APIText.cell(channel["createdAt"])),
        ])
    }

    static func deliveryTable(_ deliveries: [JSONValue]) -> String {
        Terminal.table(
            ["ID", "KIND", "UPDATE", "STATUS", "REASON", "PRIORITY", "ATTEMPT", "LATENCY", "SENT"],
            deliveries.map { delivery in
                let latency = delivery["latencyMicroseconds"]?.intValue.map { "\($0 / 1000) ms" } ?? "-"
                return [
                    APIText.cell(delivery["id"]), APIText.cell(delivery["kind"]), APIText.cell(delivery["update"]),
                    APIText.cell(delivery["status"]), APIText.cell(delivery["reason"]), APIText.cell(delivery["priority"]),
                    APIText.cell(delivery["attempt"]), latency, APIText.cell(delivery["sentAt"]),
                ]
            })
    }
}
