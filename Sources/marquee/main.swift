// The one executable: a thin main over MarqueeCommands, where every command lives.
import Foundation
import MarqueeCommandLine
import MarqueeCommands

let code = await CommandRunner.run(marqueeCommand, arguments: Array(CommandLine.arguments.dropFirst()))
exit(code.rawValue)
