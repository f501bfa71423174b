// What `marquee serve` runs, assembled in one place so later features plug in at two points:
// `routes` (one APIRoutes value per feature area) and `services` (one Service per long-running part,
// e.g. the broadcast dispatcher and the scheduler). Everything shares one registry and logger. There are
// two database pools: the API's, and a small one of the broadcast pipeline (the dispatcher, the scheduler
// and the APNs clients' app lookups), so broadcasts, channel work and ends never wait for a connection
// behind requests, and the API's pool can stay small (every backend plans its statements again after each
// autovacuum pass over a table they use).
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// The settings of `marquee serve`, and the one place of their defaults (its `--help` reads them here; the
/// pipeline's are `PipelineSettings`' own).
public struct ServeConfiguration: Sendable {
    public var databaseURL: String
    /// A numeric address and a port; port 0 picks a free one (logged as `listening`); default `defaultListen`.
    public var host: String
    public var port: Int
    public static let defaultHost = "127.0.0.1"
    public static let defaultPort = 8080
    /// `--listen`'s default, `host:port`.
    public static var defaultListen: String { "\(defaultHost):\(defaultPort)" }
    /// The log line format and the lowest level logged (`--log-format`, `--log-level`).
    public static let defaultLogFormat = Logger.Format.logfmt
    public static let defaultLogLevel = Logger.Level.info
    /// Apply pending migrations at start (else refuse to start when the schema is behind).
    public var migrate: Bool
    /// How long in-flight work gets after SIGTERM; default `defaultGracePeriodSeconds`.
    public var gracePeriod: Duration
    public static let defaultGracePeriodSeconds = 30
    /// The pool of the API (requests, and the wake-ups they send after a commit); default `defaultMaxConnections`.
    public var maxConnections: Int
    /// The broadcast pipeline's own pool (the dispatcher's claims and records, the scheduler, the APNs
    /// clients' app lookups), so that its statements never queue behind requests for a connection; default
    /// `defaultPipelineConnections`.
    public var pipelineConnections: Int
    /// 20 connections in all: a pool small enough that few backends plan again after each autovacuum pass.
    public static let defaultMaxConnections = 16
    public static let defaultPipelineConnections = 4
    /// How long a request waits for the database before it is answered 503 with `Retry-After` (the API pool's
    /// checkout deadline), and the bound of libpq's connect and unacknowledged-send timeouts on every connection;
    /// default `defaultDatabaseWait`.
    public var databaseWait: TimeInterval = defaultDatabaseWait
    public static let defaultDatabaseWait: TimeInterval = 5
    /// Keyed requests are refused 429 with `Retry-After` while the oldest request waiting for one of the API's
    /// connections has waited this long (`AdmissionPolicy`); default `AdmissionPolicy.defaultMaxQueueWait`.
    public var maxQueueWait: TimeInterval = AdmissionPolicy.defaultMaxQueueWait
    /// Every connection's settings: the URL with libpq's timeouts bound by `databaseWait`.
    public var database: PostgresConfiguration {
        PostgresConfiguration(url: databaseURL).noticingOutagesWithin(seconds: Int(databaseWait.rounded(.up)))
    }
    /// The start fan-out's and mirroring's own pool (run and pass steps, chunk claims, marks and records): one
    /// connection per chunk in flight (`--start-chunks`, `--mirror-chunks`).
    public var audienceConnections: Int { pipeline.starts.chunksInFlight + pipeline.mirroring.chunksInFlight }
    /// APNs endpoints and CA, carried for the broadcast pipeline (nil: Apple's hosts and the system CAs).
    public var apnsPushURL: String?
    public var apnsManageURL: String?
    public var apnsCAFile: String?
    /// The broadcast pipeline's timings and limits.
    public var pipeline: PipelineSettings
    /// How often this instance proves it is alive, and for how long (its claims are free that long after a crash).
    public var heartbeat = InstanceHeartbeatConfiguration()

