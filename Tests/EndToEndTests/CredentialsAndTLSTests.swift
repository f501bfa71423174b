import APNsSimulator
import Foundation
import MarqueeCore
import Postgres
import Testing

/// What the audience's senders make of APNs' refusals of the app and of a connection that never carried a request,
/// through `marquee serve` as a process and the simulator: a refused key parks the fan-out as it parks broadcasts, and
/// a create that failed at the TLS handshake goes again.
@Suite(.enabled(if: MarqueeProcess.available))
struct CredentialsAndTLSTests {
    typealias Fans = StartFanOutTests

    @Test func aRefusedKeyParksTheFanOutWhichGoesOnOnceTheKeyWorksAndStartsNoDeviceTwice() async throws {
        try await BroadcastHarness.run(serveArguments: ["--audience-lead", "900", "--start-send-window", "5", "--start-chunks", "2"]) {
            harness in
            let members = (1...30).map {
                Fans.Member(installationID: "key-\($0)", token: Fans.token($0), os: "17.4", follows: true, enabled: true)
            }
            try await Fans.seed(members, topic: "team:arsenal", harness: harness)
            // The app's key is revoked: APNs refuses every device push with 403 InvalidProviderToken.
            harness.simulator.engine.rejectEvery(.invalidProviderToken, on: .devicePush)
            let event = try await Fans.createMatch(harness, "revoked-key", startsIn: 7200)
            #expect(try await harness.api("POST", "/v1/events/\(event)/starts", [:]).status == 202)
            try await harness.waitUntil("the app is parked", timeout: 60) {
                let apps = try await harness.api("GET", "/v1/status").json["apps"]?.arrayValue ?? []
                return apps.contains { $0["credentialsFault"]?["reason"] == "InvalidProviderToken" }
            }
            // At most the windows in flight were refused; nothing more goes while the app is parked.
            let refused = harness.simulator.engine.statusCounts[403] ?? 0
            #expect(refused >= 1 && refused <= 2 * 5, "\(refused) refused")
            let parked = try await Fans.run(of: event, harness) { _ in true }
            #expect(parked["counts"]?["accepted"] == 0 && parked["counts"]?["rejected"] == [:], "\(parked)")

            // The key works again, and the park's window runs out (set here instead of waiting its 5 minutes).
            harness.simulator.engine.stopRejecting(on: .devicePush)
            try await harness.pool.execute("UPDATE app_credential_faults SET retry_at = now() - interval '1 second'")
            let run = try await Fans.run(of: event, harness, timeout: 90) { $0["counts"]?["accepted"] == 30 }
            #expect(run["counts"]?["unknown"] == 0, "\(run)")
            try await harness.waitUntil("the park ended") {
                let apps = try await harness.api("GET", "/v1/status").json["apps"]?.arrayValue ?? []
                return apps.allSatisfy { $0["credentialsFault"] == .null }
            }
            let shown = Fans.activities(harness)
            for member in members {
                let accepted = harness.simulator.engine.devicePushes(to: member.token).count
                #expect(accepted == 1 && shown[member.token]?.count == 1, "\(member.installationID): \(accepted) accepted starts")
            }
            #expect(harness.simulator.engine.statusCounts[403] == refused, "no refusal after the key worked")
        }
    }

    @Test func aCreateThatFailedAtTheTLSHandshakeGoesAgainAndLeavesNoErrorOnceOpen() async throws {
        try await BroadcastHarness.run { harness in
            // serve trusts the system's CAs only: the simulator's certificate is refused at every handshake.
            try await harness.killAndRestart { $0["MARQUEE_APNS_CA_FILE"] = nil }
            let event = try await Fans.createMatch(harness, "no-ca", startsIn: 600)
            try await harness.waitUntil("the create met the handshake's refusal", timeout: 60) {
                try await harness.count(
                    """
                    SELECT count(*)::bigint AS n FROM deliveries d JOIN channels c ON c.id = d.channel_id
                    WHERE c.event_id = \(event) AND d.kind = 'channel_create' AND d.status IS NULL
                    """) >= 1
            }
            let failing = try await harness.pool.query("SELECT state, last_error FROM channels WHERE event_id = \(event)")
            let state = try #require(failing.first).decode(String.self, column: "state")
            #expect(state != ChannelLifecycle.State.createUnknown.rawValue, "a request that never left is not unknown")
            #expect(try failing.first?.decode(String?.self, column: "last_error") != nil)

            try await harness.killAndRestart()
            let channel = try await harness.openChannel(of: event, timeout: 90)
            let row = try #require(try await harness.pool.query("SELECT state, last_error FROM channels WHERE event_id = \(event)").first)
            #expect(try row.decode(String.self, column: "state") == ChannelLifecycle.State.open.rawValue)
            #expect(try row.decode(String?.self, column: "last_error") == nil, "no stale error on the open channel")
            #expect(harness.simulator.engine.channel(id: channel) != nil)
            #expect(
                try await harness.count(
                    "SELECT count(*)::bigint AS n FROM channels WHERE state = \(ChannelLifecycle.State.createUnknown.rawValue)") == 0)
        }
    }
}
