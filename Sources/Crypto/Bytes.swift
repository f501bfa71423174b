// Byte utilities: digests, MACs, randomness, constant-time compare and the text encodings JWTs need.
internal import COpenSSL
import Foundation

/// Calls `body` with the bytes of `bytes`, copying only when the sequence is not contiguous.
func withBytes<Result>(_ bytes: some Sequence<UInt8>, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
    if let result = bytes.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) {
        return result
    }
    return Array(bytes).withUnsafeBytes(body)
}

/// SHA-256 digests.
public enum SHA256 {
    /// The digest fetched from the default provider once. `EVP_sha256()` makes OpenSSL 3 look the digest up
    /// again on every use (a locked search of its provider's algorithms), which costs more than hashing a
    /// short input. A fetched `EVP_MD` is immutable and may be shared by threads.
    nonisolated(unsafe) private static let fetched: OpaquePointer? = EVP_MD_fetch(nil, "SHA2-256", nil)

    /// The 32-byte SHA-256 digest of `bytes`.
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = withBytes(bytes) { input in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, fetched ?? EVP_sha256(), nil)
            }
        }
        // EVP_Digest with a built-in digest fails only when memory is exhausted.
        precondition(ok == 1 && length == 32, "EVP_Digest(SHA-256) failed: \(openSSLErrorText())")
        return digest
    }
}

/// Keyed message authentication codes.
public enum HMAC {
    /// HMAC-SHA256 of `message` under `key` (32 bytes).
    public static func sha256(key: some Sequence<UInt8>, message: some Sequence<UInt8>) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: 32)
        var length = 0
        let result = withBytes(key) { key in
            withBytes(message) { message in
                // A zero-length key is valid HMAC; OpenSSL wants a non-NULL pointer for it.
                let keyPointer = key.baseAddress ?? UnsafeRawPointer(bitPattern: 1)
                return EVP_Q_mac(
                    nil, "HMAC", nil, "SHA256", nil, keyPointer, key.count,
                    message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count,
                    &mac, mac.count, &length)
            }
        }
        precondition(result != nil && length == 32, "EVP_Q_mac(HMAC-SHA256) failed: \(openSSLErrorText())")
        return mac
    }
}

/// Cryptographically secure random bytes from OpenSSL's DRBG.
public enum SecureRandom {
    /// `count` random bytes. A broken system random source stops the process: nothing is safe without it.
    public static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return bytes }
        precondition(RAND_bytes(&bytes, Int32(count)) == 1, "RAND_bytes failed: \(openSSLErrorText())")
        return bytes
    }
}

/// True when `a` and `b` hold the same bytes; the time taken depends only on the lengths, not the contents.
public func constantTimeEquals(_ a: some Sequence<UInt8>, _ b: some Sequence<UInt8>) -> Bool {
    withBytes(a) { a in
        withBytes(b) { b in
            guard a.count == b.count else { return false }
            guard let left = a.baseAddress, let right = b.baseAddress else { return true }
            return CRYPTO_memcmp(left, right, a.count) == 0
        }
    }
}

/// Base64 with the URL-safe alphabet and no padding (RFC 4648 §5), as JWTs use it.
public enum Base64URL {
    /// The unpadded base64url text of `bytes`.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text = Data(bytes).base64EncodedString()
        while text.last == "=" { text.removeLast() }
        return String(text.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }

    /// The bytes of base64url `text` (padding optional); nil when it is not valid base64url.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var standard = ""
        standard.reserveCapacity(text.utf8.count + 2)
        for character in text.unicodeScalars {
            switch character {
            case "-": standard.append("+")
            case "_": standard.append("/")
            case "+", "/": return nil
            default: standard.unicodeScalars.append(character)
            }
        }
        while standard.hasSuffix("=") { standard.removeLast() }
        switch standard.utf8.count % 4 {
        case 1: return nil
        case 2: standard += "=="
        case 3: standard += "="
        default: break
        }
        return Data(base64Encoded: standard).map { [UInt8]($0) }
    }
}

/// Hexadecimal text, lowercase when written.
public enum Hex {
    /// The lowercase hexadecimal text of `bytes`.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of hexadecimal `text` (either case); nil when its length is odd or it has a non-hex character.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
