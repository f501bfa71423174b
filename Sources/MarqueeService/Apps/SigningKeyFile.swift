// An app's APNs signing key (.p8) stays in its file; Marquee stores the path and reads the file when it
// needs the key. These checks run when an app is added: the file exists, holds a P-256 key in PKCS#8 PEM,
// and is not readable by group or others (a warning, since a deployment may manage that otherwise).
// The key's text never leaves this file's functions: errors describe the problem, not the contents.
import Crypto
import Dispatch
import Foundation

/// A signing key file as checked at `app add`.
public struct SigningKeyFile: Sendable {
    /// What is wrong with a key file.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        /// The file does not exist or cannot be read.
        case unreadable(path: String, reason: String)
        /// The file is not a P-256 private key in PKCS#8 PEM (`BEGIN PRIVATE KEY`).
        case invalidKey(path: String)

        public var description: String {
            switch self {
            case .unreadable(let path, let reason): "cannot read the key file \(path): \(reason)"
            case .invalidKey(let path):
                "\(path) is not a P-256 private key in PKCS#8 PEM ('-----BEGIN PRIVATE KEY-----', Apple's .p8 download)"
            }
        }
    }

    /// The absolute path.
    public let path: String
    /// Group or others may read the file (advise `chmod 600`).
    public let isReadableByOthers: Bool

    /// Reads and checks the file (off Swift's cooperative pool).
    public static func check(path: String) async throws(Problem) -> SigningKeyFile {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        let result: Result<SigningKeyFile, Problem> = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: checkBlocking(absolute)) }
        }
        return try result.get()
    }

    private static func checkBlocking(_ path: String) -> Result<SigningKeyFile, Problem> {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            let exists = FileManager.default.fileExists(atPath: path)
            return .failure(.unreadable(path: path, reason: exists ? "permission denied or not UTF-8" : "no such file"))
        }
        guard text.contains("-----BEGIN PRIVATE KEY-----"), (try? P256.SigningKey(pemRepresentation: text)) != nil else {
            return .failure(.invalidKey(path: path))
        }
        let permissions = (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? 0
        return .success(SigningKeyFile(path: path, isReadableByOthers: permissions & 0o044 != 0))
    }
}
