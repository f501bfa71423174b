import APNs
import Foundation
import Testing

@Suite struct APNsRequestTests {
    let bundle = "com.example.scores"
    let channel = try! APNsChannelID("dHN0LXNyY2gtY2hubA==")
    let requestID = try! APNsRequestID("6A9FB03C-1C1E-4D57-B3B4-6C0B5D3F1E2A")
    let requestIDText = "6a9fb03c-1c1e-4d57-b3b4-6c0b5d3f1e2a"

    @Test func createChannel() throws {
        let request = try APNsRequest.createChannel(bundleID: bundle, storagePolicy: .mostRecentMessageStored, requestID: requestID)
        #expect(request.hostKind == .management)
        #expect(request.operation == .createChannel)
        #expect(request.method == .post)
        #expect(request.path == "/1/apps/com.example.scores/channels")
        #expect(request.headers == ["apns-request-id": requestIDText])
        #expect(String(decoding: request.body, as: UTF8.self) == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
        #expect(object.count == 2)
        #expect(object["message-storage-policy"] as? Int == 1)
        #expect(object["push-type"] as? String == "LiveActivity")

        let noStorage = try APNsRequest.createChannel(bundleID: bundle, storagePolicy: .noMessageStored)
        #expect(noStorage.headers.isEmpty)
        #expect(String(decoding: noStorage.body, as: UTF8.self) == #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
    }

    @Test func readAndDeleteCarryTheChannelInAHeaderNeverThePath() throws {
        let read = try APNsRequest.readChannel(bundleID: bundle, channelID: channel, requestID: requestID)
        #expect(read.hostKind == .management)
        #expect(read.method == .get)
        #expect(read.path == "/1/apps/com.example.scores/channels")
        #expect(read.headers == ["apns-channel-id": "dHN0LXNyY2gtY2hubA==", "apns-request-id": requestIDText])
        #expect(read.body.isEmpty)

        let delete = try APNsRequest.deleteChannel(bundleID: bundle, channelID: channel)
        #expect(delete.hostKind == .management)
        #expect(delete.method == .delete)
        #expect(delete.path == "/1/apps/com.example.scores/channels")
        #expect(delete.headers == ["apns-channel-id": "dHN0LXNyY2gtY2hubA=="])
        #expect(delete.body.isEmpty)
        #expect(!delete.path.contains(channel.value) && !read.path.contains(channel.value))
    }

    @Test func listChannels() throws {
        let list = try APNsRequest.listChannels(bundleID: bundle)
        #expect(list.hostKind == .management)
        #expect(list.method == .get)
        #expect(list.path == "/1/apps/com.example.scores/all-channels")
        #expect(list.headers.isEmpty)
        #expect(list.body.isEmpty)
    }

    @Test func broadcast() throws {
        let payload = Array(#"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#.utf8)
        let request = try APNsRequest.broadcast(
            bundleID: bundle, channelID: channel, payload: payload, expiration: 0, priority: .immediate, requestID: requestID)
        #expect(request.hostKind == .push)
        #expect(request.operation == .broadcast)
        #expect(request.method == .post)
        #expect(request.path == "/4/broadcasts/apps/com.example.scores")
        #expect(
            request.headers == [
                "apns-channel-id": "dHN0LXNyY2gtY2hubA==",
                "apns-push-type": "liveactivity",
                "apns-expiration": "0",
                "apns-priority": "10",
                "apns-request-id": requestIDText,
            ])
        #expect(request.body == payload)

        for (priority, text) in [(APNsPriority.powerConsidered, "5"), (.low, "1")] {
            let other = try APNsRequest.broadcast(
                bundleID: bundle, channelID: channel, payload: payload, expiration: 1_800_000_000, priority: priority)
            #expect(other.headers["apns-priority"] == text)
            #expect(other.headers["apns-expiration"] == "1800000000")
            #expect(other.headers["apns-request-id"] == nil)
            #expect(other.headers["apns-topic"] == nil)
        }
    }

    @Test func devicePush() throws {
        let token = try APNsDeviceToken(hex: String(repeating: "AB01", count: 16))
        let payload = Array(#"{"aps":{"timestamp":1,"event":"end"}}"#.utf8)
        let minimal = try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: payload, priority: .powerConsidered)
        #expect(minimal.hostKind == .push)
        #expect(minimal.operation == .devicePush)
        #expect(minimal.method == .post)
        #expect(minimal.path == "/3/device/" + String(repeating: "ab01", count: 16))
        #expect(
            minimal.headers == [
                "apns-topic": "com.example.scores.push-type.liveactivity",
                "apns-push-type": "liveactivity",
                "apns-priority": "5",
            ])
        #expect(minimal.body == payload)
        #expect("\(minimal)" == "POST /3/device/ab01ab01…")

