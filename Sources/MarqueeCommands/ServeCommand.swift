// `marquee serve`: the daemon. Configuration comes from flags, each with an environment variable.
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres

enum ServeCommand {
    /// The pipeline's settings: flag, value name, help, environment variable and default (PipelineSettings' own).
    static let pipelineOptions: [(name: String, value: String, help: String, environment: String, defaultValue: String)] = [
        (
            "channel-lead-time", "SECONDS", "Open an event's channel this long before it starts.", "MARQUEE_CHANNEL_LEAD_TIME",
            seconds(defaults.channelLeadTime)
        ),
        (
            "channel-delete-delay", "SECONDS", "Delete a channel this long after its end broadcast.", "MARQUEE_CHANNEL_DELETE_DELAY",
            seconds(defaults.channelDeleteDelay)
        ),
        ("end-grace", "SECONDS", "End an event nobody ended at endsAt plus this.", "MARQUEE_END_GRACE", seconds(defaults.endGrace)),
        (
            "scheduler-interval", "SECONDS", "How often the channel scheduler sweeps (decimals allowed).", "MARQUEE_SCHEDULER_INTERVAL",
            seconds(defaults.schedulerInterval)
        ),
        (
            "reconcile-interval", "SECONDS", "How often channels are compared with APNs' lists.", "MARQUEE_RECONCILE_INTERVAL",
            seconds(defaults.reconcileInterval)
        ),
        (
            "unknown-channel-grace", "SECONDS", "With --delete-unknown-channels: how long an unknown channel is seen before deletion.",
            "MARQUEE_UNKNOWN_CHANNEL_GRACE", seconds(defaults.unknownChannelGrace)
        ),
        (
            "channel-quota", "N", "Channels per app and environment (Apple's quota); warns at 80%.", "MARQUEE_CHANNEL_QUOTA",
            "\(defaults.channelQuota)"
        ),
        (
            "broadcast-ttl", "SECONDS", "apns-expiration for channels with most-recent storage: now plus this (at most 28800).",
            "MARQUEE_BROADCAST_TTL", seconds(defaults.broadcastTTL)
        ),
        (
            "high-priority-budget", "N", "Priority-10 broadcasts per channel per hour before 'auto' downgrades to 5.",
            "MARQUEE_HIGH_PRIORITY_BUDGET", "\(defaults.highPriorityBudget)"
        ),
        (
            "conflation-interval", "SECONDS", "At most one broadcast per channel per interval (alerts and 'high' go at once).",
            "MARQUEE_CONFLATION_INTERVAL", seconds(defaults.conflationInterval)
        ),
        (
            "delivery-retention", "SECONDS", "Delete delivery rows (the log of APNs exchanges) older than this; 0 keeps them (else at least 86400).",
            "MARQUEE_DELIVERY_RETENTION", seconds(defaults.deliveryRetention)
        ),
        (
            "update-retention", "SECONDS",
            "Delete the updates of events ended longer ago than this, keeping their counts; 0 keeps them (else at least 86400).",
            "MARQUEE_UPDATE_RETENTION", seconds(defaults.updateRetention)
        ),
        (
            "max-clock-skew", "SECONDS", "Refuse an update whose occurredAt is more than this ahead of the server's clock (422).",
            "MARQUEE_MAX_CLOCK_SKEW", seconds(defaults.maxClockSkew)
        ),
        (
            "admin-timeout", "SECONDS", "How long a channel reconcile, sweep, delete or recreate request waits on APNs before answering 504.",
            "MARQUEE_ADMIN_TIMEOUT", seconds(defaults.adminTimeout)
        ),
        (
            "previous-token-retention", "SECONDS", "Keep a replaced push-to-start token this long, to match a late 410 to its installation.",
            "MARQUEE_PREVIOUS_TOKEN_RETENTION", seconds(defaults.audience.previousTokenRetention)
        ),
        (
            "token-max-age", "SECONDS", "Prune push-to-start tokens no registration sent again within this (hourly pass).",
            "MARQUEE_TOKEN_MAX_AGE", seconds(defaults.audience.tokenMaxAge)
        ),
        (
            "channel-request-window", "SECONDS",
            "How far ahead of its start an app may ask for an event's channel (PUT /v1/events/{id}/channel); 0: the channel lead time; at most 86400.",
            "MARQUEE_CHANNEL_REQUEST_WINDOW", "0"
        ),
        (
            "channel-request-share", "FRACTION",
            "The share of the quota that channels opened on request before the lead time may hold (0 to 1; 0: none).",
            "MARQUEE_CHANNEL_REQUEST_SHARE", seconds(defaults.audience.channelRequestShare)
        ),
        (
            "audience-lead", "SECONDS", "Start an event's audience (push-to-start) this long before startsAt, unless the event has its own.",
            "MARQUEE_AUDIENCE_LEAD", seconds(defaults.starts.audienceLead)
        ),
        (
            "start-max-lateness", "SECONDS", "Skip an automatic start run due longer ago than this (serve was down at the lead).",
            "MARQUEE_START_MAX_LATENESS", seconds(defaults.starts.maxLateness)
        ),
        (
            "start-channel-wait", "SECONDS", "iOS 18 installations wait this long for the event's channel, then start with input-push-token.",
            "MARQUEE_START_CHANNEL_WAIT", seconds(defaults.starts.channelWait)
        ),
        (
            "late-start-cutoff", "SECONDS", "Start late followers until endsAt minus this.", "MARQUEE_LATE_START_CUTOFF",
            seconds(defaults.starts.lateStartCutoff)
        ),
        (
            "restart-on-postpone", "SECONDS",
            "A PATCH moving startsAt later by more than this after starts went out ends the running activities and starts the audience again.",
            "MARQUEE_RESTART_ON_POSTPONE", seconds(defaults.starts.restartOnPostpone)
        ),
        (
            "late-start-interval", "SECONDS", "Time between the passes that start late followers.", "MARQUEE_LATE_START_INTERVAL",
            seconds(defaults.starts.lateStartInterval)
        ),
        (
            "start-ttl", "SECONDS", "apns-expiration of a push-to-start: now plus this, and never past endsAt.", "MARQUEE_START_TTL",
            seconds(defaults.starts.startTTL)
        ),
        (
            "starts-per-device-hour", "N", "Push-to-starts per installation per hour (observed by developers, not documented by Apple).",
            "MARQUEE_STARTS_PER_DEVICE_HOUR", "\(defaults.starts.limits.startsPerDeviceHour)"
        ),
        (
            "max-concurrent-activities", "N", "Activities started per installation for events at the same time (direct follows first).",
            "MARQUEE_MAX_CONCURRENT_ACTIVITIES", "\(defaults.starts.limits.maxConcurrentActivities)"
        ),
        (
            "start-send-window", "N", "Push-to-starts in flight per chunk of followers, marked together just before they go.",
            "MARQUEE_START_SEND_WINDOW", "\(defaults.starts.sendWindow)"
        ),
        (
            "start-chunks", "N", "Chunks of followers this instance sends at once (a database connection each).",
            "MARQUEE_START_CHUNKS", "\(defaults.starts.chunksInFlight)"
        ),
        ("start-chunk-size", "N", "Followers per chunk of a start run.", "MARQUEE_START_CHUNK_SIZE", "\(defaults.starts.chunks.chunkSize)"),
        (
            "start-chunk-lease", "SECONDS", "A start chunk's lease, renewed every window (it ends sooner with its holder's heartbeat).",
            "MARQUEE_START_CHUNK_LEASE", "\(Int(defaults.starts.chunks.chunkLease))"
        ),
        (
            "infrequent-high-priority-budget", "N",
            "Priority-10 mirrored pushes per hour to a token whose installation has frequentPushesEnabled false.",
            "MARQUEE_INFREQUENT_HIGH_PRIORITY_BUDGET", "\(defaults.infrequentHighPriorityBudget)"
        ),
        (
            "mirror-send-window", "N", "Mirrored device pushes in flight per chunk of activity tokens.", "MARQUEE_MIRROR_SEND_WINDOW",
            "\(defaults.mirroring.sendWindow)"
        ),
        (
            "mirror-chunks", "N", "Chunks of activity tokens this instance mirrors to at once.", "MARQUEE_MIRROR_CHUNKS",
            "\(defaults.mirroring.chunksInFlight)"
        ),
        ("mirror-chunk-size", "N", "Activity tokens per chunk of a mirroring pass.", "MARQUEE_MIRROR_CHUNK_SIZE", "\(defaults.mirroring.chunkSize)"),
        (
            "mirror-chunk-lease", "SECONDS", "A mirroring chunk's lease (it ends sooner with its holder's heartbeat).",
            "MARQUEE_MIRROR_CHUNK_LEASE", "\(Int(defaults.mirroring.chunkLease))"
        ),
    ]

