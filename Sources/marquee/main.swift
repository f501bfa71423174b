// The one executable: every operator command, the daemon and the APNs simulator.
import Foundation
import MarqueeCommandLine

let root = Command("marquee", summary: "Marquee: APNs broadcast channels for Live Activities.", subcommands: [apnsCommand, simulatorCommand])
let code = await CommandRunner.run(root, arguments: Array(CommandLine.arguments.dropFirst()))
exit(code.rawValue)
