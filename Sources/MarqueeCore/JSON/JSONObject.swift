/// A JSON object that remembers the order its keys were first inserted in; equality ignores that order.
public struct JSONObject: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    /// The keys in insertion order.
    public private(set) var keys: [String] = []
    private var members: [String: JSONValue] = [:]

    public init() {}

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        for (key, value) in elements { self[key] = value }
    }

    public var count: Int { keys.count }
    public var isEmpty: Bool { keys.isEmpty }

    /// Gets a member; setting a new key appends it, setting an existing key keeps its place,
    /// setting nil removes it.
    public subscript(key: String) -> JSONValue? {
        get { members[key] }
        set {
            guard let newValue else {
                removeValue(forKey: key)
                return
            }
            if members.updateValue(newValue, forKey: key) == nil { keys.append(key) }
        }
    }

    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard let old = members.removeValue(forKey: key) else { return nil }
        keys.removeAll { $0 == key }
        return old
    }

    /// Appends a key that must not be present yet; false when it already was (used by the parser).
    mutating func appendNew(_ key: String, _ value: JSONValue) -> Bool {
        guard members.updateValue(value, forKey: key) == nil else { return false }
        keys.append(key)
        return true
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool { lhs.members == rhs.members }

    public func makeIterator() -> Iterator { Iterator(object: self) }

    /// Iterates members in insertion order.
    public struct Iterator: IteratorProtocol {
        let object: JSONObject
        var position = 0

        public mutating func next() -> (key: String, value: JSONValue)? {
            guard position < object.keys.count else { return nil }
            let key = object.keys[position]
            position += 1
            return (key, object.members[key]!)
        }
    }
}
