// The simulator's control routes: what a test, a demo or a script asks of the simulator itself, which Apple's hosts
// do not have. They live on a port of their own (plain HTTP/1.1 on the simulator's address), so the push and
// management ports answer exactly what Apple's hosts answer: 404 `BadPath` to any path Apple does not document.
//   GET    /status                    answers by status, accepted requests by kind, live channels
//   POST   /rejections                {"api": "broadcast", "reason": "Service Unavailable"}: the next request of that API
//                                     (channelManagement, broadcast, devicePush) is answered with that reason, as
//                                     Apple spells it for that API
//   POST   /invalid-tokens/<hex>      pushes to the device token are answered 410 Unregistered from now on
//   DELETE /records                   forgets the accepted requests (channels stay)
//   POST   /devices                   {"devices": [{"pushToStartToken", "osVersion", "installationId"}]} (or one device):
//                                     adds simulated devices; a known token takes the new version (an OS upgrade)
//   GET    /devices                   every device: totals, and per device and event the activities, duplicates,
//                                     newest state and pushes received after an end
//   GET    /devices/<id>              one device (by push-to-start token or installation id) with its activities
//   DELETE /devices                   forgets every device
import Foundation
import MarqueeCore
import Network

/// Answers the control routes for one engine; `SimulatorControlServer` puts it on a port.
public struct SimulatorControlRoutes: Sendable {
    public let engine: SimulatorEngine

    public init(engine: SimulatorEngine) { self.engine = engine }

    /// The answer to one control request.
    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        switch (request.method, path) {
        case ("GET", "/status"):
            return Self.json(200, status)
        case ("POST", "/rejections"):
            return scriptRejection(request.body)
        case ("DELETE", "/rejections"):
            let query = request.path.split(separator: "?", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
            let named = query.split(separator: "&").compactMap { $0.hasPrefix("api=") ? String($0.dropFirst(4)) : nil }.first
            guard let apis = named.map({ SimulatorAPI(rawValue: $0).map { [$0] } }) ?? SimulatorAPI.allCases else {
                return Self.error(400, "unknown api \(named ?? ""): channelManagement, broadcast or devicePush")
            }
            for api in apis { engine.stopRejecting(on: api) }
            return HTTPResponse(status: 204)
        case ("POST", "/devices"):
            do {
                let (added, updated) = engine.devices.add(try SimulatedDeviceSpec.parse(request.body))
                return Self.json(200, ["added": .int(Int64(added)), "updated": .int(Int64(updated))])
            } catch {
                return Self.error(400, error.description)
            }
        case ("GET", "/devices"):
            return Self.json(200, engine.devices.report(at: engine.clock.now))
        case ("DELETE", "/devices"):
            engine.devices.removeAll()
            return HTTPResponse(status: 204)
        case ("GET", _) where path.hasPrefix("/devices/"):
            let id = String(path.dropFirst("/devices/".count)).removingPercentEncoding ?? ""
            guard let device = engine.devices.device(id, at: engine.clock.now) else {
                return Self.error(404, "no device with push-to-start token or installation id \(id)")
            }
            return Self.json(200, device.reportJSON(eventKeys: engine.devices.eventKeys))
        case ("DELETE", "/records"):
            engine.clearRecords()
            return HTTPResponse(status: 204)
        case ("POST", _) where path.hasPrefix("/invalid-tokens/"):
            let token = String(path.dropFirst("/invalid-tokens/".count))
            guard !token.isEmpty, token.utf8.count % 2 == 0, token.utf8.allSatisfy(SimulatorIdentifiers.isHexDigit) else {
                return Self.error(400, "expected /invalid-tokens/<hexadecimal device token>")
            }
            engine.markDeviceTokenInvalid(token)
            return HTTPResponse(status: 204)
        case (_, "/status"), (_, "/rejections"), (_, "/records"), (_, "/devices"):
            return Self.error(405, "\(request.method) is not allowed on \(path)")
        default:
            return Self.error(
                404,
                "no control route \(path): GET /status, POST|DELETE /rejections, POST /invalid-tokens/<hex>, DELETE /records, "
                    + "POST|GET|DELETE /devices, GET /devices/<id>")
        }
    }

    private var status: JSONValue {
        var statuses = JSONObject()
        for (status, count) in engine.statusCounts.sorted(by: { $0.key < $1.key }) { statuses[String(status)] = .int(Int64(count)) }
        var broadcasts = 0
        var devicePushes = 0
        var channelOperations = 0
        for record in engine.received {
            switch record {
            case .broadcast: broadcasts += 1
            case .devicePush: devicePushes += 1
            case .channel: channelOperations += 1
            }
        }
        return .object([
            "statuses": .object(statuses),
            "accepted": .object([
                "broadcasts": .int(Int64(broadcasts)), "devicePushes": .int(Int64(devicePushes)),
                "channelOperations": .int(Int64(channelOperations)),
            ]),
            "channels": .int(Int64(engine.channels().count)),
            "droppedAnswers": .int(Int64(engine.droppedAnswers)),
            "inFlight": .int(Int64(engine.inFlight)),
            "inFlightAtDisconnect": .int(Int64(engine.inFlightAtDisconnect)),
        ])
    }

    private func scriptRejection(_ body: [UInt8]) -> HTTPResponse {
        guard let object = (try? JSONValue(parsing: body))?.objectValue,
            let apiName = object["api"]?.stringValue, let text = object["reason"]?.stringValue
        else {
            return Self.error(
                400, #"expected {"api": "channelManagement" | "broadcast" | "devicePush", "reason": "<Apple's reason>", "every": false}"#)
        }
        guard let api = SimulatorAPI(rawValue: apiName) else {
            return Self.error(400, "unknown api \(apiName): channelManagement, broadcast or devicePush")
        }
        guard let reason = api.documentedReasons.first(where: { api.answer(for: $0)?.text == text }) else {
            let texts = api.documentedReasons.compactMap { api.answer(for: $0)?.text }
            return Self.error(400, "\(text) is not a reason Apple documents for \(apiName): \(texts.joined(separator: ", "))")
        }
        if object["every"]?.boolValue == true {
            engine.rejectEvery(reason, on: api)
        } else {
            engine.rejectNext(reason, on: api)
        }
        return HTTPResponse(status: 204)
    }

    private static func json(_ status: Int, _ value: JSONValue) -> HTTPResponse {
        HTTPResponse(status: status, headers: [SimulatorHeader.contentType: "application/json"], body: value.jsonBytes)
    }

    private static func error(_ status: Int, _ message: String) -> HTTPResponse {
        json(status, .object(["error": .string(message)]))
    }
}

/// Serves `SimulatorControlRoutes` over HTTP/1.1.
struct SimulatorControlHandler: HTTP1RequestHandler {
    let routes: SimulatorControlRoutes

    func handle(_ request: HTTPRequest, context: HTTP1RequestContext) async -> HTTPResponse {
        routes.handle(request)
    }
}
