// The status page (`GET /status`, and `GET /` redirecting there): HTML, CSS and a script from StatusPage/, compiled
// into the binary by the EmbedServedFiles plugin, so `serve` needs nothing beside itself. The page holds no data:
// its script asks for a key and reads `GET /v1/status` and `GET /v1/status/board` with it. The routes need no key.
// Every answer forbids inline script and framing (the page's own files are its only sources) and content sniffing,
// and the data the script writes goes in as text, never as markup.
import Network

/// `GET /`, `GET /status` and the page's `GET /status/status.css` and `GET /status/status.js`.
public struct StatusPageRoutes: APIRoutes {
    /// The page's security headers: scripts and styles from the page's origin only, never framed, never sniffed.
    static let securityHeaders: HTTPHeaders = [
        "content-security-policy": "default-src 'self'; script-src 'self'; frame-ancestors 'none'",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-cache",
    ]

    /// The served files: path, file of StatusPage/, content type.
    static let files: [(path: String, file: String, contentType: String)] = [
        ("/status", "index.html", "text/html; charset=utf-8"),
        ("/status/status.css", "status.css", "text/css; charset=utf-8"),
        ("/status/status.js", "status.js", "text/javascript; charset=utf-8"),
    ]

    public init() {}

    public func register(in table: inout RouteTable) {
        table.add("GET", "/", access: .open) { _ in
            var headers = Self.securityHeaders
            headers.add("location", "/status")
            return HTTPResponse(status: 302, headers: headers)
        }
        for (path, file, contentType) in Self.files {
            let body = Array((embeddedStatusPage[file] ?? "").utf8)
            table.add("GET", path, access: .open) { _ in
                var headers = Self.securityHeaders
                headers.add("content-type", contentType)
                return HTTPResponse(status: 200, headers: headers, body: body)
            }
        }
    }
}
