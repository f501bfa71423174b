// One exit-code table for the whole CLI (issue 20): an API answer or a transport failure maps to the code a
// script can act on. 75 is "try again later" everywhere: 429, 5xx, an answer that did not come in time.
import MarqueeCommandLine
import MarqueeCore
import Network
import Testing

@testable import MarqueeCommands

@Suite struct APIExitCodeTests {
    @Test func statusesMapToOneTable() {
        let expected: [(Int, ExitCode)] = [
            (400, .dataError), (401, .permissionDenied), (403, .permissionDenied), (404, .noInput), (409, .failure),
            (413, .dataError), (422, .dataError), (429, .temporaryFailure), (500, .temporaryFailure), (503, .temporaryFailure),
            (504, .temporaryFailure),
        ]
        for (status, code) in expected {
            let failure = AdminAPIClient.failure(status: status, json: ["error": ["code": "x", "message": "m"]], plain: true)
            #expect(failure.exitCode == code, "HTTP \(status)")
        }
    }

    @Test func transportFailuresSayWhetherToRetry() {
        #expect(AdminAPIClient.failure(.connectionRefused("http://127.0.0.1:1")).exitCode == .unavailable)
        #expect(AdminAPIClient.failure(.tls("handshake")).exitCode == .unavailable)
        #expect(AdminAPIClient.failure(.certificateRejected("self-signed")).exitCode == .unavailable)
        #expect(AdminAPIClient.failure(.timedOut("GET /v1/status", .seconds(30))).exitCode == .temporaryFailure)
        #expect(AdminAPIClient.failure(.connectionClosed("GET /v1/status")).exitCode == .temporaryFailure)
    }
}