    public init(
        databaseURL: String, host: String = defaultHost, port: Int = defaultPort, migrate: Bool = true,
        gracePeriod: Duration = .seconds(defaultGracePeriodSeconds), maxConnections: Int = defaultMaxConnections,
        pipelineConnections: Int = defaultPipelineConnections,
        apnsPushURL: String? = nil, apnsManageURL: String? = nil, apnsCAFile: String? = nil,
        pipeline: PipelineSettings = PipelineSettings()
    ) {
        self.databaseURL = databaseURL
        self.host = host
        self.port = port
        self.migrate = migrate
        self.gracePeriod = gracePeriod
        self.maxConnections = maxConnections
        self.pipelineConnections = pipelineConnections
        self.apnsPushURL = apnsPushURL
        self.apnsManageURL = apnsManageURL
        self.apnsCAFile = apnsCAFile
        self.pipeline = pipeline
    }

    /// The MARQUEE_APNS_* variables as `APNsEndpoints.resolve` reads them: the flags given to serve
    /// over the process environment.
    public var apnsEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { $0.key.hasPrefix("MARQUEE_APNS_") }
        if let apnsPushURL { environment["MARQUEE_APNS_PUSH_URL"] = apnsPushURL }
        if let apnsManageURL { environment["MARQUEE_APNS_MANAGE_URL"] = apnsManageURL }
        if let apnsCAFile { environment["MARQUEE_APNS_CA_FILE"] = apnsCAFile }
        return environment
    }

    /// Parses `host:port` (`[::1]:8080` for IPv6); nil when malformed.
    public static func parseListen(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }
}

/// The broadcast pipeline's timings and limits, as `marquee serve` flags set them (seconds unless named).
public struct PipelineSettings: Sendable, Equatable {
    /// Open a channel this long before the event starts.
    public var channelLeadTime: TimeInterval = 2 * 3600
    /// Delete a channel this long after its end broadcast.
    public var channelDeleteDelay: TimeInterval = 15 * 60
    /// End an event nobody ended at `endsAt` plus this.
    public var endGrace: TimeInterval = 30 * 60
    /// How often the scheduler sweeps.
    public var schedulerInterval: TimeInterval = 5
    /// How often the scheduler compares APNs' channel lists with the database.
    public var reconcileInterval: TimeInterval = 3600
    /// Delete channels APNs lists but Marquee does not know, once seen for `unknownChannelGrace`.
    public var deleteUnknownChannels = false
    public var unknownChannelGrace: TimeInterval = 24 * 3600
    /// Channels per app and environment (Apple's quota).
    public var channelQuota = 10_000
    /// `apns-expiration` is now plus this for channels with most-recent storage (at most 8 hours).
    public var broadcastTTL: TimeInterval = 4 * 3600
    /// Priority-10 broadcasts per channel per hour before `auto` downgrades to 5.
    public var highPriorityBudget = 30
    /// At most one broadcast per channel per this interval (alerts and `high` updates excepted).
    public var conflationInterval: TimeInterval = 1
    /// Delete delivery rows older than this (a few batches each sweep); 0 keeps them.
    public var deliveryRetention: TimeInterval = 30 * 86400
    /// Delete the updates of events ended longer ago than this (in the hourly pass; their counts stay); 0 keeps them.
    public var updateRetention: TimeInterval = 30 * 86400
    /// How long an operator's channel request (reconcile, sweep, delete, recreate) waits on APNs before it
    /// answers 504 `apns_timeout`.
    public var adminTimeout: TimeInterval = 10
    /// How far ahead of the server's clock an update's `occurredAt` may be before it is refused (422).
    public var maxClockSkew: TimeInterval = 60
    /// The audience registry's settings (tokens, channel requests).
    public var audience = AudienceSettings()
    /// The start fan-out's settings.
    public var starts = StartSettings()
    /// Mirroring's chunks of token activities (`--mirror-send-window`, `--mirror-chunks`, `--mirror-chunk-size`,
    /// `--mirror-chunk-lease`).
    public var mirroring = ChunkJobSettings(sendWindow: 500)
    /// Priority-10 mirrored pushes per hour to a token of an installation with `frequentPushesEnabled: false`
    /// (`--infrequent-high-priority-budget`); others get `highPriorityBudget`.
    public var infrequentHighPriorityBudget = 10

    public init() {}

