// swift-tools-version:6.2
// Marquee: APNs broadcast channels for Live Activities, backed by PostgreSQL.
// No third-party packages: the C libraries come from Debian (see Scripts/bootstrap).
import PackageDescription

let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

let package = Package(
    name: "Marquee",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "marquee", targets: ["marquee"]),
        // For the benchmarks package (Benchmarks/Package.swift), which depends on this one by path and can use only its products.
        .library(name: "Postgres", targets: ["Postgres"]),
        .library(name: "Crypto", targets: ["Crypto"]),
        .library(name: "Network", targets: ["Network"]),
        .library(name: "MarqueeCore", targets: ["MarqueeCore"]),
        .library(name: "APNs", targets: ["APNs"]),
        .library(name: "APNsSimulator", targets: ["APNsSimulator"]),
        .library(name: "MarqueeStore", targets: ["MarqueeStore"]),
        // For the fuzzing package (Fuzz/Package.swift): the update routes' body and the import file's reader.
        .library(name: "MarqueeService", targets: ["MarqueeService"]),
    ],
    dependencies: [],
    targets: [
        // System libraries, imported only by the wrapper modules (Postgres, Crypto, Network).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CNGHTTP2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLibEvent", pkgConfig: "libevent", providers: [.apt(["libevent-dev"])]),
        // Function-like macros and other corners Swift cannot call directly.
        .target(name: "CShims", dependencies: ["COpenSSL", "CLibEvent", "CLibPQ"]),

        // Wrappers: the only modules that touch C, always behind `internal import`.
        .target(name: "Postgres", dependencies: ["CLibPQ", "CShims"], swiftSettings: strict),
        .target(name: "Crypto", dependencies: ["COpenSSL", "CShims"], swiftSettings: strict),
        .target(name: "Network", dependencies: ["CLibEvent", "CNGHTTP2", "COpenSSL", "CShims"], swiftSettings: strict),

        // Marquee itself.
        .target(name: "MarqueeCore", swiftSettings: strict),
        .target(name: "APNs", dependencies: ["Network", "Crypto", "MarqueeCore"], swiftSettings: strict),
        .target(
            name: "MarqueeStore", dependencies: ["Postgres", "MarqueeCore"], swiftSettings: strict,
            plugins: ["EmbedMigrations"]),
        .target(
            name: "MarqueeService", dependencies: ["MarqueeStore", "Postgres", "APNs", "Network", "Crypto", "MarqueeCore"], swiftSettings: strict,
            plugins: ["EmbedServedFiles"]),
        // An independent reading of Apple's documents: it never depends on APNs (Scripts/check-graph fails if it does).
        .target(name: "APNsSimulator", dependencies: ["Network", "Crypto", "MarqueeCore"], swiftSettings: strict),
        .target(name: "MarqueeCommandLine", dependencies: ["MarqueeCore"], swiftSettings: strict),
        // Every command of `marquee`, a library so tests can import it; the executable is a thin main over it.
        .target(
            name: "MarqueeCommands",
            dependencies: [
                "MarqueeCommandLine", "MarqueeService", "APNsSimulator", "MarqueeStore", "APNs", "MarqueeCore", "Postgres", "Network", "Crypto",
            ],
            swiftSettings: strict, plugins: ["EmbedVersion"]),
        .executableTarget(name: "marquee", dependencies: ["MarqueeCommands", "MarqueeCommandLine"], swiftSettings: strict),

        // Sql/*.sql becomes a generated Swift source of MarqueeStore, docs/openapi.json and the status page
        // (StatusPage/) ones of MarqueeService, and VERSION with the commit checked out one of MarqueeCommands, so the
        // binary is self-contained and each file stays its one source of truth.
        .executableTarget(name: "SourceEmbedder", path: "Plugins/SourceEmbedder"),
        .plugin(name: "EmbedMigrations", capability: .buildTool(), dependencies: ["SourceEmbedder"]),
        .plugin(name: "EmbedServedFiles", capability: .buildTool(), dependencies: ["SourceEmbedder"]),
        .plugin(name: "EmbedVersion", capability: .buildTool(), dependencies: ["SourceEmbedder"]),

        // Helpers shared by test targets (a regular target: SwiftPM has no test-support kind).
        .target(
            name: "MarqueeTestSupport", dependencies: ["APNs", "APNsSimulator", "Crypto", "MarqueeService", "MarqueeCore", "Postgres"],
            path: "Tests/Support", swiftSettings: strict),

        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "MarqueeTestSupport"], swiftSettings: strict),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto", "MarqueeTestSupport"], swiftSettings: strict),
        // The network tests' peers drive libevent, nghttp2 and OpenSSL directly.
        .testTarget(
            name: "NetworkTests", dependencies: ["Network", "Crypto", "CLibEvent", "CNGHTTP2", "COpenSSL", "MarqueeTestSupport"],
            swiftSettings: strict),
        .testTarget(name: "MarqueeCommandLineTests", dependencies: ["MarqueeCommandLine"], swiftSettings: strict),
        .testTarget(
            name: "MarqueeCommandsTests", dependencies: ["MarqueeCommands", "MarqueeCommandLine", "MarqueeCore", "MarqueeService", "Network"],
            swiftSettings: strict),
        // MarqueeTestSupport holds the tables a store test also runs through the SQL (PushToStartTokenTable).
        .testTarget(name: "MarqueeCoreTests", dependencies: ["MarqueeCore", "MarqueeTestSupport"], swiftSettings: strict),
        // The simulator alone, held against Apple's pages; the client against the simulator is tested in APNsTests.
        .testTarget(
            name: "APNsSimulatorTests", dependencies: ["APNsSimulator", "Crypto", "Network", "MarqueeCore", "MarqueeTestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "APNsTests",
            dependencies: [
                "APNs", "APNsSimulator", "MarqueeCommands", "MarqueeTestSupport", "MarqueeCommandLine", "Crypto", "Network", "MarqueeCore",
            ], swiftSettings: strict),
        .testTarget(
            name: "MarqueeServiceTests",
            dependencies: ["MarqueeService", "MarqueeStore", "Postgres", "APNs", "Crypto", "Network", "MarqueeCore", "MarqueeTestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "MarqueeStoreTests", dependencies: ["MarqueeStore", "Postgres", "MarqueeCore", "MarqueeTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "MarqueeService", "MarqueeTestSupport", "APNsSimulator", "MarqueeStore", "APNs", "Postgres", "Crypto", "Network", "MarqueeCore",
            ], swiftSettings: strict),
    ]
)
