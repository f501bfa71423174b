// Attribute types: the schema of an app's ActivityAttributes (docs/schemas.md). `app` is the numeric app
// id (`marquee app list`, `GET /v1/apps`), since a bundle id names two apps (development and production).
// Registering is idempotent: the same document again answers 200; another document under a registered
// name answers 409, because devices already decode the old shape (a new shape gets a new Swift type name).
// A type's freshness policy is another matter: it decides what its events' pushes carry at send time
// (FreshnessPolicy), not their shape, so `PUT /v1/attribute-types/{name}/policy` replaces it at any time.
import MarqueeCore
import MarqueeStore
import Network

/// `POST /v1/attribute-types` (admin), `GET /v1/attribute-types` and `GET /v1/attribute-types/{name}` (any key),
/// `PUT /v1/attribute-types/{name}/policy` (admin).
public struct AttributeTypeRoutes: APIRoutes {
    private let apps: AppRepository
    private let types: AttributeTypeCatalog

    public init(apps: AppRepository, types: AttributeTypeCatalog) {
        self.apps = apps
        self.types = types
    }

    public func register(in table: inout RouteTable) {
        table.add("POST", "/v1/attribute-types", access: .scope(.admin), takesBody: true) { [apps, types] request in
            let body = try request.bodyObject()
            try body.allowOnly(["app", "name", "attributes", "contentState"])
            let appID = try body.int("app", in: 1...Int64.max)
            let type: ActivityType
            do {
                type = try ActivityType(json: [
                    "name": try body.required("name"),
                    "attributes": try body.required("attributes"),
                    "contentState": try body.required("contentState"),
                ])
            } catch let error as SchemaError {
                throw APIError.validation(error.message, field: error.path.isRoot ? nil : "\(error.path)")
            }
            // Stored names are ASCII (a Swift type name an app can declare in any source file; see 0001_init.sql).
            guard type.name.utf8.allSatisfy({ $0.isASCIILetterOrDigit || $0 == UInt8(ascii: "_") }) else {
                throw APIError.validation("a type name uses ASCII letters, digits and underscores", field: "name")
            }
            guard try await apps.find(id: Int(appID)) != nil else {
                throw APIError.validation("no app with id \(appID); see GET /v1/apps", field: "app")
            }
            switch try await types.register(type, appID: Int(appID)) {
            case .created(let stored): return .json(Self.json(stored), status: 201)
            case .unchanged(let stored): return .json(Self.json(stored), status: 200)
            case .conflict:
                throw APIError.conflict(
                    "attribute type '\(type.name)' is registered with another schema; register the new shape under a new name",
                    field: "name")
            }
        }
        table.add("GET", "/v1/attribute-types", access: .anyKey) { [types] request in
            let appID = try request.query.integer("app")
            return .json(["attributeTypes": .array(try await types.repository.list(appID: appID).map(Self.json))])
        }
        table.add("GET", "/v1/attribute-types/{name}", access: .anyKey) { [types] request in
            .json(Self.json(try await Self.named(request, in: types)))
        }
        table.add("PUT", "/v1/attribute-types/{name}/policy", access: .scope(.admin), takesBody: true) { [types] request in
            let stored = try await Self.named(request, in: types)
            let settings: FreshnessSettings
            do {
                settings = try FreshnessSettings(json: .object(try request.bodyObject().object))
            } catch let error as FreshnessSettingsError {
                throw APIError.validation(error)
            }
            guard let updated = try await types.setPolicy(typeID: stored.id, settings, apiKeyID: request.key?.databaseID) else {
                throw APIError.notFound("attribute type")
            }
            return .json(Self.json(updated))
        }
    }

    /// The type the path names, in the query's `app` (needed when several apps register the name).
    private static func named(_ request: APIRequest, in types: AttributeTypeCatalog) async throws -> StoredAttributeType {
        let name = request.parameter("name")
        if let appID = try request.query.integer("app") {
            guard let stored = try await types.find(name: name, appID: appID) else { throw APIError.notFound("attribute type") }
            return stored
        }
        let found = try await types.find(name: name)
        guard let first = found.first else { throw APIError.notFound("attribute type") }
        guard found.count == 1 else {
            throw APIError.conflict("several apps register '\(name)'; pass ?app=<id>", field: "app")
        }
        return first
    }

    /// The API's view of an attribute type: the schema document plus its app and id.
    public static func json(_ stored: StoredAttributeType) -> JSONValue {
        [
            "id": .int(Int64(stored.id)),
            "app": .int(Int64(stored.appID)),
            "name": .string(stored.type.name),
            "attributes": stored.type.attributes.json,
            "contentState": stored.type.contentState.json,
            "createdAt": .string(stored.createdAt.ISO8601Format()),
            // The members set (PUT …/policy), and the policy its events get unless they set their own.
            "policy": stored.freshness?.json ?? [:],
            "policyInForce": FreshnessPolicy(event: nil, type: stored.freshness).json,
        ]
    }
}

extension UInt8 {
    fileprivate var isASCIILetterOrDigit: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
