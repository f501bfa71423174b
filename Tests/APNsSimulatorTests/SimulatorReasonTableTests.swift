import Testing

@testable import APNsSimulator

/// Apple's error tables, transcribed here by hand from the pages, apart from the simulator's own table, so that a
/// slip in either shows up as a difference.
enum AppleErrorTables {
    /// https://developer.apple.com/documentation/usernotifications/handling-error-responses-from-apns
    /// The table the broadcast page (https://developer.apple.com/documentation/usernotifications/sending-broadcast-push-notification-requests-to-apns)
    /// and the channel-management page (https://developer.apple.com/documentation/usernotifications/sending-channel-management-requests-to-apns)
    /// send their errors to.
    static let broadcastAndChannelManagement: [String: Int] = [
        "FeatureNotEnabled": 400, "MissingChannelId": 400, "BadChannelId": 400, "ChannelNotRegistered": 400,
        "BadRequestParams": 400, "BadRequestPayload": 400, "PayloadEmpty": 400, "BadMessageId": 400,
        "MissingPushType": 400, "InvalidPushType": 400, "CannotCreateChannelConfig": 400, "BadExpirationDate": 400,
        "TopicDisallowed": 400, "BadPriority": 400,
        "BadCertificate": 403, "BadCertificateEnvironment": 403, "TopicMismatch": 403, "MissingProviderToken": 403,
        "ExpiredProviderToken": 403, "InvalidProviderToken": 403,
        "BadPath": 404, "MethodNotAllowed": 405, "PayloadTooLarge": 413,
        "TooManyRequests": 429, "TooManyProviderTokenUpdates": 429,
        "InternalServerError": 500, "Service Unavailable": 503, "Shutdown": 503,
    ]

    /// https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
    /// ("Response error strings"), for https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns
    static let devicePush: [String: Int] = [
        "BadCollapseId": 400, "BadDeviceToken": 400, "BadExpirationDate": 400, "BadMessageId": 400, "BadPriority": 400,
        "BadTopic": 400, "DeviceTokenNotForTopic": 400, "DuplicateHeaders": 400, "IdleTimeout": 400, "InvalidPushType": 400,
        "MissingDeviceToken": 400, "MissingTopic": 400, "PayloadEmpty": 400, "TopicDisallowed": 400,
        "BadCertificate": 403, "BadCertificateEnvironment": 403, "ExpiredProviderToken": 403, "Forbidden": 403,
        "InvalidProviderToken": 403, "MissingProviderToken": 403, "UnrelatedKeyIdInToken": 403,
        "BadPath": 404, "MethodNotAllowed": 405, "ExpiredToken": 410, "Unregistered": 410, "PayloadTooLarge": 413,
        "TooManyProviderTokenUpdates": 429, "TooManyRequests": 429,
        "InternalServerError": 500, "ServiceUnavailable": 503, "Shutdown": 503,
    ]

    static func table(_ api: SimulatorAPI) -> [String: Int] {
        api == .devicePush ? devicePush : broadcastAndChannelManagement
    }
}

@Suite struct SimulatorReasonTableTests {
    @Test(arguments: SimulatorAPI.allCases)
    func theSimulatorsTableIsApplesTable(_ api: SimulatorAPI) {
        let apple = AppleErrorTables.table(api)
        var simulator: [String: Int] = [:]
        for reason in api.documentedReasons {
            let answer = api.answer(for: reason)!
            #expect(simulator.updateValue(answer.status, forKey: answer.text) == nil, "\(answer.text) twice on \(api)")
        }
        for (text, status) in apple.sorted(by: { $0.key < $1.key }) {
            #expect(
                simulator[text] == status,
                "\(api): Apple documents \(status) \(text), the simulator answers \(simulator[text].map(String.init) ?? "nothing")")
        }
        for text in Set(simulator.keys).subtracting(apple.keys).sorted() {
            Issue.record("\(api): the simulator answers \(text), which Apple does not document for it")
        }
    }

    /// The one reason Apple spells two ways; the simulator follows the page of each API.
    @Test func serviceUnavailableIsSpelledAsEachAPIsPageSpellsIt() {
        #expect(SimulatorAPI.broadcast.answer(for: .serviceUnavailable) == SimulatorAnswer(status: 503, text: "Service Unavailable"))
        #expect(SimulatorAPI.channelManagement.answer(for: .serviceUnavailable) == SimulatorAnswer(status: 503, text: "Service Unavailable"))
        #expect(SimulatorAPI.devicePush.answer(for: .serviceUnavailable) == SimulatorAnswer(status: 503, text: "ServiceUnavailable"))
    }

    /// Every reason the simulator knows belongs to at least one of Apple's tables.
    @Test func everyReasonIsInSomeTable() {
        for reason in SimulatorReason.allCases {
            #expect(SimulatorAPI.allCases.contains { $0.answer(for: reason) != nil }, "\(reason)")
        }
    }
}
