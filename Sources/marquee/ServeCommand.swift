// `marquee serve`: the daemon. Configuration comes from flags, each with an environment variable.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres

enum ServeCommand {
    static let command = Command(
        "serve", summary: "Run the API, the broadcast dispatcher and the channel scheduler until SIGTERM.",
        discussion: """
            Applies pending migrations at start unless --no-migrate, which refuses to start when the schema is behind.
            Endpoints: /healthz (alive), /readyz (database reachable, schema current), /metrics, /openapi.json, /v1/....
            SIGTERM or SIGINT: stop accepting, finish in-flight requests (up to --grace-period), exit 0.
            """,
        arguments: [
            Database.option,
            .option("listen", value: "HOST:PORT", help: "Where the API listens (port 0 picks one; see the 'listening' log line).",
                    environment: "MARQUEE_LISTEN", default: "127.0.0.1:8080"),
            .flag("no-migrate", help: "Do not migrate; refuse to start when migrations are pending."),
            .option("log-format", value: "FORMAT", help: "Log line format.", environment: "MARQUEE_LOG_FORMAT", default: "logfmt",
                    choices: Logger.Format.allCases.map(\.rawValue)),
            .option("log-level", value: "LEVEL", help: "The lowest level logged.", environment: "MARQUEE_LOG_LEVEL", default: "info",
                    choices: Logger.Level.allCases.map(\.rawValue)),
            .option("grace-period", value: "SECONDS", help: "How long in-flight work gets after SIGTERM.",
                    environment: "MARQUEE_GRACE_PERIOD", default: "30"),
            .option("max-connections", value: "N", help: "Database connections in the pool.",
                    environment: "MARQUEE_DATABASE_CONNECTIONS", default: "20"),
            .option("apns-push-url", value: "URL", help: "APNs push host (default: Apple's for each app's environment).",
                    environment: "MARQUEE_APNS_PUSH_URL"),
            .option("apns-manage-url", value: "URL", help: "APNs channel management host (default: Apple's).",
                    environment: "MARQUEE_APNS_MANAGE_URL"),
            .option("apns-ca-file", value: "PATH", help: "CA certificates to trust for APNs (e.g. the simulator's).",
                    environment: "MARQUEE_APNS_CA_FILE"),
        ]
    ) { arguments in
        guard let listen = ServeConfiguration.parseListen(try arguments.required("listen")) else {
            throw UsageError("--listen takes HOST:PORT, e.g. 127.0.0.1:8080", commandPath: arguments.commandPath)
        }
        let configuration = ServeConfiguration(
            databaseURL: try arguments.required("database-url"), host: listen.host, port: listen.port,
            migrate: !arguments.flag("no-migrate"), gracePeriod: .seconds(try arguments.int("grace-period", in: 0...3600) ?? 30),
            maxConnections: try arguments.int("max-connections", in: 1...200) ?? 20,
            apnsPushURL: arguments.string("apns-push-url"), apnsManageURL: arguments.string("apns-manage-url"),
            apnsCAFile: arguments.string("apns-ca-file"))
        let logger = Logger(level: Logger.Level(rawValue: try arguments.required("log-level")) ?? .info,
                            format: Logger.Format(rawValue: try arguments.required("log-format")) ?? .logfmt) { line in
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
        let daemon = MarqueeDaemon(configuration: configuration, logger: logger)
        do {
            try await daemon.run { daemon in
                try APIHTTPService(api: daemon.api, host: configuration.host, port: configuration.port,
                                   gracePeriod: configuration.gracePeriod, logger: daemon.logger)
            }
        } catch let error as MigrationError {
            throw CommandFailure("\(error)", exitCode: .configuration, code: "schema_not_current")
        } catch let error as PostgresError {
            throw Database.failure(error)
        } catch let error as NetworkError {
            throw CommandFailure("cannot listen on \(configuration.host):\(configuration.port): \(error)", exitCode: .unavailable,
                                 code: "listen_failed", field: "listen")
        }
    }
}