    /// The scheduler's configuration for `instance`.
    public func scheduler(instance: String) -> ChannelSchedulerConfiguration {
        var configuration = ChannelSchedulerConfiguration(instance: instance)
        configuration.leadTime = channelLeadTime
        configuration.deleteDelay = channelDeleteDelay
        configuration.endGrace = endGrace
        configuration.tickInterval = .milliseconds(Int64((schedulerInterval * 1000).rounded()))
        configuration.reconcileInterval = reconcileInterval
        configuration.deleteUnknown = deleteUnknownChannels
        configuration.unknownDeleteGrace = unknownChannelGrace
        configuration.quota = ChannelQuota(limit: channelQuota)
        configuration.deliveryRetention = deliveryRetention > 0 ? deliveryRetention : nil
        configuration.updateRetention = updateRetention > 0 ? updateRetention : nil
        configuration.tokenMaxAge = audience.tokenMaxAge
        return configuration
    }

    /// The dispatcher's configuration for `instance`.
    public func dispatcher(instance: String) -> BroadcastDispatcherConfiguration {
        var configuration = BroadcastDispatcherConfiguration(instance: instance)
        configuration.conflation = BroadcastDispatcherConfiguration.conflation(interval: conflationInterval)
        configuration.expiration = ExpirationPolicy(timeToLive: broadcastTTL)
        configuration.highPriorityBudget = highPriorityBudget
        return configuration
    }
}

/// The daemon: database, API and services.
public final class MarqueeDaemon: Sendable {
    public let configuration: ServeConfiguration
    public let pool: PostgresPool
    /// The broadcast pipeline's connections (`ServeConfiguration.pipelineConnections`): the dispatcher, the
    /// scheduler and the APNs clients' app lookups.
    public let pipelinePool: PostgresPool
    public let metrics: MetricsRegistry
    public let logger: Logger
    public let keys: APIKeyVerifier
    /// Cached attribute types, shared by the API and (later) the ingest path.
    public let attributeTypes: AttributeTypeCatalog
    public let api: APIServer
    /// APNs clients per app, for the broadcast pipeline.
    public let apnsClients: APNsClientDirectory
    /// This process's name in leases and claims: host, pid and a random suffix.
    public let instance: String
    /// Opens, ends, deletes and reconciles channels (one leader across instances); operators reach it through the API.
    public let scheduler: ChannelScheduler
    /// Sends the outbox as broadcasts.
    public let dispatcher: BroadcastDispatcher
    /// Proves this instance alive, so its claims end with it (started before the services, stopped after).
    public let heartbeat: InstanceHeartbeat
    /// Starts events' audiences (push-to-start).
    public let starts: StartFanOut
    /// Mirrors broadcasts to activity tokens.
    public let mirroring: MirrorService
    /// The start fan-out's and mirroring's connections (`ServeConfiguration.audienceConnections`).
    public let audiencePool: PostgresPool

