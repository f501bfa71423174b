// swift-tools-version:6.2
// Marquee's benchmark drivers, built in release mode by Scripts/bench (see docs/benchmarks.md). A package of its
// own, so the root manifest holds only the product; it depends on the root by path and uses the root's products.
import PackageDescription

let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

let package = Package(
    name: "MarqueeBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Marquee", path: "..")
    ],
    targets: [
        .target(name: "BenchSupport", swiftSettings: strict),
        // Driver for Scripts/bench.d/h2: HTTP/2 client load.
        .executableTarget(
            name: "NetworkBench",
            dependencies: [
                .product(name: "Network", package: "Marquee"), "BenchSupport",
            ], swiftSettings: strict),
        // The Network servers with trivial handlers, for Scripts/bench.d/h2-servers.
        .executableTarget(
            name: "ServerBench",
            dependencies: [
                .product(name: "Network", package: "Marquee")
            ], swiftSettings: strict),

        // Driver for Scripts/bench apns: APNsClient against the simulator.
        .executableTarget(
            name: "APNsBench",
            dependencies: [
                .product(name: "APNs", package: "Marquee"), .product(name: "APNsSimulator", package: "Marquee"),
                .product(name: "Network", package: "Marquee"), .product(name: "Crypto", package: "Marquee"),
                .product(name: "MarqueeCore", package: "Marquee"), "BenchSupport",
            ], swiftSettings: strict),

        // Driver for Scripts/bench service: an open-loop load generator against `marquee serve`.
        // Also Scripts/bench tokens: registrations at a fixed rate, and an event's audience read in keyset pages.
        .executableTarget(
            name: "ServiceBench",
            dependencies: [
                .product(name: "Postgres", package: "Marquee"), .product(name: "MarqueeStore", package: "Marquee"), "BenchSupport",
            ], swiftSettings: strict),

        // Driver for Scripts/bench pg: the Postgres module against pgbench and psql.
        .executableTarget(
            name: "PostgresBench",
            dependencies: [
                .product(name: "Postgres", package: "Marquee")
            ], swiftSettings: strict),

        // The service bench's measurement rules (run by Scripts/test).
        .testTarget(name: "ServiceBenchTests", dependencies: ["ServiceBench"], swiftSettings: strict),
    ]
)
