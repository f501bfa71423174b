// A provider token as the simulator reads it, from Apple's "Establishing a token-based connection to APNs"
// (https://developer.apple.com/documentation/usernotifications/establishing-a-token-based-connection-to-apns):
// a JWT whose header is `{"alg": "ES256", "kid": <key id>}` and whose claims are `{"iss": <team id>, "iat": <epoch
// seconds>}`, signed ES256 with the `.p8` key and sent as `authorization: bearer <JWT>`. Read here with
// MarqueeCore's JSON parser and checked with the Crypto module, never with the APNs client's token code.
import Crypto
import Foundation
import MarqueeCore

/// The parts of a provider token the simulator checks; its signature is verified separately (`isSigned(by:)`).
struct SimulatorProviderToken {
    /// The compact JWS `header.claims.signature`.
    var jwt: String
    var keyID: String
    var teamID: String
    /// `iat`, whole seconds since 1970.
    var issuedAt: Date
    private var signingInputEnd: String.Index
    private var signature: [UInt8]

    /// Reads `jwt`; nil when it is not three base64url parts with an ES256 header, a `kid`, an `iss`, a numeric
    /// `iat` and a 64-byte signature (an `InvalidProviderToken`).
    init?(jwt: String) {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = Base64URL.decode(parts[0]), let header = try? JSONValue(parsing: headerBytes),
            let claimsBytes = Base64URL.decode(parts[1]), let claims = try? JSONValue(parsing: claimsBytes),
            header["alg"]?.stringValue == "ES256",
            let keyID = header["kid"]?.stringValue, let teamID = claims["iss"]?.stringValue,
            let iat = claims["iat"].flatMap(Self.seconds),
            let signature = Base64URL.decode(parts[2]), signature.count == P256.rawSignatureByteCount
        else { return nil }
        self.jwt = jwt
        self.keyID = keyID
        self.teamID = teamID
        issuedAt = Date(timeIntervalSince1970: TimeInterval(iat))
        signingInputEnd = parts[1].endIndex
        self.signature = signature
    }

    /// True when the signature verifies under `key`.
    func isSigned(by key: P256.VerifyingKey) -> Bool {
        key.isValidSignature(signature, for: jwt[..<signingInputEnd].utf8)
    }

    /// `iat` as Apple documents it, a number of seconds; a numeric string is read too.
    private static func seconds(_ value: JSONValue) -> Int64? {
        switch value {
        case .int(let seconds): seconds
        case .string(let text): Int64(text)
        default: nil
        }
    }
}
