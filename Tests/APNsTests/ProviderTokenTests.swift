import Crypto
import Foundation
import MarqueeCore
import Testing

@testable import APNs

@Suite struct ProviderTokenTests {
    static func signingKey(keyID: String = "ABC123DEFG", teamID: String = "DEF123GHIJ") throws -> APNsSigningKey {
        try APNsSigningKey(keyID: keyID, teamID: teamID, key: P256.SigningKey.generate())
    }

    func json(_ part: Substring) throws -> String {
        String(decoding: try #require(Base64URL.decode(part)), as: UTF8.self)
    }

    @Test func jwtHasAppleStructureAndVerifiesWithTheCryptoKey() throws {
        let key = try Self.signingKey()
        let token = try ProviderToken(signingKey: key, issuedAt: Date(timeIntervalSince1970: 1_700_000_000.9))
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        #expect(try json(parts[0]) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(try json(parts[1]) == #"{"iss":"DEF123GHIJ","iat":1700000000}"#)
        let signature = try #require(Base64URL.decode(parts[2]))
        #expect(signature.count == 64)
        #expect(!token.jwt.contains("=") && !token.jwt.contains("+") && !token.jwt.contains("/"))

        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        #expect(key.key.publicKey.isValidSignature(signature, for: signingInput))
        #expect(token.hasValidSignature(from: key.key.publicKey))
        #expect(!token.hasValidSignature(from: try P256.SigningKey.generate().publicKey))

        // A token with altered claims keeps the old signature, which must no longer verify.
        let forged = "\(parts[0]).\(Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1800000000}"#.utf8)).\(parts[2])"
        #expect(!(try ProviderToken(parsing: forged)).hasValidSignature(from: key.key.publicKey))

        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(token.authorization == "bearer " + token.jwt)
        let request = try APNsRequest.listChannels(bundleID: "com.example.app")
        #expect(request.headers(authorizedBy: token) == ["authorization": "bearer " + token.jwt])
        #expect(!token.description.contains(token.jwt))
        #expect(!"\(token)".contains(String(parts[2])))
    }

    @Test func parsingReadsWhatSigningWrote() throws {
        let key = try Self.signingKey()
        let token = try ProviderToken(signingKey: key, issuedAt: Date(timeIntervalSince1970: 1_750_000_000))
        let parsed = try ProviderToken(parsing: token.jwt)
        #expect(parsed == token)
        #expect(parsed.keyID == "ABC123DEFG")
        #expect(parsed.teamID == "DEF123GHIJ")
    }

    @Test(arguments: [
        "a.b",
        "a.b.c.d",
        "\(Base64URL.encode(#"{"alg":"HS256","kid":"ABC123DEFG"}"#.utf8)).\(Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1}"#.utf8)).\(Base64URL.encode([UInt8](repeating: 1, count: 64)))",
        "\(Base64URL.encode(#"{"alg":"ES256"}"#.utf8)).\(Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1}"#.utf8)).\(Base64URL.encode([UInt8](repeating: 1, count: 64)))",
        "\(Base64URL.encode(#"{"alg":"ES256","kid":"ABC123DEFG"}"#.utf8)).\(Base64URL.encode(#"{"iss":"DEF123GHIJ"}"#.utf8)).\(Base64URL.encode([UInt8](repeating: 1, count: 64)))",
        "\(Base64URL.encode(#"{"alg":"ES256","kid":"ABC123DEFG"}"#.utf8)).\(Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1}"#.utf8)).\(Base64URL.encode([UInt8](repeating: 1, count: 70)))",
    ])
    func malformedTokensAreRefused(jwt: String) {
        #expect(throws: ProviderTokenError.self) { try ProviderToken(parsing: jwt) }
    }

    @Test(arguments: ["ABC123DEF", "ABC123DEFGH", "ABC123DEF!", "ABC 23DEFG", ""])
    func identifiersMustBeTenLettersOrDigits(id: String) throws {
        let key = try P256.SigningKey.generate()
        #expect(throws: ProviderTokenError.invalidIdentifier(id)) { try APNsSigningKey(keyID: id, teamID: "DEF123GHIJ", key: key) }
        #expect(throws: ProviderTokenError.invalidIdentifier(id)) { try APNsSigningKey(keyID: "ABC123DEFG", teamID: id, key: key) }
    }

    /// Three hours minute by minute, two connections asking before every request: the token they get is
    /// always shared, never older than 60 minutes, and replaced no sooner than 20 minutes after it was issued.
    @Test func refreshScheduleOverSimulatedHours() throws {
        let clock = ManualWallClock()
        let signer = ProviderTokenSigner(clock: clock)
        let key = try Self.signingKey()
        let otherKey = try Self.signingKey(keyID: "ZZZ999YYYY")
        var issued: [ProviderToken] = []
        for _ in 0..<(3 * 60) {
            for _ in 0..<5 {
                let first = try signer.token(for: key)
                let second = try signer.token(for: key)
                #expect(first == second)
                let age = clock.now.timeIntervalSince(first.issuedAt)
                #expect(age >= 0 && age < 60 * 60)
                if issued.last != first { issued.append(first) }
                #expect(try signer.token(for: otherKey).keyID == "ZZZ999YYYY")
            }
            clock.advance(by: 60)
        }
        // 0, 50, 100 and 150 minutes.
        #expect(issued.count == 4)
        #expect(Set(issued.map(\.jwt)).count == issued.count)
        for (earlier, later) in zip(issued, issued.dropFirst()) {
            let interval = later.issuedAt.timeIntervalSince(earlier.issuedAt)
            #expect(interval >= 20 * 60 && interval <= 60 * 60, "refreshed after \(interval) s")
        }
    }

    @Test func concurrentExpiryCausesExactlyOneRefresh() async throws {
        let clock = ManualWallClock()
        let signer = ProviderTokenSigner(clock: clock)
        let key = try Self.signingKey()
        let expired = try signer.token(for: key)
        clock.advance(by: 25 * 60)

        let replacements = try await withThrowingTaskGroup(of: ProviderToken.self) { group in
            for _ in 0..<32 {
                group.addTask { try signer.tokenAfterExpiry(of: expired, for: key) }
            }
            return try await group.reduce(into: [ProviderToken]()) { $0.append($1) }
        }
        #expect(replacements.count == 32)
        let distinct = Set(replacements)
        #expect(distinct.count == 1)
        let fresh = try #require(distinct.first)
        #expect(fresh != expired)
        #expect(fresh.issuedAt == clock.now)
        #expect(try signer.token(for: key) == fresh)
        // A caller that still reports the old token later gets the replacement, not another refresh.
        clock.advance(by: 60)
        #expect(try signer.tokenAfterExpiry(of: expired, for: key) == fresh)
        // A caller whose request failed with the current token does refresh.
        let next = try signer.tokenAfterExpiry(of: fresh, for: key)
        #expect(next != fresh)
        #expect(next.issuedAt == clock.now)
    }

    @Test func refreshAgeIsClampedToWhatAPNsAccepts() {
        #expect(ProviderTokenSigner(refreshAge: 60).refreshAge == 20 * 60)
        #expect(ProviderTokenSigner(refreshAge: 2 * 60 * 60).refreshAge == 55 * 60)
        #expect(ProviderTokenSigner().refreshAge == 50 * 60)
    }
}
