// The simulator reads a handful of APNs headers from every request and refuses a repeated one. Looking each up
// in HTTPHeaders scans the fields again every time; this reads them all, and notes a repetition, in one pass.
import APNs
import Network

/// The APNs headers of one request, each the first field of its name (as `HTTPHeaders`' subscript gives it).
struct SimulatorRequestHeaders {
    var authorization: String?
    var id: String?
    var requestID: String?
    var topic: String?
    var pushType: String?
    var priority: String?
    var expiration: String?
    var collapseID: String?
    var channelID: String?
    /// An `apns-*` or `authorization` field appears more than once (`DuplicateHeaders`).
    var hasRepeatedField = false

    init(_ headers: HTTPHeaders) {
        let fields = headers.fields
        for index in fields.indices {
            let name = fields[index].name
            // Every name looked for starts with "a" (names are lowercase).
            guard name.utf8.first == UInt8(ascii: "a") else { continue }
            let value = fields[index].value
            switch name {
            case APNsHeader.authorization: Self.keep(value, in: &authorization, &hasRepeatedField)
            case APNsHeader.id: Self.keep(value, in: &id, &hasRepeatedField)
            case APNsHeader.requestID: Self.keep(value, in: &requestID, &hasRepeatedField)
            case APNsHeader.topic: Self.keep(value, in: &topic, &hasRepeatedField)
            case APNsHeader.pushType: Self.keep(value, in: &pushType, &hasRepeatedField)
            case APNsHeader.priority: Self.keep(value, in: &priority, &hasRepeatedField)
            case APNsHeader.expiration: Self.keep(value, in: &expiration, &hasRepeatedField)
            case APNsHeader.collapseID: Self.keep(value, in: &collapseID, &hasRepeatedField)
            case APNsHeader.channelID: Self.keep(value, in: &channelID, &hasRepeatedField)
            default:
                if !hasRepeatedField, name.hasPrefix("apns-"), fields[(index + 1)...].contains(where: { $0.name == name }) {
                    hasRepeatedField = true
                }
            }
        }
    }

    private static func keep(_ value: String, in slot: inout String?, _ repeated: inout Bool) {
        if slot == nil { slot = value } else { repeated = true }
    }

    /// `apns-id` or `apns-request-id`, whichever `name` is.
    func value(of name: String) -> String? { name == APNsHeader.id ? id : requestID }
}
