import MarqueeService
import Testing

@Suite struct RouterTests {
    private var router: Router<String> {
        var router = Router<String>()
        router.add("GET", "/v1/events", "list")
        router.add("POST", "/v1/events", "create")
        router.add("GET", "/v1/events/{id}", "show")
        router.add("POST", "/v1/events/{id}/updates", "update")
        return router
    }

    @Test func matchesTemplatesAndDecodesParameters() {
        guard case .found(let handler, let template, let parameters) = router.match(method: "POST", path: "/v1/events/ev%201/updates?x=1") else {
            Issue.record("expected a match")
            return
        }
        #expect(handler == "update")
        #expect(template == "/v1/events/{id}/updates")
        #expect(parameters == ["id": "ev 1"])
    }

    @Test func wrongMethodIsMethodNotAllowedWithTheAllowedList() {
        guard case .methodNotAllowed(let allowed) = router.match(method: "DELETE", path: "/v1/events") else {
            Issue.record("expected 405")
            return
        }
        #expect(allowed == ["GET", "POST"])
    }

    @Test func unknownPathsAreNotFound() {
        for path in ["/", "/v1", "/v1/events/1/updates/2", "/v2/events", "/v1/events//updates"] {
            guard case .notFound = router.match(method: "GET", path: path) else {
                Issue.record("expected 404 for \(path)")
                continue
            }
        }
    }

    @Test func queryParametersAreDecoded() {
        let query = QueryParameters(path: "/v1/events?status=live&after=a%2Fb&q=two+words&empty")
        #expect(query["status"] == "live")
        #expect(query["after"] == "a/b")
        #expect(query["q"] == "two words")
        #expect(query["empty"] == "")
        #expect(query["missing"] == nil)
        #expect(QueryParameters(path: "/v1/events").pairs.isEmpty)
    }
}

@Suite struct APIErrorTests {
    @Test func bodyHasCodeMessageAndField() {
        let error = APIError.validation("expected int, found string", field: "contentState.homeScore")
        #expect(error.status == 422)
        #expect(
            String(decoding: error.response.body, as: UTF8.self)
                == #"{"error":{"code":"validation_failed","message":"contentState.homeScore: expected int, found string","field":"contentState.homeScore"}}"#
        )
        // A message that names its subject already is left as it is (issue 48: a message needs its subject).
        #expect(APIError.validation("occurredAt is 60 s ahead", field: "occurredAt").message == "occurredAt is 60 s ahead")
        #expect(APIError.validation("nothing to change", field: nil).message == "nothing to change")
        #expect(error.response.headers["content-type"] == "application/json")
        #expect(String(decoding: APIError.internalError.response.body, as: UTF8.self).contains(#""field":null"#))
        #expect(APIError.unauthorized.response.headers["www-authenticate"] == "Bearer")
    }
}

@Suite struct MetricsRegistryTests {
    @Test func rendersTheTextExpositionFormat() {
        let registry = MetricsRegistry()
        let requests = registry.counter("marquee_http_requests_total", help: "HTTP requests.", labels: ["route", "status"])
        let latency = registry.histogram("marquee_http_request_duration_seconds", help: "Latency.", labels: ["route"], buckets: [0.01, 0.1])
        let backlog = registry.gauge("marquee_outbox_backlog", help: "Pending.")
        requests.increment(["/v1/events/{id}", "200"])
        requests.increment(["/v1/events/{id}", "200"])
        requests.increment(["/v1/events/{id}", "404"])
        latency.observe(0.005, ["/healthz"])
        latency.observe(0.05, ["/healthz"])
        latency.observe(3, ["/healthz"])
        backlog.set(7)
        let text = registry.render()
        #expect(text.contains("# TYPE marquee_http_requests_total counter\n"))
        #expect(text.contains(#"marquee_http_requests_total{route="/v1/events/{id}",status="200"} 2"#))
        #expect(text.contains(#"marquee_http_requests_total{route="/v1/events/{id}",status="404"} 1"#))
        #expect(text.contains(#"marquee_http_request_duration_seconds_bucket{route="/healthz",le="0.01"} 1"#))
        #expect(text.contains(#"marquee_http_request_duration_seconds_bucket{route="/healthz",le="0.1"} 2"#))
        #expect(text.contains(#"marquee_http_request_duration_seconds_bucket{route="/healthz",le="+Inf"} 3"#))
        #expect(text.contains(#"marquee_http_request_duration_seconds_sum{route="/healthz"} 3.055"#))
        #expect(text.contains(#"marquee_http_request_duration_seconds_count{route="/healthz"} 3"#))
        #expect(text.contains("marquee_outbox_backlog 7\n"))
    }

    @Test func labelValuesAreEscaped() {
        let registry = MetricsRegistry()
        registry.counter("odd_total", help: "Odd.", labels: ["reason"]).increment(["say \"hi\"\\\n"])
        #expect(registry.render().contains(#"odd_total{reason="say \"hi\"\\\n"} 1"#))
    }

    @Test func processMetricsSampleRealFigures() {
        let registry = MetricsRegistry()
        ProcessMetrics(registry: registry).sample()
        let text = registry.render()
        let resident = text.split(separator: "\n").first { $0.hasPrefix("process_resident_memory_bytes ") }
        #expect((resident?.split(separator: " ").last.flatMap { Double($0) } ?? 0) > 1_000_000)
        #expect(text.contains("process_open_fds "))
    }
}
