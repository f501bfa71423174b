import APNs
import Testing

@Suite struct APNsEndpointsTests {
    @Test func appleHosts() throws {
        let development = try APNsEndpoints.resolve(environment: .development, processEnvironment: [:])
        #expect(development.push == APNsEndpoint(host: "api.sandbox.push.apple.com", port: 443))
        #expect(development.management == APNsEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195))
        #expect(development.extraTrustedCAFile == nil)
        let production = try APNsEndpoints.resolve(environment: .production, processEnvironment: [:])
        #expect(production.push == APNsEndpoint(host: "api.push.apple.com", port: 443))
        #expect(production.management == APNsEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196))
        #expect(production[.management].url == "https://api-manage-broadcast.push.apple.com:2196")
    }

    @Test func environmentVariablesOverrideAppleForEveryEnvironment() throws {
        let variables = [
            "MARQUEE_APNS_PUSH_URL": "https://127.0.0.1:8443",
            "MARQUEE_APNS_MANAGE_URL": "https://localhost:8444",
            "MARQUEE_APNS_CA_FILE": "simulator-ca.pem",
        ]
        for environment in APNsEnvironment.allCases {
            let endpoints = try APNsEndpoints.resolve(environment: environment, processEnvironment: variables)
            #expect(endpoints.push == APNsEndpoint(host: "127.0.0.1", port: 8443))
            #expect(endpoints.management == APNsEndpoint(host: "localhost", port: 8444))
            #expect(endpoints.extraTrustedCAFile == "simulator-ca.pem")
        }
    }

    @Test func urlsStoredWithTheAppComeFirst() throws {
        let variables = ["MARQUEE_APNS_PUSH_URL": "https://127.0.0.1:8443", "MARQUEE_APNS_MANAGE_URL": "https://127.0.0.1:8444"]
        let both = try APNsEndpoints.resolve(
            environment: .production, appPushURL: "https://[::1]:9443", appManagementURL: "https://apns.test",
            processEnvironment: variables)
        #expect(both.push == APNsEndpoint(host: "::1", port: 9443))
        #expect(both.push.url == "https://[::1]:9443")
        #expect(both.management == APNsEndpoint(host: "apns.test", port: 443))

        let onlyPush = try APNsEndpoints.resolve(environment: .production, appPushURL: "https://apns.test:1", processEnvironment: [:])
        #expect(onlyPush.push == APNsEndpoint(host: "apns.test", port: 1))
        #expect(onlyPush.management == .apple(.management, .production))

        let empty = try APNsEndpoints.resolve(
            environment: .development, appPushURL: "", appManagementURL: "",
            processEnvironment: ["MARQUEE_APNS_PUSH_URL": "", "MARQUEE_APNS_CA_FILE": ""])
        #expect(empty == APNsEndpoints(push: .apple(.push, .development), management: .apple(.management, .development)))
    }

    @Test(arguments: [
        "http://127.0.0.1:8443", "127.0.0.1:8443", "https://", "https://host/path", "https://host:0",
        "https://host?x=1", "https://user@host", "not a url",
    ])
    func malformedURLsAreRefused(url: String) {
        #expect(throws: APNsConfigurationError.self) { try APNsEndpoint(url: url) }
        #expect(throws: APNsConfigurationError.self) {
            try APNsEndpoints.resolve(environment: .development, processEnvironment: ["MARQUEE_APNS_MANAGE_URL": url])
        }
        #expect(throws: APNsConfigurationError.self) {
            try APNsEndpoints.resolve(environment: .development, appPushURL: url, processEnvironment: [:])
        }
    }

    @Test func environmentParsing() {
        #expect(APNsEnvironment(parsing: "development") == .development)
        #expect(APNsEnvironment(parsing: "sandbox") == .development)
        #expect(APNsEnvironment(parsing: "Sandbox") == .development)
        #expect(APNsEnvironment(parsing: "production") == .production)
        #expect(APNsEnvironment(parsing: "staging") == nil)
        #expect(APNsEnvironment(parsing: "") == nil)
    }
}
