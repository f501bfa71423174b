// The HTTP values shared by the HTTP/2 client, the HTTP/2 server and the HTTP/1.1 server.

/// One header field; names are kept lowercase, as HTTP/2 requires.
public struct HTTPField: Sendable, Hashable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = lowercaseName(name)
        self.value = value
    }
}

/// `name` lowercased; names that already are (every HTTP/2 header, most lookups) are returned as they are,
/// without the allocation `lowercased()` makes on every request.
@inline(__always)
func lowercaseName(_ name: String) -> String {
    name.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) ? name.lowercased() : name
}

/// An ordered list of header fields with case-insensitive lookup.
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [HTTPField] = []

    public init() {}

    public init(_ fields: [HTTPField]) {
        self.fields = fields
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { HTTPField(name: $0.0, value: $0.1) }
    }

    /// The first value for `name`, if any.
    public subscript(name: String) -> String? {
        let name = lowercaseName(name)
        return fields.first { $0.name == name }?.value
    }

    /// Every value for `name`, in order.
    public func values(for name: String) -> [String] {
        let name = lowercaseName(name)
        return fields.filter { $0.name == name }.map(\.value)
    }

    /// Appends a field, keeping any with the same name.
    public mutating func add(_ name: String, _ value: String) {
        fields.append(HTTPField(name: name, value: value))
    }

    /// Replaces every field named `name` with one field.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    /// Removes every field named `name`.
    public mutating func remove(_ name: String) {
        let name = lowercaseName(name)
        fields.removeAll { $0.name == name }
    }

    public func makeIterator() -> IndexingIterator<[HTTPField]> {
        fields.makeIterator()
    }
}

/// A whole HTTP request: what a client sends and what a server handler receives.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path with its query, e.g. `/v1/events?limit=10`.
    public var path: String
    /// `:authority` in HTTP/2, `Host` in HTTP/1.1.
    public var authority: String?
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(method: String, path: String, authority: String? = nil, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.authority = authority
        self.headers = headers
        self.body = body
    }
}

/// A whole HTTP response.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}
