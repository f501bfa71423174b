// `marquee installation show|stats`: the audience registry, straight in the database (as `app` is). Tokens
// are shown cut to their first 8 characters, as the API shows them.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore
import Postgres

enum InstallationCommands {
    static let command = Command(
        "installation", summary: "Show installations and count the registry.", discussion: exitCodes,
        subcommands: [show, stats])

    static let exitCodes = ExitCode.help([.success, .failure, .usage, .unavailable])

    static let appArgument = Argument.option("app", value: "ID", help: "The app id (marquee app list).")

    static let show = Command(
        "show", summary: "Show one installation: its token, follows and newest activities.", discussion: exitCodes,
        arguments: [Database.option, .positional("id", help: "The app's installation id."), appArgument]
    ) { arguments in
        let installationID = try arguments.required("id")
        let app = try AppCommands.appOption(arguments)
        let record = try await Database.withPool(arguments) { pool in
            let installations = InstallationRepository(pool: pool)
            do {
                return try await installations.record(id: try await installations.find(installationID: installationID, appID: app).id)
            } catch let error as AudienceError {
                switch error {
                case .installationInSeveralApps:
                    throw CommandFailure("\(error); pass --app", exitCode: .failure, code: "conflict", field: "app")
                default:
                    throw CommandFailure("\(error)", exitCode: .failure, code: "not_found", field: "id")
                }
            }
        }
        let token = record.pushToStartToken
        let follows = record.follows.map { follow -> String in
            switch follow {
            case .event(let id, let external): "event \(id) (\(external))"
            case .topic(let topic): "topic \(topic)"
            }
        }
        let activities = record.activities.map { "\($0.activityID): event \($0.eventID), \($0.pushType.rawValue), \($0.state.rawValue)" }
        Terminal.emit(
            arguments,
            text: """
                installation  \(record.installationID)
                app           \(record.appID)
                os            \(record.osVersion ?? "-")
                app build     \(record.appBuild ?? "-")
                locale        \(record.locale ?? "-")
                enabled       \(record.liveActivitiesEnabled ? "yes" : "no")\(record.frequentPushesEnabled ? "" : " (frequent updates off)")
                token         \(token.map { String($0.token.prefix(8)) + "… seen " + $0.seenAt.ISO8601Format() + ($0.refusedReason.map { ", refused: \($0)" } ?? "") } ?? "none")
                follows       \(follows.isEmpty ? "nothing" : follows.joined(separator: ", "))
                activities    \(activities.isEmpty ? "none" : activities.joined(separator: "\n              "))
                registered    \(record.registeredAt.ISO8601Format())
                """, json: InstallationRoutes.json(record))
    }

    static let stats = Command(
        "stats", summary: "Count installations by OS major version, token state, enablement and follows; activities; token refusals.",
        discussion: exitCodes, arguments: [Database.option, appArgument]
    ) { arguments in
        let app = try AppCommands.appOption(arguments)
        let stats = try await Database.withPool(arguments) { pool in try await AudienceRepository(pool: pool).stats(appID: app) }
        let total = stats.installations.reduce(0) { $0 + $1.count }
        /// The groups' counts summed by `key`, sorted by key.
        func totals<Group>(_ groups: [Group], by key: (Group) -> String, count: (Group) -> Int) -> [(String, Int)] {
            Dictionary(grouping: groups, by: key).map { ($0.key, $0.value.reduce(0) { $0 + count($1) }) }.sorted { $0.0 < $1.0 }
        }
        func count(_ key: (AudienceStats.InstallationGroup) -> String) -> [(String, Int)] { totals(stats.installations, by: key, count: \.count) }
        let byOS = count { $0.osMajor.map { "iOS \($0)" } ?? "unknown" }
        let byToken = count { $0.token }
        let byEnabled = count { $0.enabled ? "enabled" : "disabled" }
        let byFollows = count { $0.follows ? "following" : "following nothing" }
        let activities = totals(stats.activities, by: { "\($0.state.rawValue) \($0.pushType.rawValue)" }, count: \.count)
        let refusals = totals(stats.invalidations, by: { "\($0.reason) \($0.outcome.rawValue)" }, count: \.count)
        func lines(_ title: String, _ rows: [(String, Int)]) -> String {
            "\(title):\n"
                + (rows.isEmpty
                    ? "  none"
                    : rows.map { "  \($0.0.padding(toLength: 24, withPad: " ", startingAt: 0)) \($0.1)" }
                        .joined(separator: "\n"))
        }
        func json(_ rows: [(String, Int)]) -> JSONValue {
            var object = JSONObject()
            for (key, value) in rows { object[key] = .int(Int64(value)) }
            return .object(object)
        }
        Terminal.emit(
            arguments,
            text: [
                "installations: \(total)", lines("by OS", byOS), lines("by token", byToken),
                lines("by enablement", byEnabled), lines("by follows", byFollows),
                lines("activities", activities), lines("token refusals", refusals),
            ].joined(separator: "\n"),
            json: [
                "installations": .int(Int64(total)), "byOS": json(byOS), "byToken": json(byToken), "byEnablement": json(byEnabled),
                "byFollows": json(byFollows), "activities": json(activities), "tokenRefusals": json(refusals),
            ])
    }
}
