// The simulator reads a handful of APNs headers from every request and notes a repeated one. Looking each up
// in HTTPHeaders scans the fields again every time; this reads them all, and notes a repetition, in one pass.
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
    /// The first `apns-*` or `authorization` field name that appears more than once.
    var repeatedField: String?

    init(_ headers: HTTPHeaders) {
        let fields = headers.fields
        for index in fields.indices {
            let name = fields[index].name
            // Every name looked for starts with "a" (names are lowercase).
            guard name.utf8.first == UInt8(ascii: "a") else { continue }
            let value = fields[index].value
            switch name {
            case SimulatorHeader.authorization: Self.keep(value, name, in: &authorization, &repeatedField)
            case SimulatorHeader.id: Self.keep(value, name, in: &id, &repeatedField)
            case SimulatorHeader.requestID: Self.keep(value, name, in: &requestID, &repeatedField)
            case SimulatorHeader.topic: Self.keep(value, name, in: &topic, &repeatedField)
            case SimulatorHeader.pushType: Self.keep(value, name, in: &pushType, &repeatedField)
            case SimulatorHeader.priority: Self.keep(value, name, in: &priority, &repeatedField)
            case SimulatorHeader.expiration: Self.keep(value, name, in: &expiration, &repeatedField)
            case SimulatorHeader.collapseID: Self.keep(value, name, in: &collapseID, &repeatedField)
            case SimulatorHeader.channelID: Self.keep(value, name, in: &channelID, &repeatedField)
            default:
                if repeatedField == nil, name.hasPrefix("apns-"), fields[(index + 1)...].contains(where: { $0.name == name }) {
                    repeatedField = name
                }
            }
        }
    }

    private static func keep(_ value: String, _ name: String, in slot: inout String?, _ repeated: inout String?) {
        if slot == nil { slot = value } else if repeated == nil { repeated = name }
    }

    /// `apns-id` or `apns-request-id`, whichever `name` is.
    func value(of name: String) -> String? { name == SimulatorHeader.id ? id : requestID }
}
