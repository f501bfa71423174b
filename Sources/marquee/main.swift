// The one executable: every operator command, the daemon and the APNs simulator.
// Each command group lives in its own file; add a new group to the list below.
import Foundation
import MarqueeCommandLine

let root = Command("marquee", summary: "Marquee: APNs broadcast channels for Live Activities.", subcommands: [
    ServeCommand.command,
    MigrateCommand.command,
    KeyCommands.command,
    AppCommands.command,
    apnsCommand,
    simulatorCommand,
    OpenAPICommand.command,
])
let code = await CommandRunner.run(root, arguments: Array(CommandLine.arguments.dropFirst()))
exit(code.rawValue)