    public init(configuration: ServeConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        // The API's pool has a checkout deadline: while the database is away a request answers 503 within it.
        let pool = PostgresPool(
            configuration: configuration.database, maxConnections: configuration.maxConnections,
            checkoutTimeout: .milliseconds(Int64((configuration.databaseWait * 1000).rounded())))
        let pipelinePool = PostgresPool(configuration: configuration.database, maxConnections: configuration.pipelineConnections)
        self.pipelinePool = pipelinePool
        let metrics = MetricsRegistry()
        let keys = APIKeyVerifier(lookup: APIKeyRepository(pool: pool))
        self.pool = pool
        self.metrics = metrics
        self.keys = keys
        let attributeTypes = AttributeTypeCatalog(repository: AttributeTypeRepository(pool: pool))
        self.attributeTypes = attributeTypes
        let instance = "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        self.instance = instance
        let apnsClients = APNsClientDirectory(apps: AppRepository(pool: pipelinePool), environment: configuration.apnsEnvironment)
        self.apnsClients = apnsClients
        let pipelineMetrics = PipelineMetrics(registry: metrics)
        pipelineMetrics.quotaLimit.set(Double(configuration.pipeline.channelQuota))
        pipelineMetrics.schedulerLeader.set(0)
        let apns = APNsClientGateway { app in try await apnsClients.client(for: app) }
        let catalog = PostgresPipelineCatalog(pool: pipelinePool)
        // One view of the apps parked for a credentials fault: a refusal the dispatcher sees holds the scheduler's
        // creates at once, and the parks are read once per refresh for the whole process.
        let parking = CredentialsParking(pool: pipelinePool, metrics: pipelineMetrics, logger: logger)
        let dispatcher = BroadcastDispatcher(
            pool: pipelinePool, listenTo: configuration.database, apns: apns,
            catalog: catalog,
            configuration: configuration.pipeline.dispatcher(instance: instance),
            metrics: pipelineMetrics, logger: logger, parking: parking)
        let notifier = OutboxNotifier(pool: pool, sender: instance, logger: logger)
        notifier.onCommitted { [dispatcher] dueIn in dispatcher.wake(dueIn: dueIn) }
        self.dispatcher = dispatcher
        heartbeat = InstanceHeartbeat(
            instance: instance, database: configuration.database,
            configuration: configuration.heartbeat, logger: logger)
        // The audience's own connections (the start fan-out and mirroring), so a kick-off's million starts never
        // make a broadcast wait for one.
        let audiencePool = PostgresPool(configuration: configuration.database, maxConnections: configuration.audienceConnections)
        self.audiencePool = audiencePool
        mirroring = MirrorService(
            pool: audiencePool, apns: apns, instance: instance,
            expiration: ExpirationPolicy(timeToLive: configuration.pipeline.broadcastTTL), settings: configuration.pipeline.mirroring,
            planner: MirrorPlanner(
                highPriorityBudget: configuration.pipeline.highPriorityBudget,
                infrequentHighPriorityBudget: configuration.pipeline.infrequentHighPriorityBudget),
            metrics: MirrorMetrics(registry: metrics), logger: logger, parking: parking)
        // One set of start metrics: the fan-out counts the runs it creates and finishes, the routes the manual runs
        // they create and the runs a postponement stops.
        let startMetrics = StartMetrics(registry: metrics)
        let starts = StartFanOut(
            pool: audiencePool, apns: apns, configuration: StartFanOutConfiguration(instance: instance, settings: configuration.pipeline.starts),
            metrics: startMetrics, logger: logger, parking: parking)
        self.starts = starts
        scheduler = ChannelScheduler(
            pool: pipelinePool, apns: apns, catalog: catalog,
            configuration: configuration.pipeline.scheduler(instance: instance),
            metrics: pipelineMetrics, logger: logger, notifier: notifier, parking: parking)
        self.api = APIServer(
            routes: Self.routes(
                pool: pool, metrics: metrics, attributeTypes: attributeTypes, scheduler: scheduler,
                notifier: notifier, pacing: dispatcher.configuration.conflation.pacing,
                adminTimeout: .seconds(configuration.pipeline.adminTimeout),
                maxClockSkew: configuration.pipeline.maxClockSkew,
                settings: configuration.pipeline, starts: starts, startRuns: startMetrics.runs),
            keys: keys, metrics: metrics, logger: logger.with(["component": "api"]),
            admission: APIAdmission(
                policy: .forPool(connections: configuration.maxConnections, maxQueueWait: configuration.maxQueueWait), pool: pool))
    }

    /// The API's feature areas. A new area adds its `APIRoutes` here (and its paths to the OpenAPI document).
    public static func routes(
        pool: PostgresPool, metrics: MetricsRegistry, attributeTypes: AttributeTypeCatalog? = nil,
        scheduler: ChannelScheduler, notifier: OutboxNotifier? = nil, pacing: TimeInterval? = nil,
        adminTimeout: Duration = .seconds(PipelineSettings().adminTimeout),
        maxClockSkew: TimeInterval = PipelineSettings().maxClockSkew,
        settings: PipelineSettings = PipelineSettings(), starts: StartFanOut? = nil,
        readinessTimeout: Duration = SystemRoutes.defaultReadinessTimeout, startRuns: Counter? = nil
    ) -> [any APIRoutes] {
        let apps = AppRepository(pool: pool)
        let attributeTypes = attributeTypes ?? AttributeTypeCatalog(repository: AttributeTypeRepository(pool: pool))
        return [
            SystemRoutes(pool: pool, metrics: metrics, processMetrics: ProcessMetrics(registry: metrics), readinessTimeout: readinessTimeout),
            AppRoutes(apps: apps),
            AttributeTypeRoutes(apps: apps, types: attributeTypes),
            ChannelRoutes(pool: pool, scheduler: scheduler, adminTimeout: adminTimeout),
            EventRoutes(
                pool: pool, types: attributeTypes, notifier: notifier, pacing: pacing, maxClockSkew: maxClockSkew, starts: settings.starts,
                startRuns: startRuns),
            EventStateRoutes(pool: pool, scheduler: scheduler, settings: settings),
            InstallationRoutes(pool: pool, types: attributeTypes, settings: settings.audience, metrics: metrics),
            StartRoutes(pool: pool, settings: settings.starts, fanOut: starts, runs: startRuns),
            StatusRoutes(pool: pool, scheduler: scheduler),
            StatusPageRoutes(),
        ]
    }

