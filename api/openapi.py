"""The served OpenAPI document: FastAPI's, made to say what the gateway does.

Generated clients and contract tests (schemathesis, in CI) read it, so it states the rules
the code enforces and no response the code never gives, and its links say how one answer
leads to the next request (a created chat's id to the routes of that chat).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from api.errors import ERROR_RESPONSES, OPENAI_ERROR_RESPONSES, OPENAI_PREFIX
from api.open_responses.model_names import MODEL_PATTERN

__all__ = ["openapi_document"]

_ERRORS: tuple[tuple[str, dict[int | str, dict[str, Any]]], ...] = (
    ("/api/v1/", ERROR_RESPONSES),
    (OPENAI_PREFIX, OPENAI_ERROR_RESPONSES),
)
"""The errors documented on every route under each prefix. Added to the document, not
declared on the routes: FastAPI builds a pydantic field for each response a route declares,
again for every app (each test makes one)."""
_SCHEMA_REF = "#/components/schemas/{model}"

_CHATS = "/api/v1/chats"
_CHAT = f"{_CHATS}/{{chat_id}}"
_CHAT_ID_FROM_BODY = {"chat_id": "$response.body#/id"}
_SAME_CHAT = {"chat_id": "$request.path.chat_id"}

_LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    (_CHATS, "post", "201"): {
        "GetChat": (_CHAT, "get", _CHAT_ID_FROM_BODY),
        "SendMessage": (f"{_CHAT}/messages", "post", _CHAT_ID_FROM_BODY),
        "ListMessages": (f"{_CHAT}/messages", "get", _CHAT_ID_FROM_BODY),
        "Interrupt": (f"{_CHAT}/interrupt", "post", _CHAT_ID_FROM_BODY),
        "SubmitToolResults": (f"{_CHAT}/tool-results", "post", _CHAT_ID_FROM_BODY),
    },
    (_CHATS, "get", "200"): {
        "GetChat": (_CHAT, "get", {"chat_id": "$response.body#/chats/0/id"}),
        "CreateChat": (_CHATS, "post", {}),
    },
    (f"{_CHAT}/fork", "post", "201"): {
        "GetChat": (_CHAT, "get", _CHAT_ID_FROM_BODY),
        "SendMessage": (f"{_CHAT}/messages", "post", _CHAT_ID_FROM_BODY),
        "ListMessages": (f"{_CHAT}/messages", "get", _CHAT_ID_FROM_BODY),
    },
    (f"{_CHAT}/messages", "post", "202"): {
        "GetChat": (_CHAT, "get", _SAME_CHAT),
        "ListMessages": (f"{_CHAT}/messages", "get", _SAME_CHAT),
        "DropQueued": (
            f"{_CHAT}/queue/{{queued_id}}",
            "delete",
            {**_SAME_CHAT, "queued_id": "$response.body#/message_id"},
        ),
        "Interrupt": (f"{_CHAT}/interrupt", "post", _SAME_CHAT),
    },
    (f"{_CHAT}/messages", "get", "200"): {
        "EditMessage": (
            f"{_CHAT}/messages/{{message_id}}",
            "patch",
            {**_SAME_CHAT, "message_id": "$response.body#/messages/0/id"},
        ),
    },
    (f"{_CHAT}/messages/{{message_id}}", "patch", "202"): {
        "GetChat": (_CHAT, "get", _SAME_CHAT),
        "ListMessages": (f"{_CHAT}/messages", "get", _SAME_CHAT),
    },
}
"""(path, method, status) → the operations its answer leads to, with where their
parameters come from (OpenAPI runtime expressions)."""


_STRINGS = (
    "\n\nNo string in a request may hold U+0000 (NUL): the store can't keep it, and the"
    " request is refused with a 400."
)


def openapi_document(
    app: FastAPI, mcp_servers: list[str], model_aliases: list[str]
) -> dict[str, Any]:
    """The document, built once per app; `mcp_servers` are the names a chat may select,
    `model_aliases` the operator's names for models (Open Responses' `model`)."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schema["info"]["description"] += _STRINGS
        _document_errors(schema)
        _drop_assumed_validation_errors(schema)
        _document_reused_keys(schema)
        _add_links(schema)
        _document_mcp_servers(schema, mcp_servers)
        _document_responses_fields(schema, mcp_servers, model_aliases)
        app.openapi_schema = schema
    return app.openapi_schema


