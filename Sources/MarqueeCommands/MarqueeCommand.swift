// The `marquee` command: every operator command, the daemon and the APNs simulator, run by the thin
// executable (Sources/marquee) and by tests. Each command group lives in its own file; add a new group to the list below.
import Foundation
import MarqueeCommandLine

/// The `marquee` command and its subcommands.
public let marqueeCommand: Command = Command(
    "marquee", summary: "Marquee: APNs broadcast channels for Live Activities.",
    discussion: """
        attribute-type, event, channel and status are clients of a running server's HTTP API (--url or MARQUEE_URL,
        --api-key or MARQUEE_API_KEY); the other commands work on the database or APNs directly.

        \(ExitCode.help())
        """,
    version: "marquee \(embeddedVersion) (commit \(embeddedCommit))",
    subcommands: [
        ServeCommand.command,
        MigrateCommand.command,
        KeyCommands.command,
        AppCommands.command,
        InstallationCommands.command,
        AttributeTypeCommands.command,
        EventCommands.command,
        ChannelCommands.command,
        StatusCommand.command,
        apnsCommand,
        simulatorCommand,
        OpenAPICommand.command,
        CompletionCommand.command,
    ])
