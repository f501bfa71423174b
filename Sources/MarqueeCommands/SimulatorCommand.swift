// `marquee simulator`: the APNs simulator as a long-running process. Its flags belong to
// SimulatorConfiguration, which reads them, so the command hands them over whole.
import APNsSimulator
import Foundation
import MarqueeCommandLine
import MarqueeCore
import MarqueeService

let simulatorCommand = Command(
    "simulator", summary: "Run a local APNs that behaves as Apple documents (for development, tests and demos).",
    helpText: SimulatorConfiguration.helpText + "\n\n" + ExitCode.help([.success, .usage, .software])
) { words in
    let configuration: SimulatorConfiguration
    do {
        guard let parsed = try SimulatorConfiguration.parse(arguments: words) else { return }
        configuration = parsed
    } catch {
        throw CommandFailure("\(error)\nSee 'marquee simulator --help'.", exitCode: .usage, code: "usage")
    }
    let logger = Logger(level: .info, format: .json, sink: Terminal.error)
    let simulator = try await APNsSimulator.start(configuration: configuration, logger: logger)
    Terminal.print(simulator.summary)
    try await ServiceGroup(services: [SimulatorService(simulator: simulator)], logger: logger).run()
}

/// Keeps the simulator up until shutdown, then stops it (writing its channels).
struct SimulatorService: Service {
    let simulator: APNsSimulator
    var name: String { "apns-simulator" }

    func run(until shutdown: ShutdownSignal) async throws {
        await shutdown.wait()
        await simulator.shutdown()
        // The exit report's totals; the whole report is GET /devices, or --device-report FILE.
        guard !simulator.engine.devices.isEmpty else { return }
        let report = simulator.deviceReport
        let totals = ["devices", "activities", "duplicates", "receivedAfterEnd", "startsOverBudget"]
            .map { "\($0)=\(report[$0]?.intValue ?? 0)" }.joined(separator: " ")
        Terminal.print("device report: \(totals) activitiesByState=\(report["activitiesByState"]?.jsonString ?? "{}")")
    }
}
