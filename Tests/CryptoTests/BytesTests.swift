import Crypto
import Foundation
import Testing

@Suite struct BytesTests {
    func hex(_ text: String) -> [UInt8] { Hex.decode(text)! }

    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
    ])
    func sha256KnownAnswers(input: String, digest: String) {
        #expect(Hex.encode(SHA256.hash(Array(input.utf8))) == digest)
        #expect(Hex.encode(SHA256.hash(input.utf8)) == digest)
    }

    @Test func sha256OfAMillionAs() {
        #expect(
            Hex.encode(SHA256.hash(repeatElement(UInt8(ascii: "a"), count: 1_000_000)))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// RFC 4231 test cases 1-4, 6, 7 (case 5 is truncated output, checked by prefix).
    @Test func hmacSHA256RFC4231() {
        let aa131 = [UInt8](repeating: 0xaa, count: 131)
        let cases: [(key: [UInt8], data: [UInt8], mac: String)] = [
            (
                [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
            ),
            (
                Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
            ),
            (
                [UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50),
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
            ),
            (
                Array(1...25), [UInt8](repeating: 0xcd, count: 50),
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"
            ),
            (
                aa131, Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
            ),
            (
                aa131,
                Array(
                    ("This is a test using a larger than block-size key and a larger than block-size data. "
                        + "The key needs to be hashed before being used by the HMAC algorithm.").utf8),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
            ),
        ]
        for testCase in cases {
            #expect(Hex.encode(HMAC.sha256(key: testCase.key, message: testCase.data)) == testCase.mac)
        }
        let truncated = HMAC.sha256(key: [UInt8](repeating: 0x0c, count: 20), message: Array("Test With Truncation".utf8))
        #expect(Hex.encode(truncated.prefix(16)) == "a3b6167473100ee06e0c796c2955552b")
        #expect(HMAC.sha256(key: [UInt8](), message: [UInt8]()).count == 32)
    }

    @Test func secureRandomBytes() {
        #expect(SecureRandom.bytes(0).isEmpty)
        let a = SecureRandom.bytes(32)
        let b = SecureRandom.bytes(32)
        #expect(a.count == 32)
        #expect(a != b)
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(constantTimeEquals([UInt8](), [UInt8]()))
        #expect(constantTimeEquals("secret".utf8, Array("secret".utf8)))
        #expect(!constantTimeEquals("secret".utf8, "Secret".utf8))
    }

    @Test func base64URL() {
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(
            Base64URL.encode(Array(#"{"alg":"ES256","kid":"ABC1234567"}"#.utf8))
                == "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.decode("-_8=") == [0xfb, 0xff])
        #expect(Base64URL.decode("") == [])
        for count in 0...40 {
            let bytes = SecureRandom.bytes(count)
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
        for invalid in ["a", "+_8", "/w", "ab$c", "ab c", "abcde"] {
            #expect(Base64URL.decode(invalid) == nil, "\(invalid)")
        }
    }

    @Test func hex() {
        #expect(Hex.encode([0x00, 0xab, 0x10, 0xff]) == "00ab10ff")
        #expect(Hex.decode("00AB10ff") == [0x00, 0xab, 0x10, 0xff])
        #expect(Hex.decode("") == [])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
    }
}
