import MarqueeCore
import Testing

@testable import MarqueeCommands

/// `marquee status` prints what GET /v1/status adds for match day: start runs in their first pass and mirroring.
@Suite struct StatusTextTests {
    @Test func startRunsAndMirroringArePrinted() throws {
        let status = try JSONValue(
            parsing: #"{"apps": [], "outboxBacklog": 2, "oldestOutboxAgeSeconds": 3.5, "lostChannels": [], "lastErrors": [],"#
                + #" "startRunsInProgress": 1, "mirroring": {"passesRunning": 4, "oldestPassAgeSeconds": 12.7}}"#)
        let text = StatusCommand.text(status)
        #expect(
            text.contains("outbox backlog: 2 (oldest 3 s)\nstart runs in their first pass: 1\nmirroring passes running: 4 (oldest 12 s)"), "\(text)")
    }
}
