// `marquee status`: what an operator checks first (GET /v1/status): channels against the quota per app,
// the outbox backlog, start runs and mirroring, events whose channel APNs lost, and the last failed deliveries.
import Foundation
import MarqueeCommandLine
import MarqueeCore

enum StatusCommand {
    /// The share of the quota from which a warning mark is shown (the scheduler warns there too).
    static let warningShare = 0.8

    static let command = Command(
        "status", summary: "Show channels against the quota per app, the outbox backlog, lost channels and the last errors.",
        discussion: """
            An app at 80% of its channel quota or more is marked with '!': past the quota new channels are refused.
            Lost channels are events whose channel APNs no longer knows (see marquee channel recreate).
            A key with the status scope will do (marquee key create --scope status); serve's status page
            (GET /status) shows the same and more for a person.

            Example:
              marquee status --url https://marquee.internal:8443 --ca-file ca.pem

            \(AdminAPIClient.exitCodes)
            """,
        arguments: AdminAPIClient.options
    ) { arguments in
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/status") }
        APIText.emit(arguments, answer, text: text)
    }

    static func text(_ status: JSONValue) -> String {
        var sections: [String] = []
        let apps = status["apps"]?.arrayValue ?? []
        sections.append(
            apps.isEmpty
                ? "channels: (no apps)"
                : "channels:\n"
                    + Terminal.table(
                        ["APP", "BUNDLE", "ENVIRONMENT", "IN USE", "QUOTA", "USED", "BY STATE"], apps.map(appRow)))
        let parked = apps.filter { ($0["credentialsFault"]?.objectValue) != nil }
        if !parked.isEmpty {
            sections.append(
                "credentials refused by APNs (work parked; fix the app's key, then it resumes at the first success):\n"
                    + Terminal.table(
                        ["APP", "BUNDLE", "REASON", "SINCE", "RETRY AT", "STRIKES"],
                        parked.map { app in
                            let fault = app["credentialsFault"]
                            return [APIText.cell(app["app"]), APIText.cell(app["bundleId"])]
                                + ["reason", "since", "retryAt", "strikes"].map { APIText.cell(fault?[$0]) }
                        }))
        }
        var outbox = "outbox backlog: \(APIText.cell(status["outboxBacklog"]))"
        if let age = status["oldestOutboxAgeSeconds"]?.doubleValue { outbox += " (oldest \(Int(age)) s)" }
        outbox += "\nstart runs in their first pass: \(APIText.cell(status["startRunsInProgress"]))"
        outbox += "\nmirroring passes running: \(APIText.cell(status["mirroring"]?["passesRunning"]))"
        if let age = status["mirroring"]?["oldestPassAgeSeconds"]?.doubleValue { outbox += " (oldest \(Int(age)) s)" }
        sections.append(outbox)
        let lost = status["lostChannels"]?.arrayValue ?? []
        sections.append(
            lost.isEmpty
                ? "lost channels: none"
                : "lost channels (\(lost.count); marquee channel recreate EVENT):\n"
                    + Terminal.table(
                        ["EVENT", "APP", "EXTERNAL ID", "CHANNEL", "APNS CHANNEL", "LAST ERROR"],
                        lost.map { item in
                            ["event", "app", "externalId", "channel", "apnsChannelId", "lastError"].map { APIText.cell(item[$0]) }
                        }))
        let errors = status["lastErrors"]?.arrayValue ?? []
        sections.append(errors.isEmpty ? "last errors: none" : "last errors:\n" + ChannelCommands.deliveryTable(errors))
        return sections.joined(separator: "\n\n")
    }

    static func appRow(_ app: JSONValue) -> [String] {
        let inUse = app["inUse"]?.doubleValue ?? 0
        let quota = app["quota"]?.doubleValue ?? 0
        var used = "-"
        if quota > 0 {
            let share = inUse / quota
            used = String(format: "%.1f%%", share * 100) + (share >= warningShare ? " !" : "")
        }
        let byState =
            app["channelsByState"]?.objectValue.map { states in
                states.map { "\($0.key) \(APIText.cell($0.value))" }.joined(separator: ", ")
            } ?? "-"
        return [
            APIText.cell(app["app"]), APIText.cell(app["bundleId"]), APIText.cell(app["environment"]),
            APIText.cell(app["inUse"]), APIText.cell(app["quota"]), used, byState.isEmpty ? "-" : byState,
        ]
    }
}
