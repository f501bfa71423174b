// `marquee openapi`: prints the API's OpenAPI document (docs/openapi.json is its output).
import MarqueeCommandLine
import MarqueeService

enum OpenAPICommand {
    static let command = Command("openapi", summary: "Print the API's OpenAPI 3.1 document.", arguments: []) { _ in
        Terminal.print(OpenAPIDocument.text)
    }
}