        let full = try APNsRequest.devicePush(
            bundleID: bundle, deviceToken: token, payload: payload, priority: .immediate,
            expiration: 1_800_000_000, apnsID: requestID, collapseID: "score")
        #expect(
            full.headers == [
                "apns-topic": "com.example.scores.push-type.liveactivity",
                "apns-push-type": "liveactivity",
                "apns-priority": "10",
                "apns-expiration": "1800000000",
                "apns-id": requestIDText,
                "apns-collapse-id": "score",
            ])
    }

    @Test func payloadLimitsAreCheckedBeforeSending() throws {
        let token = try APNsDeviceToken(hex: String(repeating: "00ff", count: 16))
        func broadcast(_ size: Int) throws(APNsRequestError) -> APNsRequest {
            try .broadcast(bundleID: bundle, channelID: channel, payload: [UInt8](repeating: 0x20, count: size), expiration: 0, priority: .low)
        }
        func push(_ size: Int) throws(APNsRequestError) -> APNsRequest {
            try .devicePush(bundleID: bundle, deviceToken: token, payload: [UInt8](repeating: 0x20, count: size), priority: .immediate)
        }
        #expect(try broadcast(5_120).body.count == 5_120)
        #expect(throws: APNsRequestError.payloadTooLarge(size: 5_121, limit: 5_120)) { try broadcast(5_121) }
        #expect(throws: APNsRequestError.emptyPayload) { try broadcast(0) }
        #expect(try push(4_096).body.count == 4_096)
        #expect(throws: APNsRequestError.payloadTooLarge(size: 4_097, limit: 4_096)) { try push(4_097) }
        #expect(throws: APNsRequestError.emptyPayload) { try push(0) }
    }

    @Test func callerValuesAreValidated() throws {
        #expect(try APNsRequestID("6a9fb03c-1c1e-4d57-b3b4-6c0b5d3f1e2a").value == requestIDText)
        let random = APNsRequestID.random()
        #expect(random.value == random.value.lowercased())
        #expect(try APNsRequestID(random.value) == random)
        #expect(random != APNsRequestID.random())
        let characters = Array(random.value)
        #expect(UUID(uuidString: random.value) != nil && characters[14] == "4" && "89ab".contains(characters[19]), "\(random)")
        for bad in [
            "", "6a9fb03c1c1e4d57b3b46c0b5d3f1e2a", "6a9fb03c-1c1e-4d57-b3b4-6c0b5d3f1e2g",
            "{6a9fb03c-1c1e-4d57-b3b4-6c0b5d3f1e2a}", "6a9fb03c-1c1e-4d57-b3b4_6c0b5d3f1e2a",
        ] {
            #expect(throws: APNsRequestError.invalidRequestID(bad)) { try APNsRequestID(bad) }
        }
        for bad in ["", "not base64!", "abc", "dHN0LXNyY2gtY2hubA", "a-b_"] {
            #expect(throws: APNsRequestError.invalidChannelID(bad)) { try APNsChannelID(bad) }
        }
        for bad in [
            "", "abc", "zz", "00 11", "00ff", String(repeating: "0", count: 63), String(repeating: "0", count: 65),
            String(repeating: "g", count: 64), String(repeating: "00", count: 101),
        ] {
            #expect(throws: APNsRequestError.self) { try APNsDeviceToken(hex: bad) }
        }
        #expect(try APNsDeviceToken(hex: String(repeating: "ab", count: 32)).description == "abababab…")
        #expect(throws: APNsRequestError.invalidPriority(7)) { try APNsPriority(validating: 7) }
        #expect(try APNsPriority(validating: 1) == .low)

        for bad in ["", "com.example app", "com.example.scores.push-type.liveactivity", ".com.example", "com/example"] {
            #expect(throws: APNsRequestError.invalidBundleID(bad)) { try APNsRequest.listChannels(bundleID: bad) }
        }
        let token = try APNsDeviceToken(hex: String(repeating: "00ff", count: 16))
        let payload: [UInt8] = [0x7b, 0x7d]
        #expect(throws: APNsRequestError.invalidPriority(1)) {
            try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: payload, priority: .low)
        }
        #expect(throws: APNsRequestError.invalidExpiration(-1)) {
            try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: payload, priority: .immediate, expiration: -1)
        }
        #expect(throws: APNsRequestError.invalidExpiration(-1)) {
            try APNsRequest.broadcast(bundleID: bundle, channelID: channel, payload: payload, expiration: -1, priority: .immediate)
        }
        let long = String(repeating: "c", count: 65)
        #expect(throws: APNsRequestError.invalidCollapseID(long)) {
            try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: payload, priority: .immediate, collapseID: long)
        }
        #expect(throws: APNsRequestError.invalidCollapseID("")) {
            try APNsRequest.devicePush(bundleID: bundle, deviceToken: token, payload: payload, priority: .immediate, collapseID: "")
        }
    }
}
