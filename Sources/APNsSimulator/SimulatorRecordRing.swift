// The accepted requests the simulator keeps for tests. Kept as values, each record held the request's header
// strings, body and ids until a thousand requests later, and freeing those objects from cold memory cost the
// simulator under load about a tenth of its time. Here each record's strings and payload are copied into a byte
// buffer of a fixed ring of slots; a slot's buffer is reused when the ring comes round, so keeping a record
// allocates and frees nothing once the ring is full, and the request's own memory is freed as soon as it is answered.
// Records are rebuilt as values when read, which only tests do.
import Foundation
import Network

/// The last `limit` accepted requests, oldest first when read.
struct SimulatorRecordRing {
    let limit: Int
    private var slots: [Slot] = []
    /// Once the ring is full: the oldest slot, overwritten next.
    private var next = 0

    init(limit: Int) { self.limit = limit }

    mutating func append(_ record: SimulatorRecord) {
        guard limit > 0 else { return }
        if slots.count < limit {
            slots.append(Slot(record))
        } else {
            slots[next].overwrite(with: record)
            next = (next + 1) % limit
        }
    }

    mutating func removeAll() {
        slots.removeAll()
        next = 0
    }

    /// The records, oldest first.
    var records: [SimulatorRecord] { (slots[next...] + slots[..<next]).map(\.record) }
}

/// One kept record: its numbers, and its strings and payload in a buffer that is reused for the next record.
private struct Slot {
    private var entry: Entry
    /// Length-prefixed strings (which ones `Entry` says), header names and values, then the payload.
    private var bytes: [UInt8]
    private var payloadStart: Int

    private enum Entry {
        /// Strings: device token, topic, collapse id (when `hasCollapseID`), apns-id.
        case devicePush(priority: Int, expiration: Int?, hasCollapseID: Bool, receivedAt: Date)
        /// Strings: bundle id, channel id, request id, unique id.
        case broadcast(priority: Int, expiration: Int, receivedAt: Date)
        /// Rare: kept as it is.
        case channel(ChannelOperation)
    }

    init(_ record: SimulatorRecord) {
        var bytes: [UInt8] = []
        var payloadStart = 0
        entry = Self.encode(record, into: &bytes, payloadStart: &payloadStart)
        self.bytes = bytes
        self.payloadStart = payloadStart
    }

    mutating func overwrite(with record: SimulatorRecord) {
        bytes.removeAll(keepingCapacity: true)
        entry = Self.encode(record, into: &bytes, payloadStart: &payloadStart)
    }

    private static func encode(_ record: SimulatorRecord, into bytes: inout [UInt8], payloadStart: inout Int) -> Entry {
        payloadStart = 0
        switch record {
        case .devicePush(let push):
            append(push.deviceToken, to: &bytes)
            append(push.topic, to: &bytes)
            if let collapseID = push.collapseID { append(collapseID, to: &bytes) }
            append(push.apnsID, to: &bytes)
            payloadStart = encode(push.requestHeaders, push.payload, into: &bytes)
            return .devicePush(
                priority: push.priority, expiration: push.expiration, hasCollapseID: push.collapseID != nil,
                receivedAt: push.receivedAt)
        case .broadcast(let broadcast):
            append(broadcast.bundleID, to: &bytes)
            append(broadcast.channelID, to: &bytes)
            append(broadcast.requestID, to: &bytes)
            append(broadcast.uniqueID, to: &bytes)
            payloadStart = encode(broadcast.requestHeaders, broadcast.payload, into: &bytes)
            return .broadcast(priority: broadcast.priority, expiration: broadcast.expiration, receivedAt: broadcast.receivedAt)
        case .channel(let operation):
            return .channel(operation)
        }
    }

    /// The headers without `authorization`, then the payload; returns where the payload starts.
    private static func encode(_ headers: HTTPHeaders, _ payload: [UInt8], into bytes: inout [UInt8]) -> Int {
        for field in headers.fields where field.name != SimulatorHeader.authorization {
            append(field.name, to: &bytes)
            append(field.value, to: &bytes)
        }
        let payloadStart = bytes.count
        bytes.append(contentsOf: payload)
        return payloadStart
    }

    private static func append(_ text: String, to bytes: inout [UInt8]) {
        let count = text.utf8.count
        for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: count >> shift)) }
        // Through the string's storage: a copy, where appending its UTF8View goes byte by byte.
        if text.utf8.withContiguousStorageIfAvailable({ bytes.append(contentsOf: $0) }) == nil { bytes.append(contentsOf: text.utf8) }
    }

    var record: SimulatorRecord {
        var offset = 0
        func string() -> String {
            let count = (0..<4).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
            defer { offset += 4 + count }
            return String(decoding: bytes[(offset + 4)..<(offset + 4 + count)], as: UTF8.self)
        }
        func headers() -> HTTPHeaders {
            var fields: [HTTPField] = []
            while offset < payloadStart {
                let name = string()
                fields.append(HTTPField(name: name, value: string()))
            }
            return HTTPHeaders(fields)
        }
        let payload = Array(bytes[payloadStart...])
        switch entry {
        case .devicePush(let priority, let expiration, let hasCollapseID, let receivedAt):
            let deviceToken = string()
            let topic = string()
            let collapseID = hasCollapseID ? string() : nil
            let apnsID = string()
            return .devicePush(
                ReceivedDevicePush(
                    deviceToken: deviceToken, topic: topic, priority: priority, expiration: expiration, collapseID: collapseID,
                    requestHeaders: headers(), payload: payload, apnsID: apnsID, receivedAt: receivedAt))
        case .broadcast(let priority, let expiration, let receivedAt):
            let bundleID = string()
            let channelID = string()
            let requestID = string()
            let uniqueID = string()
            return .broadcast(
                ReceivedBroadcast(
                    bundleID: bundleID, channelID: channelID, priority: priority, expiration: expiration, requestHeaders: headers(),
                    payload: payload, requestID: requestID, uniqueID: uniqueID, receivedAt: receivedAt))
        case .channel(let operation):
            return .channel(operation)
        }
    }
}
