// Apps, read-only over the API (operators add and remove them with `marquee app`). The signing key's
// path and contents never appear here.
import Foundation
import MarqueeCore
import MarqueeStore

/// `GET /v1/apps` and `GET /v1/apps/{id}` (admin).
public struct AppRoutes: APIRoutes {
    private let apps: AppRepository

    public init(apps: AppRepository) { self.apps = apps }

    public func register(in table: inout RouteTable) {
        table.add("GET", "/v1/apps", access: .scope(.admin)) { [apps] _ in
            .json(["apps": .array(try await apps.list().map(Self.json))])
        }
        table.add("GET", "/v1/apps/{id}", access: .scope(.admin)) { [apps] request in
            guard let id = Int(request.parameter("id")), id > 0 else {
                throw APIError.validation("an app id is a positive integer", field: "id")
            }
            guard let app = try await apps.find(id: id) else { throw APIError.notFound("app \(id)") }
            return .json(Self.json(app))
        }
    }

    /// The API's view of an app.
    public static func json(_ app: StoredApp) -> JSONValue {
        [
            "id": .int(Int64(app.id)),
            "bundleId": .string(app.bundleID),
            "environment": .string(app.environment),
            "teamId": .string(app.teamID),
            "keyId": .string(app.keyID),
            "pushUrl": app.pushURL.map(JSONValue.string) ?? .null,
            "manageUrl": app.managementURL.map(JSONValue.string) ?? .null,
            "createdAt": .string(app.createdAt.ISO8601Format()),
        ]
    }
}
