// The OpenAPI 3.1 document of the API, served at /openapi.json and printed by `marquee openapi`. Its source is
// docs/openapi.json, edited by hand; the EmbedServedFiles build plugin compiles the file in, so the binary serves
// exactly what the repository holds. A test holds its operations to the route table: a new route is added to
// docs/openapi.json too.

/// The API's OpenAPI document.
public enum OpenAPIDocument {
    /// The document as JSON text: docs/openapi.json, byte for byte.
    public static let text: String = embeddedOpenAPIDocument
}
