import Foundation

extension Date {
    /// Parses ISO 8601 / RFC 3339 text with an offset (`2026-11-29T18:30:00Z`, fraction optional) to the
    /// millisecond, as content-state dates are read; nil when malformed or outside 1970...2199.
    public init?(iso8601 text: String) {
        guard let milliseconds = ActivityDate.parseISO8601(text) else { return nil }
        self.init(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}