    /// The long-running parts, given the HTTP service: the API, the broadcast dispatcher, the channel
    /// scheduler (one leader across instances), the retention purges (on the leader), the start fan-out and
    /// mirroring to activity tokens.
    public func services(http: any Service) -> [any Service] {
        [http, dispatcher, scheduler, scheduler.retention(), starts, mirroring]
    }

    /// Migrates (or, with `migrate` off, requires a current schema); returns the migrations applied.
    public func prepareDatabase() async throws -> [String] {
        let runner = MigrationRunner(pool: pool)
        guard configuration.migrate else {
            try await runner.requireCurrentSchema()
            return []
        }
        return try await runner.migrate()
    }

    /// Opens both pools' connections and runs on each the hot statements its pool serves (the API's: the
    /// ingest; the pipeline's: the dispatcher's claims and records) until PostgreSQL has settled their plans
    /// (`PipelineWarmUp`): a backend parses a statement the first time it runs it and plans it anew for its
    /// first five runs, and after a start the first second of traffic paid for all of that at once.
    /// Failures only leave the work to the requests.
    public func warmUpDatabase() async {
        let pacing = dispatcher.configuration.conflation.pacing
        let pools: [(PostgresPool, Int, @Sendable (PostgresConnection) async throws -> Void)] = [
            (pool, configuration.maxConnections, { try await PipelineWarmUp.ingest(on: $0, pacing: pacing) }),
            (pipelinePool, configuration.pipelineConnections, { try await PipelineWarmUp.dispatcher(on: $0) }),
        ]
        await withTaskGroup(of: Void.self) { [logger] group in
            for (pool, count, warmUp) in pools {
                for _ in 0..<count {
                    group.addTask {
                        do {
                            try await pool.withConnection { connection in
                                try await warmUp(connection)
                                // Held a moment, so the other tasks open connections of their own.
                                try await Task.sleep(for: .milliseconds(50))
                            }
                        } catch {
                            logger.debug("database warm-up incomplete", ["error": .string("\(error)")])
                        }
                    }
                }
            }
        }
    }

    /// Prepares the database, then runs every service until SIGTERM or SIGINT and a graceful stop.
    public func run(http makeHTTP: (MarqueeDaemon) throws -> any Service) async throws {
        let applied = try await prepareDatabase()
        logger.info("database ready", ["migrations_applied": .int(applied.count)])
        await warmUpDatabase()
        // SIGTERM and SIGINT stop the daemon gracefully from before the API listens: one that came between the
        // `listening` line and the services' start used to end the process at once (status 15). Before this point
        // (migrating, perhaps waiting on another instance's migration) they still end it at once.
        let shutdown = ShutdownSignal()
        let signals = ServiceGroup.handleSignals([SIGTERM, SIGINT], shutdown: shutdown, logger: logger)
        defer { for source in signals { source.cancel() } }
        let group = ServiceGroup(
            services: services(http: try makeHTTP(self)), shutdown: shutdown, gracePeriod: configuration.gracePeriod, logger: logger)
        defer {
            pool.close()
            pipelinePool.close()
            audiencePool.close()
        }
        try await heartbeat.start()
        do {
            try await group.run(handlingSignals: [])
        } catch {
            await heartbeat.stop()
            await apnsClients.shutdown()
            throw error
        }
        await heartbeat.stop()
        await apnsClients.shutdown()
        logger.info("stopped")
    }
}
