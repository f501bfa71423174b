/// A JSON object that remembers the order its keys were first inserted in; equality ignores that order.
///
/// Members live in an array; small objects (most payloads) are searched linearly, and a key index is
/// built only once an object grows past `indexThreshold` members. Parsing a 300-byte payload into
/// dictionaries was a quarter of the APNs simulator's time.
public struct JSONObject: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    private var entries: [(key: String, value: JSONValue)] = []
    private var index: [String: Int]?
    private static let indexThreshold = 12

    public init() {}

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        for (key, value) in elements { self[key] = value }
    }

    /// The keys in insertion order.
    public var keys: [String] { entries.map(\.key) }
    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }

    private func position(of key: String) -> Int? {
        if let index { return index[key] }
        return entries.firstIndex { $0.key == key }
    }

    /// Gets a member; setting a new key appends it, setting an existing key keeps its place,
    /// setting nil removes it.
    public subscript(key: String) -> JSONValue? {
        get { position(of: key).map { entries[$0].value } }
        set {
            guard let newValue else {
                removeValue(forKey: key)
                return
            }
            if let position = position(of: key) {
                entries[position].value = newValue
            } else {
                append(key, newValue)
            }
        }
    }

    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard let position = position(of: key) else { return nil }
        let old = entries.remove(at: position).value
        if index != nil { rebuildIndex() }
        return old
    }

    /// Appends a key that must not be present yet; false when it already was (used by the parser).
    mutating func appendNew(_ key: String, _ value: JSONValue) -> Bool {
        guard position(of: key) == nil else { return false }
        append(key, value)
        return true
    }

    private mutating func append(_ key: String, _ value: JSONValue) {
        entries.append((key, value))
        if index != nil {
            index?[key] = entries.count - 1
        } else if entries.count > Self.indexThreshold {
            rebuildIndex()
        }
    }

    private mutating func rebuildIndex() {
        var rebuilt = [String: Int](minimumCapacity: entries.count)
        for (position, entry) in entries.enumerated() { rebuilt[entry.key] = position }
        index = rebuilt
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.count == rhs.count && lhs.entries.allSatisfy { rhs[$0.key] == $0.value }
    }

    public func makeIterator() -> Iterator { Iterator(entries: entries) }

    /// Iterates members in insertion order.
    public struct Iterator: IteratorProtocol {
        let entries: [(key: String, value: JSONValue)]
        var position = 0

        public mutating func next() -> (key: String, value: JSONValue)? {
            guard position < entries.count else { return nil }
            defer { position += 1 }
            return entries[position]
        }
    }
}
