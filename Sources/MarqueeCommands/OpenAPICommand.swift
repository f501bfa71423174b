// `marquee openapi`: prints the API's OpenAPI document, the docs/openapi.json this binary was built with.
import MarqueeCommandLine
import MarqueeService

enum OpenAPICommand {
    static let command = Command(
        "openapi", summary: "Print the API's OpenAPI 3.1 document.", discussion: ExitCode.help([.success, .usage]), arguments: []
    ) { _ in
        // Byte for byte the file: print adds the newline the file ends with.
        let text = OpenAPIDocument.text
        Terminal.print(text.hasSuffix("\n") ? String(text.dropLast()) : text)
    }
}