    private static let defaults = PipelineSettings()

    /// Seconds as an option default: whole numbers without a fraction.
    private static func seconds(_ value: TimeInterval) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    /// A retention option: 0 (keep) or at least a day. Shorter would delete delivery rows that the priority
    /// budget (an hour) and `marquee status` (recent errors) read, and updates whose idempotency keys (24 h)
    /// may still answer a retry.
    private static func retention(_ name: String, _ arguments: ParsedArguments) throws(UsageError) -> TimeInterval? {
        guard let value = try arguments.seconds(name, in: 0...(100 * 365 * 86400)) else { return nil }
        if value > 0 && value < 86400 {
            throw UsageError(
                "--\(name) takes 0 (keep) or at least 86400 seconds (a day), not '\(arguments.string(name) ?? "")'",
                commandPath: arguments.commandPath)
        }
        return value
    }

    /// Reads the pipeline settings (every option has its default, so none is missing).
    static func pipelineSettings(_ arguments: ParsedArguments) throws(UsageError) -> PipelineSettings {
        var settings = PipelineSettings()
        settings.channelLeadTime = try arguments.seconds("channel-lead-time") ?? settings.channelLeadTime
        settings.channelDeleteDelay = try arguments.seconds("channel-delete-delay") ?? settings.channelDeleteDelay
        settings.endGrace = try arguments.seconds("end-grace") ?? settings.endGrace
        settings.schedulerInterval = try arguments.seconds("scheduler-interval", in: 0.05...3600) ?? settings.schedulerInterval
        settings.reconcileInterval = try arguments.seconds("reconcile-interval", in: 1...(7 * 86400)) ?? settings.reconcileInterval
        settings.unknownChannelGrace = try arguments.seconds("unknown-channel-grace") ?? settings.unknownChannelGrace
        settings.channelQuota = try arguments.int("channel-quota", in: 1...1_000_000) ?? settings.channelQuota
        settings.broadcastTTL = try arguments.seconds("broadcast-ttl", in: 1...ExpirationPolicy.maximumTimeToLive) ?? settings.broadcastTTL
        settings.highPriorityBudget = try arguments.int("high-priority-budget", in: 0...1_000_000) ?? settings.highPriorityBudget
        settings.conflationInterval = try arguments.seconds("conflation-interval", in: 0...3600) ?? settings.conflationInterval
        settings.deliveryRetention = try retention("delivery-retention", arguments) ?? settings.deliveryRetention
        settings.updateRetention = try retention("update-retention", arguments) ?? settings.updateRetention
        settings.adminTimeout = try arguments.seconds("admin-timeout", in: 1...3600) ?? settings.adminTimeout
        settings.maxClockSkew = try arguments.seconds("max-clock-skew", in: 0...86400) ?? settings.maxClockSkew
        settings.audience.previousTokenRetention =
            try arguments.seconds("previous-token-retention", in: 0...(365 * 86400))
            ?? settings.audience.previousTokenRetention
        settings.audience.tokenMaxAge = try arguments.seconds("token-max-age", in: 86400...(10 * 365 * 86400)) ?? settings.audience.tokenMaxAge
        let window = try arguments.seconds("channel-request-window", in: 0...86400) ?? 0
        settings.audience.channelRequestWindow = window == 0 ? nil : window
        if let share = arguments.string("channel-request-share") {
            guard let value = Double(share), (0...1).contains(value) else {
                throw UsageError("--channel-request-share takes a fraction from 0 to 1, not '\(share)'", commandPath: arguments.commandPath)
            }
            settings.audience.channelRequestShare = value
        }
        settings.starts.audienceLead = try arguments.seconds("audience-lead", in: 0...604_800) ?? settings.starts.audienceLead
        settings.starts.maxLateness = try arguments.seconds("start-max-lateness", in: 0...86400) ?? settings.starts.maxLateness
        settings.starts.channelWait = try arguments.seconds("start-channel-wait", in: 0...3600) ?? settings.starts.channelWait
        settings.starts.lateStartCutoff = try arguments.seconds("late-start-cutoff", in: 0...86400) ?? settings.starts.lateStartCutoff
        settings.starts.lateStartInterval = try arguments.seconds("late-start-interval", in: 1...3600) ?? settings.starts.lateStartInterval
        settings.starts.restartOnPostpone =
            try arguments.seconds("restart-on-postpone", in: 0...604_800) ?? settings.starts.restartOnPostpone
        settings.starts.startTTL = try arguments.seconds("start-ttl", in: 1...86400) ?? settings.starts.startTTL
        settings.starts.limits.startsPerDeviceHour =
            try arguments.int("starts-per-device-hour", in: 1...1000) ?? settings.starts.limits.startsPerDeviceHour
        settings.starts.limits.maxConcurrentActivities =
            try arguments.int("max-concurrent-activities", in: 1...100) ?? settings.starts.limits.maxConcurrentActivities
        settings.starts.sendWindow = try arguments.int("start-send-window", in: 1...5000) ?? settings.starts.sendWindow
        settings.starts.chunksInFlight = try arguments.int("start-chunks", in: 1...32) ?? settings.starts.chunksInFlight
        settings.starts.chunks.chunkSize = try arguments.int("start-chunk-size", in: 10...100_000) ?? settings.starts.chunks.chunkSize
        settings.starts.chunks.chunkLease = try arguments.seconds("start-chunk-lease", in: 5...3600) ?? settings.starts.chunks.chunkLease
        settings.mirroring.sendWindow = try arguments.int("mirror-send-window", in: 1...5000) ?? settings.mirroring.sendWindow
        settings.mirroring.chunksInFlight = try arguments.int("mirror-chunks", in: 1...32) ?? settings.mirroring.chunksInFlight
        settings.mirroring.chunkSize = try arguments.int("mirror-chunk-size", in: 10...100_000) ?? settings.mirroring.chunkSize
        settings.mirroring.chunkLease = try arguments.seconds("mirror-chunk-lease", in: 5...3600) ?? settings.mirroring.chunkLease
        settings.infrequentHighPriorityBudget =
            try arguments.int("infrequent-high-priority-budget", in: 0...1_000_000) ?? settings.infrequentHighPriorityBudget
        let environment = ProcessInfo.processInfo.environment["MARQUEE_DELETE_UNKNOWN_CHANNELS"]?.lowercased()
        settings.deleteUnknownChannels = arguments.flag("delete-unknown-channels") || ["1", "true", "yes", "on"].contains(environment ?? "")
        return settings
    }

