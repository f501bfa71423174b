// `marquee attribute-type create|list|show|policy`: the schemas of apps' ActivityAttributes structs through the
// HTTP API (POST /v1/attribute-types, GET /v1/attribute-types[/{name}], PUT /v1/attribute-types/{name}/policy).
// An event names one (`event create --attribute-type`), so an operator registers it here first.
import Foundation
import MarqueeCommandLine
import MarqueeCore

enum AttributeTypeCommands {
    static let command = Command(
        "attribute-type", summary: "Register, list and show attribute types (the schema of an ActivityAttributes struct), and set their policy.",
        discussion: """
            An attribute type is the schema of one of an app's ActivityAttributes structs: its static attributes and
            its content state (docs/schemas.md). Every event names one (event create --attribute-type), and Marquee
            validates and encodes its states with it. A registered type never changes: give a new shape a new name.

            Example:
              marquee attribute-type create --app 1 --name MatchAttributes \\
                --attributes '{"homeTeam":"string","awayTeam":"string"}' \\
                --content-state '{"homeScore":{"type":"int","significant":true},"awayScore":"int"}'
              marquee attribute-type policy MatchAttributes --app 1 --freshness '{"staleAfter":300}'

            \(AdminAPIClient.exitCodes)
            """,
        subcommands: [create, list, show, policy])

