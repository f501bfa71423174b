import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import Network
import Postgres
import Testing

/// Back-pressure (issue 54): the admission policy's decisions, and the API answering them, without a database.
struct AdmissionTests {
    static func load(waiting: Int, oldest: Duration, unreachable: Bool = false) -> PostgresPoolLoad {
        PostgresPoolLoad(capacity: 4, waiting: waiting, oldestWait: oldest, unreachable: unreachable)
    }

    @Test func thePolicyRefusesOnceTheQueueIsOlderThanItsBound() {
        let policy = AdmissionPolicy.forPool(connections: 4, maxQueueWait: 0.5)
        #expect(policy.decide(Self.load(waiting: 0, oldest: .zero)) == .admit)
        #expect(policy.decide(Self.load(waiting: 30, oldest: .milliseconds(100))) == .admit)
        #expect(policy.decide(Self.load(waiting: 1, oldest: .milliseconds(500))) == .overloaded(retryAfter: 1))
        #expect(policy.decide(Self.load(waiting: 1, oldest: .seconds(2), unreachable: true)) == .databaseUnavailable(retryAfter: 1))
        // However young the queue, its length is bounded.
        #expect(policy.decide(Self.load(waiting: 4 * AdmissionPolicy.waitingPerConnection, oldest: .zero)) == .overloaded(retryAfter: 1))
    }

    @Test func thePolicyRefusesOnceMoreAreInFlightThanCompleteWithinItsBound() {
        let policy = AdmissionPolicy.forPool(connections: 1, maxQueueWait: 0.5)
        let idle = PostgresPoolLoad(capacity: 1, waiting: 0, oldestWait: .zero, unreachable: false)
        // 2,000 completed a second: 250 in flight wait an eighth of a second on average, a quarter of the bound.
        #expect(policy.decide(idle, inFlight: 249, completionRate: 2000) == .admit)
        #expect(policy.decide(idle, inFlight: 250, completionRate: 2000) == .overloaded(retryAfter: 1))
        // With no rate yet (or a slow one), 64 per connection may be in flight.
        #expect(policy.decide(idle, inFlight: 63, completionRate: 0) == .admit)
        #expect(policy.decide(idle, inFlight: 64, completionRate: 10) == .overloaded(retryAfter: 1))
    }

    @Test func aZeroBoundRefusesAsSoonAsOneRequestWaits() {
        let policy = AdmissionPolicy.forPool(connections: 1, maxQueueWait: 0)
        #expect(policy.decide(Self.load(waiting: 0, oldest: .zero)) == .admit)
        #expect(policy.decide(Self.load(waiting: 1, oldest: .zero)) == .overloaded(retryAfter: 1))
    }

    struct Routes: APIRoutes {
        func register(in table: inout RouteTable) {
            table.add("GET", "/healthz", access: .open) { _ in .json(["status": "ok"]) }
            table.add("POST", "/v1/things", access: .anyKey, takesBody: true) { _ in .json(["done": true]) }
        }
    }

    struct NoKeys: APIKeyLookup {
        func key(id: String) async throws -> StoredAPIKey? { nil }
        func touch(id: String) async {}
    }

    /// An API whose pool always measures `load`.
    static func server(load: PostgresPoolLoad) -> APIServer {
        APIServer(
            routes: [Routes()], keys: APIKeyVerifier(lookup: NoKeys()), metrics: MetricsRegistry(),
            logger: Logger(level: .error, format: .logfmt) { _ in },
            admission: APIAdmission(policy: .forPool(connections: 4, maxQueueWait: 0.5)) { load })
    }

    static func post() -> HTTPRequest {
        HTTPRequest(
            method: "POST", path: "/v1/things", headers: ["content-type": "application/json", "authorization": "Bearer x"],
            body: Array("{}".utf8))
    }

    @Test func anOverloadedServerAnswers429WithRetryAfterButStaysHealthy() async throws {
        let api = Self.server(load: Self.load(waiting: 10, oldest: .seconds(1)))
        let refused = await api.respond(to: Self.post())
        #expect(refused.status == 429)
        #expect(refused.headers["retry-after"] == "1")
        let body = try JSONValue(parsing: refused.body)
        #expect(body["error"]?["code"] == "overloaded")
        #expect(body["error"]?["field"] == .null)
        #expect(await api.respond(to: HTTPRequest(method: "GET", path: "/healthz")).status == 200)
    }

    @Test func aServerWhoseDatabaseIsDownAnswers503WithRetryAfter() async throws {
        let api = Self.server(load: Self.load(waiting: 3, oldest: .seconds(2), unreachable: true))
        let refused = await api.respond(to: Self.post())
        #expect(refused.status == 503)
        #expect(refused.headers["retry-after"] == "1")
        #expect(try JSONValue(parsing: refused.body)["error"]?["code"] == "unavailable")
    }

    @Test func aServerThatKeepsUpLetsTheRequestIn() async throws {
        let api = Self.server(load: Self.load(waiting: 2, oldest: .milliseconds(10)))
        #expect(await api.respond(to: Self.post()).status == 401)  // past admission: the (unknown) key is checked
    }
}
