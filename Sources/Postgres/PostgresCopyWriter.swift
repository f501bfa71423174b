// COPY FROM STDIN in text format: columns separated by tabs, rows by newlines, NULL as \N, and
// backslash, tab, newline and carriage return escaped. Rows collect in a large buffer; a full buffer
// goes to the connection's thread while the next one fills, so generating rows and sending them
// overlap, and a million rows cost a few hundred thread hops, not a million.

/// Writes rows for `PostgresConnection.copyFrom`.
public final class PostgresCopyWriter {
    private let connection: PostgresConnection
    @usableFromInline let bufferSize: Int
    @usableFromInline var buffer: [UInt8]
    /// The previous buffer, still being sent; at most one is in flight.
    private var inFlight: Task<Void, Error>?

    init(connection: PostgresConnection, bufferSize: Int) {
        self.connection = connection
        self.bufferSize = max(bufferSize, 4096)
        self.buffer = []
        buffer.reserveCapacity(self.bufferSize + 4096)
    }

    /// Writes one row; the values must match the COPY statement's columns in number and order.
    /// Inlinable, so a caller's loop is specialized for its column types and makes no call per row.
    @inlinable
    nonisolated(nonsending) public func write<each Value: PostgresEncodable>(_ values: repeat each Value) async throws {
        // The buffer is taken out of the object while the row is encoded: one exclusivity check per
        // row instead of one per byte.
        var row = takeBuffer()
        var first = true
        for value in repeat each values {
            if !first { row.append(9) }
            first = false
            Self.append(value.postgresData, to: &row)
        }
        row.append(10)
        buffer = row
        if buffer.count >= bufferSize { try await flush() }
    }

    /// Writes one row of values of any encodable types.
    nonisolated(nonsending) public func write(row values: [any PostgresEncodable]) async throws {
        var row = takeBuffer()
        for (index, value) in values.enumerated() {
            if index > 0 { row.append(9) }
            Self.append(value.postgresData, to: &row)
        }
        row.append(10)
        buffer = row
        if buffer.count >= bufferSize { try await flush() }
    }

    @usableFromInline func takeBuffer() -> [UInt8] {
        var taken: [UInt8] = []
        swap(&taken, &buffer)
        return taken
    }

    /// Hands the buffer to the connection's thread once the previous one has been sent.
    @usableFromInline nonisolated(nonsending) func flush() async throws {
        guard !buffer.isEmpty else { return }
        try await inFlight?.value
        let chunk = buffer
        buffer = []
        buffer.reserveCapacity(bufferSize + 4096)
        let connection = self.connection
        inFlight = Task.detached { try await connection.putCopyData(chunk) }
    }

    /// Sends what is buffered and waits until everything has been handed to libpq.
    nonisolated(nonsending) func finish() async throws {
        try await flush()
        try await drain()
    }

    /// Waits for the buffer in flight, ignoring its outcome (the COPY is being aborted).
    nonisolated(nonsending) func drain() async throws {
        let sending = inFlight
        inFlight = nil
        try await sending?.value
    }

    @usableFromInline static func append(_ data: PostgresData, to buffer: inout [UInt8]) {
        switch data.storage {
        case .null:
            buffer.append(contentsOf: [92, 78])  // \N
        case .text(var text):
            text.withUTF8 { bytes in
                // Most text needs no escaping: copy it whole.
                if !bytes.contains(where: { $0 == 92 || $0 == 9 || $0 == 10 || $0 == 13 }) {
                    buffer.append(contentsOf: bytes)
                    return
                }
                for byte in bytes {
                    switch byte {
                    case 92:
                        buffer.append(92)
                        buffer.append(92)
                    case 9:
                        buffer.append(92)
                        buffer.append(116)
                    case 10:
                        buffer.append(92)
                        buffer.append(110)
                    case 13:
                        buffer.append(92)
                        buffer.append(114)
                    default: buffer.append(byte)
                    }
                }
            }
        case .bytes(let bytes):
            // bytea's text input is \x followed by hex; the backslash itself is escaped for COPY.
            buffer.append(contentsOf: [92, 92, 120])
            let digits: [UInt8] = Array("0123456789abcdef".utf8)
            for byte in bytes {
                buffer.append(digits[Int(byte >> 4)])
                buffer.append(digits[Int(byte & 15)])
            }
        case .integer, .bool, .timestamp:
            data.appendText(to: &buffer)  // never contains a character COPY escapes
        }
    }
}
