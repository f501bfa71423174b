// `marquee event start|starts`: the flags each takes and what it sends, checked without a server, and the
// human forms of the run object (the table, the block and --follow's line), rendered from JSON samples.
import MarqueeCommandLine
import MarqueeCore
import Testing

@testable import MarqueeCommands

@Suite struct EventStartCommandsTests {
    /// A run in its first pass, as `POST /v1/events/{id}/starts` and `GET /v1/events/{id}/starts` answer it.
    static let running = try! JSONValue(
        parsing: #"""
            {"id": 3, "eventId": 12, "kind": "manual", "state": "running", "skipReason": null, "topics": ["team:ars"],
             "dueAt": "2026-11-29T17:15:00Z", "startedAt": "2026-11-29T17:15:01Z", "firstPassDoneAt": null, "finishedAt": null,
             "counts": {"audience": 1234, "notStartable": 12, "planned": 0, "sending": 3, "accepted": 1200, "unknown": 2, "noChannel": 5,
                        "rejected": {"BadDeviceToken": 1, "Unregistered": 2},
                        "skipped": {"device_limit": 4, "concurrency": 2, "throttled": 0, "disabled": 1}},
             "progress": {"decided": 650, "estimatedAudience": 1300, "ratePerSecond": 812.5, "etaSeconds": 0.8},
             "lagSeconds": 12.3,
             "adoption": {"total": 900, "byOSMajor": {"18": 600, "17": 300}}}
            """#)

    /// An automatic run that never ran: the event had no start alert.
    static let skipped = try! JSONValue(
        parsing: #"""
            {"id": 2, "eventId": 12, "kind": "automatic", "state": "skipped", "skipReason": "no_alert", "topics": null,
             "dueAt": "2026-11-29T17:00:00Z", "startedAt": "2026-11-29T17:00:00Z", "firstPassDoneAt": null,
             "finishedAt": "2026-11-29T17:00:00Z",
             "counts": {"audience": 0, "notStartable": 0, "planned": 0, "sending": 0, "accepted": 0, "unknown": 0, "noChannel": 0,
                        "rejected": {}, "skipped": {}},
             "progress": {"decided": 0, "estimatedAudience": null, "ratePerSecond": 0, "etaSeconds": null},
             "lagSeconds": null, "adoption": {"total": 0, "byOSMajor": {}}}
            """#)

    static func parsed(_ words: [String]) throws -> ParsedArguments {
        guard case .run(_, let parsed) = try CommandParser(root: marqueeCommand, environment: [:]).parse(words) else {
            Issue.record("\(words) is not a command that runs")
            throw UsageError("not a command", commandPath: [])
        }
        return parsed
    }

    /// The message of the usage error `words` make, from the parser or from the command's own checks.
    static func usageMessage(_ words: [String]) -> String? {
        do {
            let arguments = try parsed(words)
            if words.contains("start") { _ = try EventCommands.startBody(arguments) } else { _ = try EventCommands.followInterval(arguments) }
            return nil
        } catch let error as UsageError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    // MARK: Input

    @Test func startSendsTheTopicsAndTheAlertGiven() throws {
        let arguments = try Self.parsed([
            "event", "start", "12", "--topic", "team:ars", "--topic", "team:che", "--alert-title", "Kick-off", "--alert-body",
            "Arsenal v Chelsea", "--alert-sound", "default",
        ])
        #expect(
            try EventCommands.startBody(arguments) == [
                "topics": ["team:ars", "team:che"], "alert": ["title": "Kick-off", "body": "Arsenal v Chelsea", "sound": "default"],
            ])
        #expect(try EventCommands.startBody(Self.parsed(["event", "start", "12"])) == [:], "no flags: the event's start alert, every topic")
        let titled = try EventCommands.startBody(Self.parsed(["event", "start", "12", "--alert-title", "K", "--alert-body", "B"]))
        #expect(titled == ["alert": ["title": "K", "body": "B"]])
    }

    @Test func startRefusesHalfAnAlertAndAnEmptyTopic() {
        let cases: [([String], String)] = [
            (["--alert-title", "Kick-off"], "missing --alert-body"),
            (["--alert-body", "Arsenal v Chelsea"], "missing --alert-title"),
            (["--alert-sound", "default"], "--alert-sound needs --alert-title and --alert-body"),
            (["--topic", ""], "--topic takes a topic of the event"),
            (["--sound", "default"], "unknown option --sound"),
            (["--alert-title", "a", "--alert-title", "b", "--alert-body", "c"], "--alert-title given twice"),
            (["13"], "unexpected argument '13'"),
        ]
        for (words, message) in cases {
            let got = Self.usageMessage(["event", "start", "12"] + words)
            #expect(got?.contains(message) == true, "\(words): \(got ?? "no error")")
        }
        #expect(Self.usageMessage(["event", "start"]) == "missing ID")
    }

    @Test func startsTakesAnIntervalOnlyToFollow() throws {
        #expect(try EventCommands.followInterval(Self.parsed(["event", "starts", "12"])) == nil)
        #expect(try EventCommands.followInterval(Self.parsed(["event", "starts", "12", "--follow"])) == 1)
        #expect(try EventCommands.followInterval(Self.parsed(["event", "starts", "12", "--follow", "--interval", "0.5"])) == 0.5)
        let cases: [([String], String)] = [
            (["--interval", "2"], "--interval goes with --follow"),
            (["--follow", "--interval", "0"], "--interval takes a number of seconds from 0.1 to 3600.0, not '0'"),
            (["--follow", "--interval", "soon"], "--interval takes a number of seconds"),
            (["--follow=yes"], "--follow takes no value"),
            (["--watch"], "unknown option --watch"),
        ]
        for (words, message) in cases {
            let got = Self.usageMessage(["event", "starts", "12"] + words)
            #expect(got?.contains(message) == true, "\(words): \(got ?? "no error")")
        }
    }

    @Test func helpGivesTheUsageAnExampleAndTheExitCodes() throws {
        let parser = CommandParser(root: marqueeCommand, environment: [:])
        guard case .help(let start) = try parser.parse(["event", "start", "--help"]),
            case .help(let starts) = try parser.parse(["event", "starts", "--help"]),
            case .help(let group) = try parser.parse(["event", "--help"])
        else {
            Issue.record("--help is not help")
            return
        }
        #expect(start.hasPrefix("Usage: marquee event start ID [OPTIONS]"))
        for line in [
            "--topic TOPIC", "[repeatable]", "--alert-title TEXT", "--alert-body TEXT", "--alert-sound NAME", "--json",
            "Example:\n  marquee event start 42",
        ] {
            #expect(start.contains(line), "start --help lacks '\(line)'")
        }
        #expect(starts.hasPrefix("Usage: marquee event starts ID [OPTIONS]"))
        for line in ["--follow ", "--interval SECONDS", "(default 1)", "Example:\n  marquee event starts 42", "130 interrupted"] {
            #expect(starts.contains(line), "starts --help lacks '\(line)'")
        }
        for help in [start, starts] {
            for code in [
                "0   success", "1   refused", "64  the command line is wrong", "65  input data is invalid", "66  an input file", "69  a service",
                "75  temporary failure",
            ] {
                #expect(help.contains(code), "lacks '\(code)': \(help)")
            }
        }
        #expect(!start.contains("130 "), "start does not poll")
        #expect(group.contains("\n  start ") && group.contains("\n  starts "), "\(group)")
    }

    @Test func theCommandsThatMoveAnEventHaveHelpWithAnExampleAndTheExitCodes() throws {
        let parser = CommandParser(root: marqueeCommand, environment: [:])
        let expected: [(String, [String])] = [
            (
                "reschedule",
                [
                    "--starts-at DATE", "--ends-at DATE", "--audience-lead SECONDS", "--postponed-state JSON",
                    "Example:\n  marquee event reschedule 42",
                ]
            ),
            (
                "edit",
                [
                    "--topic TOPIC", "[repeatable]", "--start-alert-title TEXT", "--no-start-alert", "--freshness JSON", "--no-freshness",
                    "Examples:\n  marquee event edit 42",
                ]
            ),
            ("cancel", ["--content-state JSON", "--patch JSON", "--dismissal-date DATE", "Example:\n  marquee event cancel 42"]),
        ]
        for (name, lines) in expected {
            guard case .help(let help) = try parser.parse(["event", name, "--help"]) else {
                Issue.record("event \(name) --help is not help")
                continue
            }
            #expect(help.hasPrefix("Usage: marquee event \(name) ID [OPTIONS]"), "\(help)")
            for line in lines + ["--json", "0   success", "1   refused", "64  the command line is wrong", "69  a service"] {
                #expect(help.contains(line), "\(name) --help lacks '\(line)'")
            }
        }
        guard case .help(let group) = try parser.parse(["event", "--help"]) else { return }
        #expect(group.contains("\n  reschedule ") && group.contains("\n  edit ") && group.contains("\n  cancel "), "\(group)")
    }

    // MARK: Rendering

    @Test func theTableHasARowPerRunWithTotals() {
        let table = StartRunText.table([Self.running, Self.skipped])
        #expect(
            table == """
                ID  KIND       STATE               AUDIENCE  ACCEPTED  REJECTED  SKIPPED                                       UNKNOWN  ADOPTION
                3   manual     running             1234      1200      3         7: device_limit 4, concurrency 2, disabled 1  2        900
                2   automatic  skipped (no_alert)  0         0         0         0                                             0        0
                """)
        #expect(StartRunText.table([]) == "(no start runs)")
    }

    @Test func theBlockBreaksEveryCountDown() {
        let block = StartRunText.block(Self.running)
        #expect(
            block == """
                id:              3
                event:           12
                kind:            manual
                state:           running
                topics:          team:ars
                due:             2026-11-29T17:15:00Z
                started:         2026-11-29T17:15:01Z
                first pass done: -
                finished:        -
                audience:        1234 (12 not startable: below iOS 17.2)
                planned:         0
                sending:         3
                accepted:        1200 (5 without a channel: the event had none)
                unknown:         2
                rejected:        3: BadDeviceToken 1, Unregistered 2
                skipped:         7: device_limit 4, concurrency 2, disabled 1
                progress:        50% 650/~1300, 812.5/s, eta 0.8s
                lag:             12s
                adoption:        900 (iOS 17: 300, iOS 18: 600)
                """)
        let skipped = StartRunText.block(Self.skipped)
        for line in [
            "state:           skipped (no_alert)", "topics:          all of the event's", "audience:        0\n", "rejected:        0\n",
            "progress:        0 decided, 0.0/s, eta ?", "lag:             -", "adoption:        0",
        ] {
            #expect(skipped.contains(line), "lacks '\(line)': \(skipped)")
        }
    }

    @Test func theFollowLineDrawsABarOnlyForATerminal() {
        #expect(StartRunText.progressLine(Self.running) == "run 3 running 50% 650/~1300, 812.5/s, eta 0.8s")
        #expect(
            StartRunText.progressLine(Self.running, barWidth: 24)
                == "run 3 running [############            ] 50% 650/~1300, 812.5/s, eta 0.8s")
        #expect(StartRunText.progressLine(Self.running, barWidth: StartRunText.barWidth).count <= 80)
        #expect(StartRunText.progressLine(Self.skipped, barWidth: 4) == "run 2 skipped (no_alert) [    ] 0 decided, 0.0/s, eta ?")
        // More decided than estimated (an estimate): full, never past it.
        let over = try! JSONValue(
            parsing: #"{"id": 4, "state": "done", "progress": {"decided": 1400, "estimatedAudience": 1300, "ratePerSecond": 10, "etaSeconds": 0}}"#)
        #expect(StartRunText.progressLine(over, barWidth: 4) == "run 4 done [####] 100% 1400/~1300, 10.0/s, eta 0.0s")
    }

    @Test func aCtrlCSaysHowFarTheRunWas() {
        #expect(
            StartRunText.interruption(Self.running, event: 12)
                == "marquee: interrupted; start run 3 of event 12 goes on at the server (last seen running: 50% 650/~1300, 812.5/s, eta 0.8s)")
        #expect(StartRunText.interruption(nil, event: 12) == "marquee: interrupted; event 12 had no start run yet")
    }

    /// --follow waits for a run, follows a rolling one, and says when iOS 18 starts wait for the channel (issue 48).
    @Test func followWaitsForARunAndThroughLatePassesAndSaysWhatWaitsForTheChannel() throws {
        #expect(StartRunText.waitingForARun(event: 12).hasPrefix("event 12 has no start run yet: waiting for one"))
        let rolling = try JSONValue(parsing: #"{"id": 4, "state": "rolling"}"#)
        #expect(StartRunText.isOpen(Self.running) && StartRunText.isOpen(rolling))
        for state in ["done", "skipped", "stopped"] {
            #expect(!StartRunText.isOpen(try JSONValue(parsing: #"{"id": 4, "state": "\#(state)"}"#)), "\(state)")
        }
        #expect(StartRunText.channelWait(Self.running, channelState: "creating") == "iOS 18 devices wait for the event's channel (creating)")
        #expect(StartRunText.channelWait(Self.running, channelState: "none") == "iOS 18 devices wait for the event's channel (not planned yet)")
        #expect(StartRunText.channelWait(Self.running, channelState: "open") == nil)
        #expect(StartRunText.channelWait(rolling, channelState: "planned") == nil, "a rolling run's first pass is over")
    }

    @Test func durationsReadAsAPersonWouldSayThem() {
        #expect(StartRunText.duration(0.8) == "0.8s")
        #expect(StartRunText.duration(42.4) == "42s")
        #expect(StartRunText.duration(185) == "3m05s")
        #expect(StartRunText.duration(7620) == "2h07m")
        #expect(StartRunText.duration(-1) == "?" && StartRunText.duration(.infinity) == "?")
    }

    @Test func theBarFillsItsShareAndStaysInsideItsWidth() {
        #expect(ProgressBar.bar(done: 5, total: 10, width: 10) == "#####     ")
        #expect(ProgressBar.bar(done: 20, total: 10, width: 4) == "####")
        #expect(ProgressBar.bar(done: 3, total: 0, width: 4) == "    ")
        #expect(ProgressBar.bar(done: -1, total: 10, width: 4) == "    ")
    }
}
