// Dates the way an app's plain JSONDecoder reads them, and the forms ingesters may send.
// Swift's default Codable writes `Date` as seconds since 2001-01-01 00:00 UTC (Foundation's reference
// date), not since 1970. Marquee keeps dates to the millisecond: every date is rounded to whole
// milliseconds on input, and written as reference-date seconds with at most three decimals.

import Foundation

/// Millisecond-precision conversions between Unix time, Foundation's reference date and ISO 8601 text.
enum ActivityDate {
    /// Seconds from 1970-01-01 to 2001-01-01.
    static let referenceOffset: Int64 = 978_307_200
    /// Accepted dates: 1970-01-01 up to (not including) 2200-01-01, in Unix milliseconds.
    /// The upper bound catches milliseconds sent where seconds were meant.
    static let acceptedRange: Range<Int64> = 0..<7_258_118_400_000

    /// Unix milliseconds from a number of seconds since `epoch`, if finite and in range.
    static func milliseconds(fromSeconds seconds: Double, since epoch: DateNumbers) -> Int64? {
        let unixSeconds = epoch == .unixEpoch ? seconds : seconds + Double(referenceOffset)
        let milliseconds = (unixSeconds * 1000).rounded()
        guard milliseconds.isFinite, Double(acceptedRange.lowerBound) <= milliseconds,
            milliseconds < Double(acceptedRange.upperBound)
        else { return nil }
        return Int64(milliseconds)
    }

    /// The app form: seconds since 2001-01-01 as a double.
    static func referenceSeconds(fromMilliseconds milliseconds: Int64) -> Double {
        Double(milliseconds - referenceOffset * 1000) / 1000
    }

    static func milliseconds(of date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    // MARK: ISO 8601 / RFC 3339

    /// Parses `2026-11-29T18:30:00Z`, `2026-11-29T18:30:00.250+01:00` (fraction optional, offset
    /// required, `T`, `t` or a space between date and time) into Unix milliseconds.
    static func parseISO8601(_ text: String) -> Int64? {
        var scanner = DigitScanner(bytes: Array(text.utf8))
        guard let year = scanner.number(digits: 4), scanner.skip("-"),
            let month = scanner.number(digits: 2), scanner.skip("-"),
            let day = scanner.number(digits: 2),
            scanner.skip("T") || scanner.skip("t") || scanner.skip(" "),
            let hour = scanner.number(digits: 2), scanner.skip(":"),
            let minute = scanner.number(digits: 2), scanner.skip(":"),
            let second = scanner.number(digits: 2)
        else { return nil }
        var milliseconds: Int64 = 0
        if scanner.skip(".") {
            var scale: Int64 = 100
            var digits = 0
            var roundUp = false
            while let digit = scanner.number(digits: 1) {
                if digits < 3 {
                    milliseconds += Int64(digit) * scale
                    scale /= 10
                } else if digits == 3 {
                    roundUp = digit >= 5
                }
                digits += 1
            }
            guard (1...9).contains(digits) else { return nil }
            if roundUp { milliseconds += 1 }
        }
        let offsetSeconds: Int
        if scanner.skip("Z") || scanner.skip("z") {
            offsetSeconds = 0
        } else {
            let sign: Int
            if scanner.skip("+") { sign = 1 } else if scanner.skip("-") { sign = -1 } else { return nil }
            guard let offsetHour = scanner.number(digits: 2), scanner.skip(":"),
                let offsetMinute = scanner.number(digits: 2), offsetHour < 24, offsetMinute < 60
            else { return nil }
            offsetSeconds = sign * (offsetHour * 3600 + offsetMinute * 60)
        }
        guard scanner.isAtEnd, (1...12).contains(month), (1...daysInMonth(month, year: year)).contains(day),
            hour < 24, minute < 60, second < 60
        else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second - offsetSeconds)
        let result = seconds * 1000 + milliseconds
        return acceptedRange.contains(result) ? result : nil
    }

    /// `2026-11-29T18:30:00.250Z` (always UTC, always three decimals).
    static func formatISO8601(milliseconds: Int64) -> String {
        let seconds = milliseconds.floorDivided(by: 1000)
        let millisecond = Int(milliseconds - seconds * 1000)
        let days = seconds.floorDivided(by: 86_400)
        let secondOfDay = Int(seconds - days * 86_400)
        let (year, month, day) = civilFromDays(Int(days))
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):"
            + "\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(millisecond, 3))Z"
    }

    private static func daysInMonth(_ month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    // Howard Hinnant's days-from-civil algorithms (proleptic Gregorian calendar).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func civilFromDays(_ days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

/// Reads fixed-width decimal fields and separators from ASCII bytes.
private struct DigitScanner {
    let bytes: [UInt8]
    var position = 0

    var isAtEnd: Bool { position == bytes.count }

    mutating func number(digits: Int) -> Int? {
        guard position + digits <= bytes.count else { return nil }
        var value = 0
        for byte in bytes[position..<position + digits] {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        position += digits
        return value
    }

    mutating func skip(_ character: Unicode.Scalar) -> Bool {
        guard position < bytes.count, bytes[position] == UInt8(ascii: character) else { return false }
        position += 1
        return true
    }
}

extension Int64 {
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}
