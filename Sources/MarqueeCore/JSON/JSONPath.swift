import Foundation

/// Where a value sits inside a JSON document, for error messages: `contentState.homeScore`, `players[2].name`.
public struct JSONPath: Sendable, Hashable, ExpressibleByArrayLiteral, CustomStringConvertible {
    /// One step: an object key or an array index.
    public enum Component: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
        case key(String)
        case index(Int)

        public init(stringLiteral value: String) { self = .key(value) }
        public init(integerLiteral value: Int) { self = .index(value) }
    }

    public var components: [Component]

    public init(_ components: [Component] = []) { self.components = components }
    public init(arrayLiteral elements: Component...) { self.components = elements }

    public static let root = JSONPath()

    public var isRoot: Bool { components.isEmpty }

    public func appending(_ component: Component) -> JSONPath { JSONPath(components + [component]) }
    public func appending(key: String) -> JSONPath { appending(.key(key)) }
    public func appending(index: Int) -> JSONPath { appending(.index(index)) }

    /// Dotted form: `contentState.homeScore`, `events[0].minute`, `["odd key"]`; the root is `(root)`.
    public var description: String {
        guard !components.isEmpty else { return "(root)" }
        var text = ""
        for component in components {
            switch component {
            case .index(let index):
                text += "[\(index)]"
            case .key(let key) where Self.isPlain(key):
                text += text.isEmpty ? key : "." + key
            case .key(let key):
                text += "[" + JSONValue.string(key).jsonString + "]"
            }
        }
        return text
    }

    /// RFC 6901 JSON Pointer: `/contentState/homeScore`; the root is the empty string.
    public var pointer: String {
        components.map { component in
            switch component {
            case .index(let index): "/\(index)"
            case .key(let key): "/" + key.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
            }
        }.joined()
    }

    private static func isPlain(_ key: String) -> Bool {
        guard let first = key.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return key.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default:
                false
            }
        }
    }
}
