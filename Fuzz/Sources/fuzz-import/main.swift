// `marquee installation import`'s reader on a whole file, line by line, as CSV and as JSON Lines: each line is
// nothing, a row or a problem of that line, never a trap, and a row's fields hold the registration's rules.
import Foundation
import FuzzSupport
import MarqueeService
import MarqueeStore

fuzz { input in
    let bytes = input.bytes
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    for format in InstallationImportFormat.allCases {
        var parser = InstallationImportParser(format: format, now: now)
        for (index, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            switch parser.parse(line, line: index + 1) {
            case .success(let row)?:
                check(row.line == index + 1, "a row of line \(index + 1) says line \(row.line)")
                check(!row.installationID.isEmpty, "a row without an installation id")
                check(row.registeredAt.timeIntervalSince(now) <= InstallationImportParser.clockSkew, "a registeredAt in the future")
                if let token = row.pushToStartToken {
                    check(token == token.lowercased() && token.allSatisfy(\.isHexDigit), "a token not in lower-case hex: \(token)")
                }
            case .failure(let problem)?:
                check(problem.line == index + 1, "a problem of line \(index + 1) says line \(problem.line)")
                check(!problem.message.isEmpty, "a problem without a message")
            case nil:
                break
            }
        }
    }
}
