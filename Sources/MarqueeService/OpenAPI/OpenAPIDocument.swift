// The OpenAPI 3.1 document of the API, served at /openapi.json. docs/openapi.json is the same text (a test
// compares them, and compares the document's operations with the route table): edit this file, then run
// `swift run marquee openapi > docs/openapi.json`.

/// The API's OpenAPI document.
public enum OpenAPIDocument {
    /// The document as JSON text.
    public static let text = #"""
{
  "openapi": "3.1.0",
  "info": {
    "title": "Marquee API",
    "version": "0.1.0",
    "description": "APNs broadcast channels for Live Activities. Every error has the body {\"error\": {\"code\", \"message\", \"field\"}}. Keys are sent as 'Authorization: Bearer mq_<id>_<secret>'; a missing or unknown key gets 401, a key without the route's scope 403. Request bodies are JSON ('Content-Type: application/json', else 415), at most 65536 bytes (else 413)."
  },
  "servers": [{ "url": "http://127.0.0.1:8080" }],
  "security": [{ "apiKey": [] }],
  "paths": {
    "/healthz": {
      "get": {
        "operationId": "health",
        "summary": "The process is alive.",
        "security": [],
        "responses": { "200": { "description": "Alive.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Status" } } } } }
      }
    },
    "/readyz": {
      "get": {
        "operationId": "readiness",
        "summary": "The database is reachable and its schema is current.",
        "security": [],
        "responses": {
          "200": { "description": "Ready.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Status" } } } },
          "503": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/metrics": {
      "get": {
        "operationId": "metrics",
        "summary": "Prometheus metrics (text exposition format 0.0.4).",
        "security": [],
        "responses": { "200": { "description": "Metrics.", "content": { "text/plain": { "schema": { "type": "string" } } } } }
      }
    },
    "/openapi.json": {
      "get": {
        "operationId": "openapi",
        "summary": "This document.",
        "security": [],
        "responses": { "200": { "description": "The OpenAPI document.", "content": { "application/json": { "schema": { "type": "object" } } } } }
      }
    },
    "/v1/apps": {
      "get": {
        "operationId": "listApps",
        "summary": "Every app (admin). Apps are added with 'marquee app add'.",
        "responses": {
          "200": {
            "description": "The apps.",
            "content": { "application/json": { "schema": {
              "type": "object", "required": ["apps"],
              "properties": { "apps": { "type": "array", "items": { "$ref": "#/components/schemas/App" } } }
            } } }
          },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/apps/{id}": {
      "get": {
        "operationId": "getApp",
        "summary": "One app (admin).",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 1 } }],
        "responses": {
          "200": { "description": "The app.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/App" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/attribute-types": {
      "get": {
        "operationId": "listAttributeTypes",
        "summary": "Every attribute type, or those of one app (any key).",
        "parameters": [{ "name": "app", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 } }],
        "responses": {
          "200": {
            "description": "The attribute types.",
            "content": { "application/json": { "schema": {
              "type": "object", "required": ["attributeTypes"],
              "properties": { "attributeTypes": { "type": "array", "items": { "$ref": "#/components/schemas/AttributeType" } } }
            } } }
          },
          "401": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      },
      "post": {
        "operationId": "registerAttributeType",
        "summary": "Registers the schema of an ActivityAttributes type (admin). The same document again answers 200; another document under a registered name answers 409.",
        "requestBody": {
          "required": true,
          "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AttributeTypeInput" } } }
        },
        "responses": {
          "200": { "description": "Already registered with this document.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AttributeType" } } } },
          "201": { "description": "Registered.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AttributeType" } } } },
          "400": { "$ref": "#/components/responses/Error" },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "413": { "$ref": "#/components/responses/Error" },
          "415": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/attribute-types/{name}": {
      "get": {
        "operationId": "getAttributeType",
        "summary": "One attribute type (any key). Without 'app', the name must be registered by one app only (else 409).",
        "parameters": [
          { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } },
          { "name": "app", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 } }
        ],
        "responses": {
          "200": { "description": "The attribute type.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AttributeType" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/channels": {
      "get": {
        "operationId": "listChannels",
        "summary": "Channels, newest first (admin).",
        "parameters": [
          { "name": "app", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 } },
          { "name": "state", "in": "query", "required": false, "schema": { "type": "string", "enum": ["planned", "creating", "create_unknown", "create_failed", "open", "ending", "ended", "deleting", "deleted", "lost", "unknown"] } },
          { "name": "event", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 } },
          { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": 500, "default": 100 } }
        ],
        "responses": {
          "200": { "description": "The channels.", "content": { "application/json": { "schema": { "type": "object", "required": ["channels"], "properties": { "channels": { "type": "array", "items": { "$ref": "#/components/schemas/Channel" } } } } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/channels/{id}": {
      "get": {
        "operationId": "getChannel",
        "summary": "One channel with its newest 20 APNs exchanges (admin).",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } }],
        "responses": {
          "200": { "description": "The channel.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ChannelDetail" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" }
        }
      },
      "delete": {
        "operationId": "deleteChannel",
        "summary": "Deletes the channel at APNs now (admin). An open channel needs force=true: its running activities stop getting updates.",
        "parameters": [
          { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } },
          { "name": "force", "in": "query", "required": false, "schema": { "type": "boolean", "default": false } }
        ],
        "responses": {
          "202": { "description": "The channel after the delete.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Channel" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/events/{id}/channel/recreate": {
      "post": {
        "operationId": "recreateChannel",
        "summary": "Creates a new APNs channel for an event whose channel was lost (ChannelNotRegistered) or refused (admin). Running activities stay on the old id.",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } }],
        "responses": {
          "202": { "description": "The channel, being created again.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Channel" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/channels/reconcile": {
      "post": {
        "operationId": "reconcileChannels",
        "summary": "Compares APNs' channel lists with the database (admin). dryRun changes nothing; deleteUnknown deletes unknown channels seen for the configured grace.",
        "requestBody": {
          "required": true,
          "content": { "application/json": { "schema": {
            "type": "object", "additionalProperties": false,
            "properties": { "dryRun": { "type": "boolean", "default": false }, "deleteUnknown": { "type": "boolean", "default": false } }
          } } }
        },
        "responses": {
          "200": { "description": "What was found (a dry run) or the sweep that reconciled.", "content": { "application/json": { "schema": { "type": "object" } } } },
          "400": { "$ref": "#/components/responses/Error" },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "415": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" },
          "503": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/channels/sweep": {
      "post": {
        "operationId": "sweepChannels",
        "summary": "Runs the scheduler's open, end and delete pass once (admin; for cron). 409 while another instance leads.",
        "responses": {
          "200": { "description": "What the sweep did.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SweepReport" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/status": {
      "get": {
        "operationId": "status",
        "summary": "Channels against the quota per app, outbox backlog, lost channels and the last APNs errors (admin).",
        "responses": {
          "200": { "description": "The status.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PipelineStatus" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" }
        }
      }
    }
  },
  "components": {
    "securitySchemes": {
      "apiKey": { "type": "http", "scheme": "bearer", "description": "A Marquee API key, mq_<id>_<secret> (marquee key create)." }
    },
    "responses": {
      "Error": {
        "description": "An error.",
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
      }
    },
    "schemas": {
      "Status": {
        "type": "object", "required": ["status"],
        "properties": { "status": { "type": "string" } }
      },
      "Error": {
        "type": "object", "required": ["error"],
        "properties": {
          "error": {
            "type": "object", "required": ["code", "message", "field"],
            "properties": {
              "code": { "type": "string", "description": "Stable snake_case code, e.g. validation_failed." },
              "message": { "type": "string" },
              "field": { "type": ["string", "null"], "description": "The input at fault, e.g. contentState.homeScore." }
            }
          }
        }
      },
      "Channel": {
        "type": "object",
        "required": ["id", "app", "event", "apnsChannelId", "storagePolicy", "state", "attempts", "createdAt"],
        "properties": {
          "id": { "type": "integer" }, "app": { "type": "integer" }, "event": { "type": ["integer", "null"] }, "apnsChannelId": { "type": ["string", "null"] },
          "storagePolicy": { "type": "string", "enum": ["mostRecent", "none"] }, "state": { "type": "string" },
          "attempts": { "type": "integer" }, "nextAttemptAt": { "type": ["string", "null"], "format": "date-time" }, "requestedAt": { "type": ["string", "null"], "format": "date-time" }, "openedAt": { "type": ["string", "null"], "format": "date-time" }, "endedAt": { "type": ["string", "null"], "format": "date-time" },
          "deletedAt": { "type": ["string", "null"], "format": "date-time" }, "firstSeenAt": { "type": ["string", "null"], "format": "date-time" }, "lastApsTimestamp": { "type": ["integer", "null"] }, "lastError": { "type": ["string", "null"] }, "lastErrorAt": { "type": ["string", "null"], "format": "date-time" },
          "createdAt": { "type": "string", "format": "date-time" }
        }
      },
      "ChannelDetail": {
        "allOf": [
          { "$ref": "#/components/schemas/Channel" },
          { "type": "object", "required": ["deliveries"], "properties": { "deliveries": { "type": "array", "items": { "$ref": "#/components/schemas/Delivery" } } } }
        ]
      },
      "Delivery": {
        "type": "object",
        "required": ["id", "app", "kind", "attempt", "sentAt"],
        "properties": {
          "id": { "type": "integer" }, "app": { "type": "integer" }, "kind": { "type": "string" }, "channel": { "type": ["integer", "null"] }, "update": { "type": ["integer", "null"] },
          "apnsRequestId": { "type": ["string", "null"] }, "apnsUniqueId": { "type": ["string", "null"] }, "status": { "type": ["integer", "null"] }, "reason": { "type": ["string", "null"] }, "latencyMicroseconds": { "type": ["integer", "null"] }, "priority": { "type": ["integer", "null"] },
          "attempt": { "type": "integer" }, "apsTimestamp": { "type": ["integer", "null"] }, "sentAt": { "type": "string", "format": "date-time" }
        }
      },
      "SweepReport": {
        "type": "object",
        "properties": {
          "opened": { "type": "array", "items": { "type": "integer" } }, "createRetries": { "type": "array", "items": { "type": "integer" } }, "createsUnknown": { "type": "array", "items": { "type": "integer" } }, "createsFailed": { "type": "array", "items": { "type": "integer" } }, "quotaRefused": { "type": "array", "items": { "type": "integer" } }, "eventsEnded": { "type": "array", "items": { "type": "integer" } },
          "deleted": { "type": "array", "items": { "type": "integer" } }, "lost": { "type": "array", "items": { "type": "integer" } }, "unknown": { "type": "array", "items": { "type": "string" } }, "unknownDeleted": { "type": "array", "items": { "type": "string" } }, "reconciledApps": { "type": "array", "items": { "type": "integer" } }
        }
      },
      "PipelineStatus": {
        "type": "object",
        "required": ["apps", "outboxBacklog", "oldestOutboxAgeSeconds", "lostChannels", "lastErrors"],
        "properties": {
          "apps": { "type": "array", "items": { "type": "object", "properties": {
            "app": { "type": "integer" }, "bundleId": { "type": "string" }, "environment": { "type": "string" },
            "quota": { "type": "integer" }, "inUse": { "type": "integer" },
            "channelsByState": { "type": "object", "additionalProperties": { "type": "integer" } } } } },
          "outboxBacklog": { "type": "integer" },
          "oldestOutboxAgeSeconds": { "type": ["number", "null"] },
          "lostChannels": { "type": "array", "items": { "type": "object" } },
          "lastErrors": { "type": "array", "items": { "$ref": "#/components/schemas/Delivery" } }
        }
      },
      "App": {
        "type": "object",
        "required": ["id", "bundleId", "environment", "teamId", "keyId", "pushUrl", "manageUrl", "createdAt"],
        "properties": {
          "id": { "type": "integer" },
          "bundleId": { "type": "string" },
          "environment": { "type": "string", "enum": ["development", "production"] },
          "teamId": { "type": "string" },
          "keyId": { "type": "string" },
          "pushUrl": { "type": ["string", "null"] },
          "manageUrl": { "type": ["string", "null"] },
          "createdAt": { "type": "string", "format": "date-time" }
        }
      },
      "FieldSpecs": {
        "type": "object",
        "description": "Field name to field spec: a shorthand such as \"int\" or \"string?\", or an object {\"type\", \"optional\", \"significant\", \"values\" | \"fields\" | \"items\"} (docs/schemas.md).",
        "additionalProperties": { "oneOf": [{ "type": "string" }, { "type": "object" }] }
      },
      "AttributeTypeInput": {
        "type": "object",
        "required": ["app", "name", "attributes", "contentState"],
        "additionalProperties": false,
        "properties": {
          "app": { "type": "integer", "minimum": 1, "description": "The app id (GET /v1/apps, marquee app list)." },
          "name": { "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 128, "description": "The Swift type name, e.g. MatchAttributes." },
          "attributes": { "$ref": "#/components/schemas/FieldSpecs" },
          "contentState": { "$ref": "#/components/schemas/FieldSpecs" }
        }
      },
      "AttributeType": {
        "type": "object",
        "required": ["id", "app", "name", "attributes", "contentState", "createdAt"],
        "properties": {
          "id": { "type": "integer" },
          "app": { "type": "integer" },
          "name": { "type": "string" },
          "attributes": { "$ref": "#/components/schemas/FieldSpecs" },
          "contentState": { "$ref": "#/components/schemas/FieldSpecs" },
          "createdAt": { "type": "string", "format": "date-time" }
        }
      }
    }
  }
}
"""#
}
