import Foundation

@testable import MarqueeCore

// The app side, declared exactly as an iOS app would (ActivityKit's `ActivityAttributes` is a Codable
// protocol; it does not exist on Linux, so these are plain Codable structs).

struct MatchAttributes: Codable, Hashable {
    var homeTeam: String
    var awayTeam: String
    var competition: String
    var kickoff: Date

    struct ContentState: Codable, Hashable {
        var homeScore: Int
        var awayScore: Int
        var period: Period
        var minute: Int
        var lastScorer: String?
        var kickoff: Date
        var halfWindow: ClosedRange<Date>?
        var goals: [Goal]
    }

    enum Period: String, Codable, Hashable {
        case scheduled, firstHalf, halfTime, secondHalf, extraTime, penalties, fullTime
    }

    struct Goal: Codable, Hashable {
        var scorer: String
        var minute: Int
        var side: Side
    }

    enum Side: String, Codable, Hashable { case home, away }
}

struct FlightAttributes: Codable, Hashable {
    var flightNumber: String
    var origin: String
    var destination: String

    struct ContentState: Codable, Hashable {
        var gate: String
        var status: Status
        var boarding: ClosedRange<Date>
        var delayMinutes: Int?
        var departure: Date
    }

    enum Status: String, Codable, Hashable {
        case scheduled, boarding, departed, delayed, cancelled, landed
    }
}

enum Fixtures {
    static let matchSchema = #"""
        {
          "name": "MatchAttributes",
          "attributes": {
            "homeTeam": "string",
            "awayTeam": "string",
            "competition": "string",
            "kickoff": "date"
          },
          "contentState": {
            "homeScore": { "type": "int", "significant": true },
            "awayScore": { "type": "int", "significant": true },
            "period": {
              "type": "enum",
              "values": ["scheduled", "firstHalf", "halfTime", "secondHalf", "extraTime", "penalties", "fullTime"],
              "significant": true
            },
            "minute": "int",
            "lastScorer": "string?",
            "kickoff": "date",
            "halfWindow": "dateRange?",
            "goals": {
              "type": "array",
              "items": {
                "type": "object",
                "fields": {
                  "scorer": "string",
                  "minute": "int",
                  "side": { "type": "enum", "values": ["home", "away"] }
                }
              }
            }
          }
        }
        """#

    static let flightSchema = #"""
        {
          "name": "FlightAttributes",
          "attributes": {
            "flightNumber": "string",
            "origin": "string",
            "destination": "string"
          },
          "contentState": {
            "gate": { "type": "string", "significant": true },
            "status": {
              "type": "enum",
              "values": ["scheduled", "boarding", "departed", "delayed", "cancelled", "landed"],
              "significant": true
            },
            "boarding": "dateRange",
            "delayMinutes": "int?",
            "departure": "date"
          }
        }
        """#

    static var match: ActivityType { try! ActivityType(jsonText: matchSchema) }
    static var flight: ActivityType { try! ActivityType(jsonText: flightSchema) }

    static func json(_ text: String) -> JSONValue { try! JSONValue(parsing: text) }
}

/// Unix milliseconds of a date, the precision Marquee promises.
func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

/// An independent oracle for ISO 8601 text: Foundation's formatter.
func isoDate(_ text: String) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = text.contains(".") ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
    return formatter.date(from: text)!
}
