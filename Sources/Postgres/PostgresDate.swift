// timestamptz in text form, exact to the microsecond (PostgreSQL's resolution). Dates are written as
// UTC ("2024-05-01 12:30:00.123456+00") and parsed with any offset, so the session time zone only
// changes how the server prints, never the instant. No DateFormatter: it rounds to milliseconds.
import Foundation

extension Date: PostgresCodable {
    public static var postgresType: UInt32 { PostgresOID.timestamptz }
    public var postgresData: PostgresData {
        PostgresData(storage: .timestamp(microseconds: postgresMicroseconds), oid: PostgresOID.timestamptz)
    }

    public init?(postgresText text: String) {
        guard let micros = parseTimestamp(text) else { return nil }
        self.init(postgresMicroseconds: micros)
    }

    /// Microseconds since 1970-01-01 UTC, rounded to the nearest one.
    var postgresMicroseconds: Int64 {
        Int64((timeIntervalSince1970 * 1_000_000).rounded())
    }

    init(postgresMicroseconds micros: Int64) {
        // Seconds and fraction apart, so large values keep their microseconds exact.
        let seconds = micros.quotientRoundingDown(by: 1_000_000)
        let fraction = micros - seconds * 1_000_000
        self.init(timeIntervalSince1970: Double(seconds) + Double(fraction) / 1_000_000)
    }
}

extension Int64 {
    fileprivate func quotientRoundingDown(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor < 0) ? quotient - 1 : quotient
    }
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm, proleptic Gregorian).
private func civilDate(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let day = doy - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
}

/// A civil date to days since 1970-01-01.
private func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
}

/// Writes `YYYY-MM-DD HH:MM:SS.ffffff+00` (UTC) into `buffer`, without allocating.
func appendTimestamp(microseconds micros: Int64, to buffer: inout [UInt8]) {
    let seconds = micros.quotientRoundingDown(by: 1_000_000)
    let fraction = Int(micros - seconds * 1_000_000)
    let days = seconds.quotientRoundingDown(by: 86_400)
    let secondOfDay = Int(seconds - days * 86_400)
    let (year, month, day) = civilDate(days: days)
    // Years outside 0...9999 are rare: no fixed layout for them. (Years before 1 AD would need " BC";
    // Marquee never stores them.)
    guard (0..<10_000).contains(year) else {
        appendDecimal(year, to: &buffer)
        for (separator, value) in [
            ("-", month), ("-", day), (" ", Int64(secondOfDay / 3600)),
            (":", Int64(secondOfDay / 60 % 60)), (":", Int64(secondOfDay % 60)),
        ] {
            buffer.append(contentsOf: separator.utf8)
            if value < 10 { buffer.append(48) }
            appendDecimal(value, to: &buffer)
        }
        buffer.append(UInt8(ascii: "."))
        let digits = String(fraction)
        buffer.append(contentsOf: repeatElement(48, count: 6 - digits.utf8.count))
        buffer.append(contentsOf: digits.utf8)
        buffer.append(contentsOf: "+00".utf8)
        return
    }
    // The common case has a fixed layout of 29 bytes, written in place two digits at a time.
    let start = buffer.count
    buffer.append(contentsOf: "0000-00-00 00:00:00.000000+00".utf8)
    buffer.withUnsafeMutableBufferPointer { bytes in
        func two(_ value: Int, at offset: Int) {
            bytes[start + offset] = UInt8(truncatingIfNeeded: 48 + value / 10)
            bytes[start + offset + 1] = UInt8(truncatingIfNeeded: 48 + value % 10)
        }
        two(Int(year) / 100, at: 0)
        two(Int(year) % 100, at: 2)
        two(Int(month), at: 5)
        two(Int(day), at: 8)
        two(secondOfDay / 3600, at: 11)
        two(secondOfDay / 60 % 60, at: 14)
        two(secondOfDay % 60, at: 17)
        two(fraction / 10_000, at: 20)
        two(fraction / 100 % 100, at: 22)
        two(fraction % 100, at: 24)
    }
}

/// Parses ISO-style output: `YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM[:SS]]]`. A value without an
/// offset (timestamp without time zone) is taken as UTC. Returns microseconds since 1970 UTC.
func parseTimestamp(_ text: String) -> Int64? {
    let bytes = Array(text.utf8)
    var index = 0
    func number(maxDigits: Int = 9) -> Int64? {
        var value: Int64 = 0
        let start = index
        while index < bytes.count, index - start < maxDigits, bytes[index] >= 48, bytes[index] <= 57 {
            value = value * 10 + Int64(bytes[index] - 48)
            index += 1
        }
        return index > start ? value : nil
    }
    func expect(_ char: Character) -> Bool {
        guard index < bytes.count, bytes[index] == char.asciiValue! else { return false }
        index += 1
        return true
    }
    guard let year = number(), expect("-"), let month = number(maxDigits: 2), expect("-"),
        let day = number(maxDigits: 2), expect(" ") || expect("T"),
        let hour = number(maxDigits: 2), expect(":"), let minute = number(maxDigits: 2), expect(":"),
        let second = number(maxDigits: 2),
        (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
    else { return nil }
    var micros: Int64 = 0
    if expect(".") {
        let start = index
        guard let fraction = number(maxDigits: 6) else { return nil }
        micros = fraction
        for _ in 0..<(6 - (index - start)) { micros *= 10 }
    }
    var offsetSeconds: Int64 = 0
    if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
        let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
        index += 1
        guard let hours = number(maxDigits: 2) else { return nil }
        var total = hours * 3600
        if expect(":") {
            guard let minutes = number(maxDigits: 2) else { return nil }
            total += minutes * 60
            if expect(":") {
                guard let seconds = number(maxDigits: 2) else { return nil }
                total += seconds
            }
        }
        offsetSeconds = sign * total
    }
    guard index == bytes.count else { return nil }  // " BC", "infinity" and the like are refused
    let days = daysFromCivil(year: year, month: month, day: day)
    let localSeconds = days * 86_400 + hour * 3600 + minute * 60 + second
    return (localSeconds - offsetSeconds) * 1_000_000 + micros
}
