// The body of `POST /v1/events/{id}/updates` and `…/end`, read as the route reads it (MarqueeService's
// UpdateRequest) against an event of the match type: every refusal is a 4xx with a code, never a trap, and a body
// that is accepted leaves a state that prints and parses back.
import FuzzSupport
import MarqueeCore
import MarqueeService

fuzz { input in
    guard let body = try? JSONValue(parsing: input.bytes) else { return }
    for action in UpdateAction.allCases {
        do throws(APIError) {
            let request = try UpdateRequest(body: body, action: action, maxClockSkew: 60)
            _ = request.draft(apiKeyID: 1)
            if let whole = try request.encodedContentState(matchType) {
                checkRoundTrip(try request.checked(whole, startOverhead: 600))
            } else {
                checkRoundTrip(try request.nextState(after: matchState, type: matchType, startOverhead: 600))
            }
        } catch {
            check((400..<500).contains(error.status), "a body was refused with \(error.status)")
            check(!error.code.isEmpty && !error.message.isEmpty, "a refusal without a code or message")
        }
    }
}
