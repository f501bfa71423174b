// swift-tools-version:6.2
// Marquee's libFuzzer harnesses, built one at a time by Scripts/fuzz with AddressSanitizer and coverage, linked with
// libFuzzer's runtime without its main (docs/operations.md#fuzzing-the-parsers). A package of its own, as
// Benchmarks/ is; each harness calls the root package's public entry points.
import PackageDescription

let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

/// A harness: an executable target `fuzz-NAME` in Sources/fuzz-NAME, run as `Scripts/fuzz NAME`.
func harness(_ name: String, _ products: [String]) -> Target {
    .executableTarget(
        name: "fuzz-\(name)", dependencies: ["FuzzSupport"] + products.map { .product(name: $0, package: "Marquee") },
        swiftSettings: strict)
}

let package = Package(
    name: "MarqueeFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Marquee", path: "..")
    ],
    targets: [
        .target(name: "FuzzDriver"),
        .target(
            name: "FuzzSupport", dependencies: ["FuzzDriver", .product(name: "MarqueeCore", package: "Marquee")], swiftSettings: strict),
        harness("json", ["MarqueeCore"]),
        harness("merge-patch", ["MarqueeCore"]),
        harness("schema", ["MarqueeCore"]),
        harness("update-body", ["MarqueeCore", "MarqueeService"]),
        harness("import", ["MarqueeService", "MarqueeStore"]),
        harness("payload-scanner", ["MarqueeCore", "APNsSimulator"]),
    ]
)
