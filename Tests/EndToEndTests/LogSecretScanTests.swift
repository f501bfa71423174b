import APNs
import Crypto
import Foundation
import MarqueeService
import Testing

/// The scan of serve's output finds each kind of secret, and passes what serve may log in their place.
@Suite struct LogSecretScanTests {
    @Test func eachKindOfSecretIsFound() throws {
        let key = NewAPIKey.generate().text
        let signingKey = try P256.SigningKey.generate()
        let jwt = try ProviderToken(signingKey: APNsSigningKey(keyID: "ABC123DEFG", teamID: "TEAM123456", key: signingKey), issuedAt: Date()).jwt
        let pem = try signingKey.pemRepresentation
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }
        let token = String(repeating: "a1b2c3d4", count: 8)
        let planted: [(String, String)] = [
            (#"{"msg":"request","authorization":"Bearer \#(key)"}"#, "an API key secret"),
            (#"{"msg":"refreshed","token":"\#(jwt)"}"#, "a JWT"),
            (#"{"msg":"key","pem":"\#(pem.replacingOccurrences(of: "\n", with: "\\n"))"}"#, "a private key's PEM armour"),
            (#"{"msg":"key","body":"\#(body[0])"}"#, "a .p8 key's body"),
            (#"{"msg":"key","body":"\#(body[1])"}"#, "base64 as long as a PEM line"),
            (#"{"msg":"sent","token":"\#(token)"}"#, "a whole device token"),
            ("level=info msg=sent token=\(token.uppercased())", "a whole device token"),
        ]
        for (line, kind) in planted {
            #expect(LogSecretScan.findings(in: line).map(\.kind) == [kind], "\(line)")
        }
        let lines = planted.map(\.0).joined(separator: "\n")
        #expect(LogSecretScan.findings(in: "{}\n" + lines).map(\.line) == Array(2...planted.count + 1))
        #expect(LogSecretScan.findings(in: lines).allSatisfy { !$0.description.contains(key) && !$0.description.contains(jwt) })
    }

    @Test func whatServeLogsInTheirPlaceIsNotFound() {
        let key = NewAPIKey.generate()
        let lines = [
            #"{"msg":"listening","port":8080}"#,
            #"{"msg":"request","key":"mq_\#(key.id)","authorization":"<redacted>"}"#,
            #"{"msg":"sent","token":"a1b2c3d4…","request_id":"\#(UUID().uuidString)","channel":"dHJhbnNpZW50Y2hhbm5lbA=="}"#,
            #"{"msg":"refreshed provider token","key":"TEAM123456/ABC123DEFG","jwt":"<redacted>"}"#,
        ]
        #expect(LogSecretScan.findings(in: lines.joined(separator: "\n")).isEmpty)
    }
}
