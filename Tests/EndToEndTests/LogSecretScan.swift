// What `serve` writes must never hold a secret (docs/operations.md: logs never hold a key's secret, a JWT, a private
// key or a whole device token). Every serve process an end-to-end test starts has its output scanned when the test lets
// go of it (MarqueeProcess.start), and a line that holds one fails the test.
import Foundation
import Testing

/// Finds secrets in log text: API key secrets, JWTs, `.p8` private keys and whole device tokens.
enum LogSecretScan {
    /// One line that holds a secret.
    struct Finding: Equatable, CustomStringConvertible {
        let kind: String
        let line: Int
        /// The start of what matched, enough to find it, never the secret itself.
        let excerpt: String
        var description: String { "line \(line): \(kind) (\(excerpt)…)" }
    }

    /// Computed: `Regex` is not `Sendable`, so it cannot be a stored static.
    private static var rules: [(kind: String, pattern: Regex<Substring>)] {
        [
            // `mq_<12 hex id>_<43 base64url secret>`: the id alone may be logged, any part of the secret may not.
            ("an API key secret", /mq_[0-9A-Fa-f]{12}_[A-Za-z0-9_\-]{6,}/),
            // A JWT: three dot-separated base64url parts, the first a JSON object (`{"` is `eyJ`).
            ("a JWT", /eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+/),
            // A PEM armour line of any private key.
            ("a private key's PEM armour", /-----(?:BEGIN|END) [A-Z ]*PRIVATE KEY-----/),
            // The base64 of the DER prefix every P-256 PKCS#8 key (a .p8 from Apple) starts with.
            ("a .p8 key's body", /MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg/),
            // A device token (push, push-to-start or activity): 64 hexadecimal digits or more, whole.
            ("a whole device token", /[0-9A-Fa-f]{64,}/),
            // A line of a PEM body: 64 base64 characters (the last line of the body may be shorter, the first is found above).
            ("base64 as long as a PEM line", /[A-Za-z0-9+\/]{64,}={0,2}/),
        ]
    }

    /// Every line of `text` that holds a secret, at most one finding per line (the first rule that matches).
    /// Records a test issue for each line of `text` that holds a secret.
    @Sendable static func recordFindings(in text: String) {
        for finding in findings(in: text) { Issue.record("serve's output holds a secret: \(finding)") }
    }

    static func findings(in text: String) -> [Finding] {
        var found: [Finding] = []
        for (number, written) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            // JSON may write `/` as `\/`, which would cut a base64 run in two.
            let line = written.replacing("\\/", with: "/")
            for rule in Self.rules {
                if let match = line.firstMatch(of: rule.pattern) {
                    found.append(Finding(kind: rule.kind, line: number + 1, excerpt: String(match.output.prefix(6))))
                    break
                }
            }
        }
        return found
    }
}
