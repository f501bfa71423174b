import MarqueeService
import Testing

@Suite struct APIKeyTests {
    @Test func aGeneratedKeyMatchesItsStoredHashAndNoOther() throws {
        let key = NewAPIKey.generate()
        let other = NewAPIKey.generate()
        #expect(key.text.hasPrefix("mq_\(key.id)_"))
        let presented = try #require(APIKeyText(key.text))
        #expect(presented.id == key.id)
        #expect(presented.matches(salt: key.salt, hash: key.hash))
        #expect(!presented.matches(salt: other.salt, hash: other.hash))
        #expect(!presented.matches(salt: key.salt, hash: other.hash))
        #expect(key.id != other.id)
    }

    @Test func aTamperedSecretDoesNotMatch() throws {
        let key = NewAPIKey.generate()
        var text = Array(key.text)
        text[text.count - 1] = text[text.count - 1] == "A" ? "B" : "A"
        let tampered = try #require(APIKeyText(String(text)))
        #expect(!tampered.matches(salt: key.salt, hash: key.hash))
    }

    @Test func malformedKeysAreRefused() {
        let key = NewAPIKey.generate()
        let text = key.text
        let head = String(text.prefix(15))
        let secret = String(text.dropFirst(16))
        let short = String(text.dropLast())
        let malformed: [String] = [
            "", "mq_", "mq_abc_def", "xx" + text.dropFirst(2), text + "x", short, "mq_zzzzzzzzzzzz" + text.dropFirst(15),
            short + "=", short + "+", "mq-" + text.dropFirst(3), head + "-" + secret,
        ]
        for text in malformed {
            #expect(APIKeyText(text) == nil, "\(text)")
        }
    }

    @Test func bearerHeadersAreParsedCaseInsensitively() {
        let key = NewAPIKey.generate()
        #expect(APIKeyText(authorization: "Bearer \(key.text)")?.id == key.id)
        #expect(APIKeyText(authorization: "bearer \(key.text)")?.id == key.id)
        #expect(APIKeyText(authorization: "BEARER   \(key.text)")?.id == key.id)
        #expect(APIKeyText(authorization: "Bearer ") == nil)
        #expect(APIKeyText(authorization: "Basic \(key.text)") == nil)
        #expect(APIKeyText(authorization: key.text) == nil)
    }

    @Test func adminPermitsEveryScopeAndOthersOnlyTheirOwn() {
        for required in APIScope.allCases {
            #expect(APIScope.admin.permits(required))
        }
        #expect(APIScope.ingest.permits(.ingest))
        #expect(!APIScope.ingest.permits(.tokens))
        #expect(!APIScope.ingest.permits(.admin))
        #expect(!APIScope.tokens.permits(.ingest))
        #expect(!APIScope.tokens.permits(.admin))
    }
}