    static let command = Command(
        "serve", summary: "Run the API, the broadcast dispatcher and the channel scheduler until SIGTERM.",
        discussion: """
            Applies pending migrations at start unless --no-migrate, which refuses to start when the schema is behind.
            Endpoints: /healthz (alive), /readyz (database reachable, schema current), /metrics, /openapi.json, /v1/....
            SIGTERM or SIGINT: stop accepting, finish in-flight requests (up to --grace-period), exit 0.
            Logs go to standard error (--log-format); nothing is printed on standard output.

            \(ExitCode.help([.success, .usage, .unavailable, .software, .configuration]))
            """,
        arguments: [
            Database.option,
            .option(
                "listen", value: "HOST:PORT", help: "Where the API listens (port 0 picks one; see the 'listening' log line).",
                environment: "MARQUEE_LISTEN", default: ServeConfiguration.defaultListen),
            .flag("no-migrate", help: "Do not migrate; refuse to start when migrations are pending."),
            .option(
                "log-format", value: "FORMAT", help: "Log line format.", environment: "MARQUEE_LOG_FORMAT",
                default: ServeConfiguration.defaultLogFormat.rawValue,
                choices: Logger.Format.allCases.map(\.rawValue)),
            .option(
                "log-level", value: "LEVEL", help: "The lowest level logged.", environment: "MARQUEE_LOG_LEVEL",
                default: ServeConfiguration.defaultLogLevel.rawValue,
                choices: Logger.Level.allCases.map(\.rawValue)),
            .option(
                "grace-period", value: "SECONDS", help: "How long in-flight work gets after SIGTERM.",
                environment: "MARQUEE_GRACE_PERIOD", default: "\(ServeConfiguration.defaultGracePeriodSeconds)"),
            .option(
                "max-connections", value: "N", help: "Database connections for the API (its requests).",
                environment: "MARQUEE_DATABASE_CONNECTIONS", default: "\(ServeConfiguration.defaultMaxConnections)"),
            .option(
                "pipeline-connections", value: "N", help: "Database connections of the broadcast pipeline's own pool (dispatcher, scheduler).",
                environment: "MARQUEE_PIPELINE_CONNECTIONS", default: "\(ServeConfiguration.defaultPipelineConnections)"),
            .option(
                "database-wait", value: "SECONDS",
                help: "While the database is down or unreachable, a request is answered 503 with Retry-After within this.",
                environment: "MARQUEE_DATABASE_WAIT", default: seconds(ServeConfiguration.defaultDatabaseWait)),
            .option(
                "max-queue-wait", value: "SECONDS",
                help: "Refuse requests 429 with Retry-After while the oldest one waiting for a database connection has waited this long.",
                environment: "MARQUEE_MAX_QUEUE_WAIT", default: seconds(AdmissionPolicy.defaultMaxQueueWait)),
            .option(
                "apns-push-url", value: "URL", help: "APNs push host (default: Apple's for each app's environment).",
                environment: "MARQUEE_APNS_PUSH_URL"),
            .option(
                "apns-manage-url", value: "URL", help: "APNs channel management host (default: Apple's).",
                environment: "MARQUEE_APNS_MANAGE_URL"),
            .option(
                "apns-ca-file", value: "PATH", help: "CA certificates to trust for APNs (e.g. the simulator's).",
                environment: "MARQUEE_APNS_CA_FILE"),
        ]
            + pipelineOptions.map { option in
                .option(option.name, value: option.value, help: option.help, environment: option.environment, default: option.defaultValue)
            } + [
                .flag(
                    "delete-unknown-channels",
                    help: """
                        Delete channels APNs lists but Marquee never made, once seen for --unknown-channel-grace \
                        (or set MARQUEE_DELETE_UNKNOWN_CHANNELS=1). Off by default: another backend may share the bundle id.
                        """)
            ],
        json: false
    ) { arguments in
        guard let listen = ServeConfiguration.parseListen(try arguments.required("listen")) else {
            throw UsageError("--listen takes HOST:PORT, e.g. \(ServeConfiguration.defaultListen)", commandPath: arguments.commandPath)
        }
        // A port in use is refused before the database is touched (migrations and warmed connections take a while).
        do throws(NetworkError) {
            try HTTP1Server.checkListenAddress(host: listen.host, port: listen.port)
        } catch {
            throw listenFailure(host: listen.host, port: listen.port, error)
        }
        var configuration = ServeConfiguration(
            databaseURL: try Database.url(arguments), host: listen.host, port: listen.port,
            migrate: !arguments.flag("no-migrate"),
            gracePeriod: .seconds(try arguments.int("grace-period", in: 0...3600) ?? ServeConfiguration.defaultGracePeriodSeconds),
            maxConnections: try arguments.int("max-connections", in: 1...200) ?? ServeConfiguration.defaultMaxConnections,
            pipelineConnections: try arguments.int("pipeline-connections", in: 1...50) ?? ServeConfiguration.defaultPipelineConnections,
            apnsPushURL: arguments.string("apns-push-url"), apnsManageURL: arguments.string("apns-manage-url"),
            apnsCAFile: arguments.string("apns-ca-file"), pipeline: try pipelineSettings(arguments))
        configuration.databaseWait = try arguments.seconds("database-wait", in: 1...60) ?? ServeConfiguration.defaultDatabaseWait
        configuration.maxQueueWait = try arguments.seconds("max-queue-wait", in: 0...60) ?? AdmissionPolicy.defaultMaxQueueWait
        let logger = Logger(
            level: Logger.Level(rawValue: try arguments.required("log-level")) ?? ServeConfiguration.defaultLogLevel,
            format: Logger.Format(rawValue: try arguments.required("log-format")) ?? ServeConfiguration.defaultLogFormat,
            sink: Terminal.error)
        let daemon = MarqueeDaemon(configuration: configuration, logger: logger)
        do {
            try await daemon.run { daemon in
                try APIHTTPService(
                    api: daemon.api, host: configuration.host, port: configuration.port,
                    gracePeriod: configuration.gracePeriod, logger: daemon.logger)
            }
        } catch let error as MigrationError {
            throw CommandFailure("\(error)", exitCode: .configuration, code: "schema_not_current")
        } catch let error as PostgresError {
            throw Database.failure(error)
        } catch let error as NetworkError {
            throw listenFailure(host: configuration.host, port: configuration.port, error)
        }
    }

    /// `--listen` names an address this host cannot listen on (in use, or not its own): a configuration to change.
    static func listenFailure(host: String, port: Int, _ error: NetworkError) -> CommandFailure {
        CommandFailure("--listen \(host):\(port): cannot listen there: \(error)", exitCode: .configuration, code: "listen_failed", field: "listen")
    }
}
