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
    "/v1/events": {
      "get": {
        "operationId": "listEvents",
        "summary": "Events by start time then id, filtered, in pages (admin). Pass nextCursor back as cursor for the next page.",
        "parameters": [
          { "name": "app", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 } },
          { "name": "status", "in": "query", "required": false, "schema": { "type": "string", "enum": ["scheduled", "live", "ending", "ended", "cancelled"] } },
          { "name": "kind", "in": "query", "required": false, "schema": { "type": "string", "enum": ["match", "flight", "other"] } },
          { "name": "topic", "in": "query", "required": false, "description": "Events carrying this topic.", "schema": { "type": "string" } },
          { "name": "startsAfter", "in": "query", "required": false, "description": "Events starting at or after this instant.", "schema": { "type": "string", "format": "date-time" } },
          { "name": "startsBefore", "in": "query", "required": false, "description": "Events starting before this instant.", "schema": { "type": "string", "format": "date-time" } },
          { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": 500, "default": 100 } },
          { "name": "cursor", "in": "query", "required": false, "schema": { "type": "string" } }
        ],
        "responses": {
          "200": {
            "description": "One page of events.",
            "content": { "application/json": { "schema": {
              "type": "object", "required": ["events", "nextCursor"],
              "properties": {
                "events": { "type": "array", "items": { "$ref": "#/components/schemas/Event" } },
                "nextCursor": { "type": ["string", "null"], "description": "null on the last page." }
              }
            } } }
          },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      },
      "post": {
        "operationId": "createEvent",
        "summary": "Creates an event (admin). Attributes and the initial content-state are validated against the attribute type's schema; a wrong field answers 422 with its JSON path in 'field'.",
        "requestBody": {
          "required": true,
          "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EventInput" } } }
        },
        "responses": {
          "201": { "description": "Created.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Event" } } } },
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
    "/v1/events/{id}": {
      "get": {
        "operationId": "getEvent",
        "summary": "One event with its channel (the newest) and what became of its updates (admin).",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 1 } }],
        "responses": {
          "200": { "description": "The event.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EventDetail" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/events/{id}/state": {
      "get": {
        "operationId": "getEventState",
        "summary": "The event's latest content-state, as the app decodes it, for an app returning to the foreground (tokens or admin).",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 1 } }],
        "responses": {
          "200": { "description": "The latest state.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EventState" } } } },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" }
        }
      }
    },
    "/v1/events/{id}/updates": {
      "post": {
        "operationId": "postUpdate",
        "summary": "Ingests an update (ingest). 202 once the update, the event's latest state and its broadcast work are stored. An update older than the latest state is recorded as superseded. 409 once the event is ending or ended; 422 payload_too_large when the update payload would exceed 4096 bytes.",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 1 } }, { "name": "Idempotency-Key", "in": "header", "required": false, "description": "1 to 255 printable ASCII characters. Per API key for 24 h: the same key with the same method, path and body gets the first answer (same status and body); with another request, 422 idempotency_key_reused.", "schema": { "type": "string", "minLength": 1, "maxLength": 255 } }],
        "requestBody": {
          "required": true,
          "content": { "application/json": { "schema": { "$ref": "#/components/schemas/UpdateInput" } } }
        },
        "responses": {
          "202": { "description": "Accepted (or the stored answer of an idempotent retry).", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AcceptedUpdate" } } } },
          "400": { "$ref": "#/components/responses/Error" },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "413": { "$ref": "#/components/responses/Error" },
          "415": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" },
          "503": { "description": "event_busy: other updates kept changing the state a contentStatePatch applies to; retry.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
        }
      }
    },
    "/v1/events/{id}/end": {
      "post": {
        "operationId": "endEvent",
        "summary": "Ends the event (ingest): the end broadcast carries the final content-state (default: the latest) and the dismissal date, not before 'at'. After it only another end is accepted; 409 once ended. An event whose channel never opened (or was lost) is ended at once, its pending updates 'unsent'.",
        "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 1 } }, { "name": "Idempotency-Key", "in": "header", "required": false, "description": "1 to 255 printable ASCII characters. Per API key for 24 h: the same key with the same method, path and body gets the first answer (same status and body); with another request, 422 idempotency_key_reused.", "schema": { "type": "string", "minLength": 1, "maxLength": 255 } }],
        "requestBody": {
          "required": true,
          "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EndInput" } } }
        },
        "responses": {
          "202": { "description": "Accepted (or the stored answer of an idempotent retry).", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AcceptedUpdate" } } } },
          "400": { "$ref": "#/components/responses/Error" },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "404": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "413": { "$ref": "#/components/responses/Error" },
          "415": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" },
          "503": { "description": "event_busy: other updates kept changing the state a contentStatePatch applies to; retry.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
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
          "422": { "$ref": "#/components/responses/Error" },
          "504": { "description": "apns_timeout: APNs did not answer within serve --admin-timeout; what was done is recorded and the scheduler retries the rest.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
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
          "409": { "$ref": "#/components/responses/Error" },
          "504": { "description": "apns_timeout: APNs did not answer within serve --admin-timeout; what was done is recorded and the scheduler retries the rest.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
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
          "200": { "description": "Per app, what a reconcile would do (dryRun) or did; a real one also carries the sweep it ran in.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ReconcileReport" } } } },
          "400": { "$ref": "#/components/responses/Error" },
          "401": { "$ref": "#/components/responses/Error" },
          "403": { "$ref": "#/components/responses/Error" },
          "409": { "$ref": "#/components/responses/Error" },
          "415": { "$ref": "#/components/responses/Error" },
          "422": { "$ref": "#/components/responses/Error" },
          "503": { "$ref": "#/components/responses/Error" },
          "504": { "description": "apns_timeout: APNs did not answer within serve --admin-timeout; what was done is recorded and the scheduler retries the rest.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
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
          "409": { "$ref": "#/components/responses/Error" },
          "504": { "description": "apns_timeout: APNs did not answer within serve --admin-timeout; what was done is recorded and the scheduler retries the rest.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
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
          "opened": { "type": "array", "items": { "type": "integer" } }, "createRetries": { "type": "array", "items": { "type": "integer" } }, "createsUnknown": { "type": "array", "items": { "type": "integer" } }, "createsFailed": { "type": "array", "items": { "type": "integer" } }, "quotaRefused": { "type": "array", "items": { "type": "integer" } }, "eventsStarted": { "type": "array", "items": { "type": "integer" } }, "eventsEnded": { "type": "array", "items": { "type": "integer" } },
          "deleted": { "type": "array", "items": { "type": "integer" } }, "lost": { "type": "array", "items": { "type": "integer" } }, "unknown": { "type": "array", "items": { "type": "string" } }, "unknownDeleted": { "type": "array", "items": { "type": "string" } }
        }
      },
      "ReconcileReport": {
        "type": "object", "required": ["apps"],
        "properties": {
          "apps": { "type": "array", "items": { "type": "object", "required": ["app", "unrecorded", "unknown", "missing", "resurrected", "deleted"], "properties": {
            "app": { "type": "integer" },
            "unrecorded": { "type": "array", "items": { "type": "string" }, "description": "Apple ids no row had (recorded as unknown unless a dry run)." },
            "unknown": { "type": "array", "items": { "type": "string" }, "description": "Apple ids of unknown channels still listed." },
            "missing": { "type": "array", "items": { "type": "integer" }, "description": "Channels Apple's list lacks: flagged lost, or settled as deleted." },
            "resurrected": { "type": "array", "items": { "type": "integer" }, "description": "Channels marked deleted that Apple still lists: deleted again." },
            "deleted": { "type": "array", "items": { "type": "string" }, "description": "Unknown channels deleted (deleteUnknown, after the grace)." } } } },
          "sweep": { "$ref": "#/components/schemas/SweepReport" }
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
      },
      "EventInput": {
        "type": "object",
        "required": ["app", "externalId", "kind", "attributeType", "contentState", "startsAt"],
        "additionalProperties": false,
        "properties": {
          "app": { "type": "integer", "minimum": 1 },
          "externalId": { "type": "string", "minLength": 1, "maxLength": 200, "description": "Unique per app, e.g. epl-2026-ars-che." },
          "kind": { "type": "string", "enum": ["match", "flight", "other"] },
          "attributeType": { "type": "string", "description": "An attribute type registered for the app (POST /v1/attribute-types)." },
          "attributes": { "type": "object", "description": "The ActivityAttributes values; dates as ISO 8601 text or Unix seconds." },
          "contentState": { "type": "object", "description": "The initial ContentState. It holds from now, or from startsAt when the event already started (older updates are superseded)." },
          "startsAt": { "type": "string", "format": "date-time" },
          "endsAt": { "type": "string", "format": "date-time", "description": "After startsAt." },
          "storagePolicy": { "type": "string", "enum": ["mostRecent", "none"], "default": "mostRecent" },
          "topics": { "type": "array", "items": { "type": "string", "minLength": 1, "maxLength": 200 }, "description": "e.g. team:arsenal, flight:UA1234." }
        }
      },
      "Event": {
        "type": "object",
        "required": ["id", "app", "externalId", "kind", "attributeType", "attributes", "storagePolicy", "status", "channelLost",
                     "startsAt", "endsAt", "topics", "contentState", "contentStateAt", "createdAt", "updatedAt"],
        "properties": {
          "id": { "type": "integer" },
          "app": { "type": "integer" },
          "externalId": { "type": "string" },
          "kind": { "type": "string", "enum": ["match", "flight", "other"] },
          "attributeType": { "type": "string" },
          "attributes": { "type": "object", "description": "Stored in app form (dates as seconds since 2001-01-01)." },
          "storagePolicy": { "type": "string", "enum": ["mostRecent", "none"] },
          "status": { "type": "string", "enum": ["scheduled", "live", "ending", "ended", "cancelled"] },
          "channelLost": { "type": "boolean", "description": "APNs no longer knows the event's channel: an operator must recreate it." },
          "startsAt": { "type": "string", "format": "date-time" },
          "endsAt": { "type": ["string", "null"], "format": "date-time" },
          "topics": { "type": "array", "items": { "type": "string" } },
          "contentState": { "type": ["object", "null"], "description": "The latest state, in app form." },
          "contentStateAt": { "type": ["string", "null"], "format": "date-time" },
          "createdAt": { "type": "string", "format": "date-time" },
          "updatedAt": { "type": "string", "format": "date-time" }
        }
      },
      "EventDetail": {
        "allOf": [
          { "$ref": "#/components/schemas/Event" },
          {
            "type": "object", "required": ["channel", "counts"],
            "properties": {
              "channel": { "oneOf": [{ "$ref": "#/components/schemas/Channel" }, { "type": "null" }] },
              "counts": { "$ref": "#/components/schemas/EventCounts" }
            }
          }
        ]
      },
      "EventCounts": {
        "type": "object",
        "required": ["pending", "broadcast", "conflated", "superseded", "unsent", "deliveries", "failedDeliveries"],
        "properties": {
          "pending": { "type": "integer" },
          "broadcast": { "type": "integer" },
          "conflated": { "type": "integer", "description": "A newer state was broadcast instead." },
          "superseded": { "type": "integer", "description": "Arrived older than the latest state; never sent." },
          "unsent": { "type": "integer", "description": "The event ended while no channel could carry them (never opened, refused, or lost); never sent." },
          "deliveries": { "type": "integer" },
          "failedDeliveries": { "type": "integer" }
        }
      },
      "Channel": {
        "type": "object",
        "required": ["id", "app", "event", "apnsChannelId", "storagePolicy", "state", "attempts", "nextAttemptAt", "requestedAt", "openedAt",
                     "endedAt", "deletedAt", "firstSeenAt", "lastApsTimestamp", "lastError", "lastErrorAt", "createdAt"],
        "properties": {
          "id": { "type": "integer" },
          "app": { "type": "integer" },
          "event": { "type": ["integer", "null"] },
          "apnsChannelId": { "type": ["string", "null"] },
          "storagePolicy": { "type": "string", "enum": ["mostRecent", "none"] },
          "state": { "type": "string", "enum": ["planned", "creating", "create_unknown", "create_failed", "open", "ending", "ended", "deleting",
                                              "deleted", "lost", "unknown"] },
          "attempts": { "type": "integer" },
          "nextAttemptAt": { "type": ["string", "null"], "format": "date-time" },
          "requestedAt": { "type": ["string", "null"], "format": "date-time" },
          "openedAt": { "type": ["string", "null"], "format": "date-time" },
          "endedAt": { "type": ["string", "null"], "format": "date-time" },
          "deletedAt": { "type": ["string", "null"], "format": "date-time" },
          "firstSeenAt": { "type": ["string", "null"], "format": "date-time" },
          "lastApsTimestamp": { "type": ["integer", "null"] },
          "lastError": { "type": ["string", "null"] },
          "lastErrorAt": { "type": ["string", "null"], "format": "date-time" },
          "createdAt": { "type": "string", "format": "date-time" }
        }
      },
      "EventState": {
        "type": "object",
        "required": ["event", "contentState", "timestamp", "updatedAt", "status"],
        "properties": {
          "event": { "type": "integer" },
          "contentState": { "type": ["object", "null"], "description": "As the app's JSONDecoder reads it." },
          "timestamp": { "type": ["integer", "null"], "description": "Unix seconds of the latest state." },
          "updatedAt": { "type": ["string", "null"], "format": "date-time" },
          "status": { "type": "string", "enum": ["scheduled", "live", "ending", "ended", "cancelled"] }
        }
      },
      "AlertText": {
        "oneOf": [
          { "type": "string" },
          {
            "type": "object", "required": ["locKey"], "additionalProperties": false,
            "properties": { "locKey": { "type": "string" }, "locArgs": { "type": "array", "items": { "type": "string" } } }
          }
        ]
      },
      "Alert": {
        "type": "object", "required": ["title", "body"], "additionalProperties": false,
        "properties": {
          "title": { "$ref": "#/components/schemas/AlertText" },
          "body": { "$ref": "#/components/schemas/AlertText" },
          "sound": { "type": "string", "description": "default, or a sound file in the app bundle." }
        }
      },
      "UpdateInput": {
        "type": "object",
        "additionalProperties": false,
        "description": "Exactly one of contentState (the whole state) and contentStatePatch (an RFC 7386 JSON merge patch of the latest state, applied under the event's lock).",
        "properties": {
          "contentState": { "type": "object" },
          "contentStatePatch": { "type": "object" },
          "alert": { "$ref": "#/components/schemas/Alert" },
          "staleDate": { "type": "string", "format": "date-time" },
          "relevanceScore": { "type": "number", "minimum": 0 },
          "priority": { "type": "string", "enum": ["auto", "high", "low"], "default": "auto", "description": "auto: 10 for an alert or a significant change, else 5." },
          "occurredAt": { "type": "string", "format": "date-time", "description": "Default: the time of arrival, never before the latest state. Older than the latest state: recorded as superseded. More than serve --max-clock-skew (60 s) ahead of the server's clock: refused (422)." }
        }
      },
      "EndInput": {
        "type": "object",
        "additionalProperties": false,
        "description": "At most one of contentState and contentStatePatch; neither: the latest state.",
        "properties": {
          "contentState": { "type": "object" },
          "contentStatePatch": { "type": "object" },
          "dismissalDate": { "type": "string", "format": "date-time", "description": "When the ended activity leaves the Lock Screen." },
          "at": { "type": "string", "format": "date-time", "description": "The end broadcast is not sent before this instant." },
          "alert": { "$ref": "#/components/schemas/Alert" },
          "staleDate": { "type": "string", "format": "date-time" },
          "relevanceScore": { "type": "number", "minimum": 0 },
          "priority": { "type": "string", "enum": ["auto", "high", "low"], "default": "auto" },
          "occurredAt": { "type": "string", "format": "date-time", "description": "As for an update: refused (422) more than serve --max-clock-skew ahead." },
          "replace": { "type": "boolean", "default": false, "description": "Replace the end an ending event took already (its state, dismissal date and at); without it a second end answers 409." }
        }
      },
      "AcceptedUpdate": {
        "type": "object", "required": ["update"],
        "properties": {
          "update": {
            "type": "object", "required": ["id", "event", "action", "disposition", "occurredAt", "receivedAt"],
            "properties": {
              "id": { "type": "integer" },
              "event": { "type": "integer" },
              "action": { "type": "string", "enum": ["update", "end"] },
              "disposition": { "type": "string", "enum": ["pending", "superseded"] },
              "occurredAt": { "type": "string", "format": "date-time" },
              "receivedAt": { "type": "string", "format": "date-time" }
            }
          }
        }
      }
    }
  }
}
"""#
}
