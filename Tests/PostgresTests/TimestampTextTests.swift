import Foundation
import Testing

@testable import Postgres

/// timestamptz text without a server: formatting and parsing agree to the microsecond.
struct TimestampTextTests {
    static func text(_ micros: Int64) -> String {
        var buffer: [UInt8] = []
        appendTimestamp(microseconds: micros, to: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    @Test func formatsFixedLayoutInUTC() {
        #expect(Self.text(0) == "1970-01-01 00:00:00.000000+00")
        #expect(Self.text(-1) == "1969-12-31 23:59:59.999999+00")
        #expect(Self.text(1_709_251_199_999_999) == "2024-02-29 23:59:59.999999+00")
        #expect(Self.text(-62_135_596_800_000_000) == "0001-01-01 00:00:00.000000+00")
        #expect(Self.text(253_402_300_800_000_001) == "10000-01-01 00:00:00.000001+00")
    }

    @Test func parsesWhatItFormatsAndOtherOffsets() {
        for micros: Int64 in [0, -1, 1, 1_709_251_199_999_999, -62_135_596_800_000_000, 253_402_300_800_000_001, 1_700_000_000_123_456] {
            #expect(parseTimestamp(Self.text(micros)) == micros)
        }
        #expect(parseTimestamp("2024-03-01 05:29:59.999999+05:30") == 1_709_251_199_999_999)
        #expect(parseTimestamp("2024-02-29 18:29:59.9999-05:30") == 1_709_251_199_999_900)
        #expect(parseTimestamp("2024-02-29 23:59:59") == 1_709_251_199_000_000)
        #expect(parseTimestamp("1900-01-01 00:00:00+00:09:21") == -2_208_988_800_000_000 - 561_000_000)
        #expect(parseTimestamp("infinity") == nil)
        #expect(parseTimestamp("0044-03-15 12:00:00+00 BC") == nil)
        #expect(parseTimestamp("2024-13-01 00:00:00+00") == nil)
    }

    @Test func datesRoundTripThroughMicroseconds() {
        let date = Date(timeIntervalSince1970: 1_717_171_717.123456)
        #expect(Date(postgresMicroseconds: date.postgresMicroseconds).postgresMicroseconds == 1_717_171_717_123_456)
        #expect(Date(postgresText: Self.text(-1))?.postgresMicroseconds == -1)
    }
}
