import Foundation
import Synchronization
import Testing

@testable import MarqueeCore

/// Collects logged lines.
private final class Lines: Sendable {
    private let storage = Mutex<[String]>([])
    var all: [String] { storage.withLock { $0 } }
    func append(_ line: String) { storage.withLock { $0.append(line) } }
}

@Suite struct LoggerTests {
    let clock = ManualWallClock(Date(timeIntervalSince1970: 1_795_977_000.05))

    @Test func logfmtLines() {
        let lines = Lines()
        let logger = Logger(level: .info, format: .logfmt, clock: clock, metadata: ["app": "com.example.scores"], sink: lines.append)
        logger.info("channel created", ["event": "match-42", "attempt": .int(2), "ok": true, "note": "two words", "empty": ""])
        logger.debug("hidden")
        #expect(
            lines.all == [
                #"ts=2026-11-29T18:30:00.050Z level=info msg="channel created" app=com.example.scores event=match-42 attempt=2 ok=true note="two words" empty="""#
            ])
    }

    @Test func jsonLines() throws {
        let lines = Lines()
        let logger = Logger(level: .debug, format: .json, clock: clock, sink: lines.append).with(["instance": "a"])
        logger.warning("slow \"apns\"", ["latency_ms": 1520.5, "status": .int(429)])
        let line = try JSONValue(parsing: lines.all[0])
        #expect(line.objectValue?.keys == ["ts", "level", "msg", "instance", "latency_ms", "status"])
        #expect(line["msg"] == "slow \"apns\"" && line["level"] == "warning" && line["status"] == 429 && line["latency_ms"] == 1520.5)
    }

    @Test func levelsFilter() {
        let lines = Lines()
        var logger = Logger(level: .warning, clock: clock, sink: lines.append)
        logger.info("no")
        logger.notice("no")
        logger.warning("yes")
        logger.error("yes")
        logger.level = .debug
        logger.debug("yes")
        #expect(lines.all.count == 3)
        #expect(Logger.Level.debug < .error)
    }

    @Test func withReplacesKeys() {
        let lines = Lines()
        Logger(clock: clock, metadata: ["k": "1"], sink: lines.append).with(["k": "2"]).info("m")
        #expect(lines.all == ["ts=2026-11-29T18:30:00.050Z level=info msg=m k=2"])
    }

    @Test func secretsNeverReachTheSink() {
        let lines = Lines()
        let logger = Logger(format: .json, clock: clock, sink: lines.append)
        let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
        let jwt = Redacted("eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ.eyJpc3MiOiJ0ZWFtIn0.sig")
        logger.info("sent", ["token": .deviceToken(token), "jwt": .redacted(jwt), "text": "\(jwt)"])
        let line = lines.all[0]
        #expect(line.contains(#""token":"a1b2c3d4…""#))
        #expect(!line.contains("e5f6") && !line.contains("eyJ"))
        #expect(line.contains(#""jwt":"<redacted>""#) && line.contains(#""text":"<redacted>""#))
        #expect(String(describing: jwt) == "<redacted>" && String(reflecting: jwt) == "<redacted>")
        var dumped = ""
        dump(jwt, to: &dumped)
        #expect(!dumped.contains("eyJ"))
        #expect(jwt.value.hasPrefix("eyJ"))
        #expect(LogValue.deviceToken("abc") == "abc")
    }
}

@Suite struct WallClockTests {
    @Test func manualClockMovesOnlyWhenTold() {
        let clock = ManualWallClock(Date(timeIntervalSince1970: 100))
        #expect(clock.now == Date(timeIntervalSince1970: 100))
        clock.advance(by: 2.5)
        #expect(clock.now == Date(timeIntervalSince1970: 102.5))
        clock.set(to: Date(timeIntervalSince1970: 5))
        #expect(clock.now == Date(timeIntervalSince1970: 5))
    }

    @Test func systemClockIsNow() {
        let before = Date()
        let now = SystemWallClock().now
        #expect(now >= before && now <= Date())
    }
}