def _document_errors(schema: dict[str, Any]) -> None:
    """Each route's error responses (`_ERRORS`), where the route doesn't declare its own;
    its responses then in the order of their status codes."""
    bodies = dict.fromkeys(error["model"] for _, errors in _ERRORS for error in errors.values())
    _, definitions = models_json_schema(
        [(body, "serialization") for body in bodies], ref_template=_SCHEMA_REF
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in definitions.get("$defs", {}).items():
        components.setdefault(name, definition)
    for path, operations in schema["paths"].items():
        for prefix, errors in _ERRORS:
            if not path.startswith(prefix):
                continue
            for operation in operations.values():
                responses = operation["responses"]
                for status, error in errors.items():
                    ref = _SCHEMA_REF.format(model=error["model"].__name__)
                    responses.setdefault(
                        str(status),
                        {
                            "description": error["description"],
                            "content": {"application/json": {"schema": {"$ref": ref}}},
                        },
                    )
                operation["responses"] = dict(sorted(responses.items()))


def _drop_assumed_validation_errors(schema: dict[str, Any]) -> None:
    """FastAPI documents a 422 on every route with parameters; invalid input here is a 400
    (a 422 a route declares itself, such as `idempotency_key_reused`, stays)."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if responses.get("422", {}).get("description") == "Validation Error":
                del responses["422"]
    schemas = schema.get("components", {}).get("schemas", {})
    if "#/components/schemas/HTTPValidationError" not in repr(schema.get("paths")):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _document_reused_keys(schema: dict[str, Any]) -> None:
    """An operation that takes an `Idempotency-Key` (or a message's `client_message_id`)
    answers 422 `idempotency_key_reused` when the key comes back with another body."""
    for path in schema["paths"].values():
        for operation in path.values():
            if any(p["name"] == "idempotency-key" for p in operation.get("parameters", [])):
                operation["responses"].setdefault(
                    "422",
                    {
                        "description": "Idempotency-Key (or `client_message_id`) reused with"
                        " another body",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorBody"}
                            }
                        },
                    },
                )


def _document_mcp_servers(schema: dict[str, Any], names: list[str]) -> None:
    """A chat selects only servers the operator configured: the document names them."""
    field = schema["components"]["schemas"]["CreateChat"]["properties"]["mcp_servers"]
    if names:
        field["items"] = {"type": "string", "enum": sorted(names)}
    else:
        field["maxItems"] = 0


def _document_responses_fields(
    schema: dict[str, Any], servers: list[str], aliases: list[str]
) -> None:
    """Open Responses' `model` is `<provider>/<name>` or an alias, and its MCP servers are
    the operator's: the document says which."""
    components = schema["components"]["schemas"]
    fields = components["CreateResponse"]["properties"]
    qualified = {"type": "string", "pattern": MODEL_PATTERN}
    fields["model"] = (
        {"anyOf": [qualified, {"type": "string", "enum": sorted(aliases)}]}
        if aliases
        else qualified
    )
    servers_field = fields["chatd:mcp_servers"]["anyOf"][0]
    label = components["McpTool"]["properties"]["server_label"]
    if servers:
        servers_field["items"] = {"type": "string", "enum": sorted(servers)}
        label["enum"] = sorted(servers)
    else:
        servers_field["maxItems"] = 0
        label["enum"] = []


def _add_links(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    for (path, method, status), links in _LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {
                "operationId": paths[target][target_method]["operationId"],
                "parameters": parameters,
            }
            for name, (target, target_method, parameters) in links.items()
        }