    static let create = Command(
        "create", summary: "Register an app's attribute type; the same document again changes nothing.",
        discussion: """
            Give the schema as --schema (the whole document: {"name", "attributes", "contentState"}) or as --name,
            --attributes and --content-state. JSON values may be given inline or as @FILE (@- reads standard input).
            Prints the type's id. A different schema under a registered name is refused (409: exit 1).

            Example:
              marquee attribute-type create --app 1 --schema @MatchAttributes.json

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .option("app", value: "ID", help: "The app id (marquee app list).", required: true),
            .option("schema", value: "JSON", help: #"The whole schema document, {"name", "attributes", "contentState"}, or @FILE."#),
            .option("name", value: "NAME", help: "The Swift struct's name, e.g. MatchAttributes (ASCII letters, digits, underscores)."),
            .option("attributes", value: "JSON", help: "The static attributes' fields, a JSON object or @FILE."),
            .option("content-state", value: "JSON", help: "The content state's fields, a JSON object or @FILE."),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        let path = arguments.commandPath
        var body: JSONObject = ["app": .int(try input.id("app")!)]
        if let schema = try await input.object("schema") {
            guard ["name", "attributes", "content-state"].allSatisfy({ arguments.string($0) == nil }) else {
                throw UsageError("give either --schema or --name/--attributes/--content-state, not both", commandPath: path)
            }
            for (key, value) in schema.objectValue ?? [:] { body[key] = value }
        } else {
            guard let name = arguments.string("name") else {
                throw UsageError("missing --name (or give the whole document with --schema)", field: "name", commandPath: path)
            }
            body["name"] = .string(try typeName(name, arguments))
            guard let attributes = try await input.object("attributes"), let state = try await input.object("content-state") else {
                throw UsageError("give --attributes and --content-state (or the whole document with --schema)", commandPath: path)
            }
            body["attributes"] = attributes
            body["contentState"] = state
        }
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("POST", "/v1/attribute-types", body: .object(body)) }
        APIText.emit(arguments, answer, text: { APIText.cell($0["id"]) }) { type in
            "attribute type \(APIText.cell(type["name"])) of app \(APIText.cell(type["app"])): id \(APIText.cell(type["id"]))"
        }
    }

    static let list = Command(
        "list", summary: "List attribute types, with their fields.",
        discussion: "Example:\n  marquee attribute-type list --app 1\n\n\(AdminAPIClient.exitCodes)",
        arguments: [.option("app", value: "ID", help: "Only this app's types.")] + AdminAPIClient.options
    ) { arguments in
        let query: [(String, String?)] = [("app", try APIInput(arguments).id("app").map(String.init))]
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/attribute-types", query: query) }
        APIText.emit(arguments, answer) { page in
            let types = page["attributeTypes"]?.arrayValue ?? []
            guard !types.isEmpty else { return "(no attribute types: register one with marquee attribute-type create)" }
            return Terminal.table(
                ["ID", "APP", "NAME", "ATTRIBUTES", "CONTENT STATE"],
                types.map { type in
                    [
                        APIText.cell(type["id"]), APIText.cell(type["app"]), APIText.cell(type["name"]), fields(type["attributes"]),
                        fields(type["contentState"]),
                    ]
                })
        }
    }

    static let show = Command(
        "show", summary: "Show an attribute type: its schema and its freshness policy.",
        discussion: """
            --app is needed when several apps register the name (409: exit 1).

            Example:
              marquee attribute-type show MatchAttributes --app 1

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("name", help: "The type's name (marquee attribute-type list)."),
            .option("app", value: "ID", help: "The app that registers it."),
        ] + AdminAPIClient.options
    ) { arguments in
        let name = try typeName(try arguments.required("name"), arguments)
        let query: [(String, String?)] = [("app", try APIInput(arguments).id("app").map(String.init))]
        let answer = try await AdminAPIClient.with(arguments) { api in try await api.send("GET", "/v1/attribute-types/\(name)", query: query) }
        APIText.emit(arguments, answer, text: block)
    }

    static let policy = Command(
        "policy", summary: "Replace an attribute type's freshness policy (what its events' pushes carry besides their state).",
        discussion: """
            --freshness replaces the members the type sets: staleAfter, relevanceScore (0 to 1000000, default 50),
            alertBoost, alertBoostSeconds and dismissAfter (docs/api.md, Freshness policies); {} removes them all.
            An event's own members (event create or edit --freshness) win over these. Prints the type.

            Example:
              marquee attribute-type policy MatchAttributes --app 1 --freshness '{"staleAfter":300,"dismissAfter":900}'

            \(AdminAPIClient.exitCodes)
            """,
        arguments: [
            .positional("name", help: "The type's name (marquee attribute-type list)."),
            .option("app", value: "ID", help: "The app that registers it."),
            .option("freshness", value: "JSON", help: "The policy's members, a JSON object or @FILE.", required: true),
        ] + AdminAPIClient.options
    ) { arguments in
        let input = APIInput(arguments)
        let name = try typeName(try arguments.required("name"), arguments)
        let query: [(String, String?)] = [("app", try input.id("app").map(String.init))]
        let body = try await input.object("freshness")!
        let answer = try await AdminAPIClient.with(arguments) { api in
            try await api.send("PUT", "/v1/attribute-types/\(name)/policy", query: query, body: body)
        }
        APIText.emit(arguments, answer, text: block) { type in "replaced the freshness policy of \(APIText.cell(type["name"]))" }
    }

    // MARK: Shared pieces

    /// A type name as the API takes it (checked here, so it goes in a path as it is).
    static func typeName(_ name: String, _ arguments: ParsedArguments) throws -> String {
        guard !name.isEmpty, name.utf8.count <= 200, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw UsageError(
                "an attribute type's name is a Swift type name (ASCII letters, digits, underscores), not '\(name)'", field: "name",
                commandPath: arguments.commandPath)
        }
        return name
    }

    /// `homeScore, awayScore, lastScorer`: a schema's field names, in its order.
    static func fields(_ schema: JSONValue?) -> String {
        guard case .object(let object)? = schema, !object.isEmpty else { return "-" }
        return object.keys.joined(separator: ", ")
    }

    static func block(_ type: JSONValue) -> String {
        APIText.block([
            ("id", APIText.cell(type["id"])), ("app", APIText.cell(type["app"])), ("name", APIText.cell(type["name"])),
            ("attributes", APIText.cell(type["attributes"])), ("content state", APIText.cell(type["contentState"])),
            ("policy", APIText.cell(type["policy"])), ("policy in force", APIText.cell(type["policyInForce"])),
            ("created", APIText.cell(type["createdAt"])),
        ])
    }
}
