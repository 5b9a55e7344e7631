"""The served OpenAPI document states the rules the gateway enforces, and how answers lead
to the next request (links, for clients and for schemathesis' stateful run)."""

from __future__ import annotations

from typing import Any

import pytest

from api.app import GatewayConfig, create_app
from api.errors import ERROR_RESPONSES, OPENAI_ERROR_RESPONSES
from chatd.settings import TemporalSettings


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_app(GatewayConfig(database_url="postgresql://unused", temporal=TemporalSettings()))
    served: dict[str, Any] = app.openapi()
    return served


def _operation(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    operation: dict[str, Any] = document["paths"][f"/api/v1{path}"][method]
    return operation


def test_a_message_needs_content_or_parts(document: dict[str, Any]) -> None:
    for name in ("SendMessage", "EditMessage"):
        rule = document["components"]["schemas"][name]["anyOf"]
        assert rule == [
            {
                "required": ["content"],
                "properties": {"content": {"type": "string", "minLength": 1}},
            },
            {"required": ["parts"], "properties": {"parts": {"type": "array", "minItems": 1}}},
        ]


def test_file_parts_state_their_media_types_encoding_and_size(document: dict[str, Any]) -> None:
    file_part = document["components"]["schemas"]["UserFilePart"]
    assert set(file_part["required"]) == {"type", "media_type", "data"}
    assert "image/(png|jpeg|gif|webp)" in file_part["properties"]["media_type"]["pattern"]
    assert file_part["properties"]["data"]["pattern"].startswith("^(?:[A-Za-z0-9+/]{4})*")
    assert file_part["properties"]["data"]["maxLength"] > 0
    assert document["components"]["schemas"]["UserTextPart"]["required"] == ["type", "text"]


def test_invalid_input_is_documented_as_400_only(document: dict[str, Any]) -> None:
    """FastAPI's assumed 422 is gone; a 422 for a reused idempotency key is documented
    wherever a key is taken."""
    for path in document["paths"].values():
        for operation in path.values():
            takes_key = any(p["name"] == "idempotency-key" for p in operation.get("parameters", []))
            assert ("422" in operation["responses"]) == takes_key, operation["operationId"]
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_a_created_chat_links_to_its_routes(document: dict[str, Any]) -> None:
    links = _operation(document, "/chats", "post")["responses"]["201"]["links"]
    assert links["GetChat"] == {
        "operationId": _operation(document, "/chats/{chat_id}", "get")["operationId"],
        "parameters": {"chat_id": "$response.body#/id"},
    }
    assert {"SendMessage", "ListMessages", "Interrupt", "SubmitToolResults"} <= set(links)
    sent = _operation(document, "/chats/{chat_id}/messages", "post")["responses"]["202"]
    assert sent["links"]["DropQueued"]["parameters"] == {
        "chat_id": "$request.path.chat_id",
        "queued_id": "$response.body#/message_id",
    }


@pytest.mark.parametrize(
    ("prefix", "errors", "body"),
    [
        ("/api/v1/", ERROR_RESPONSES, "ErrorBody"),
        ("/v1/", OPENAI_ERROR_RESPONSES, "OpenAIErrorBody"),
    ],
)
def test_every_route_documents_its_errors(
    document: dict[str, Any], prefix: str, errors: dict[int | str, Any], body: str
) -> None:
    """Each status of its prefix's errors; a 401 (which no route declares itself) with the
    prefix's error body."""
    assert body in document["components"]["schemas"]
    operations = [
        operation
        for path, item in document["paths"].items()
        if path.startswith(prefix)
        for operation in item.values()
    ]
    assert operations
    for operation in operations:
        responses = operation["responses"]
        assert {str(status) for status in errors} <= set(responses)
        schema = responses["401"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{body}"}


def test_a_routes_own_error_description_stands(document: dict[str, Any]) -> None:
    responses = _operation(document, "/usage", "get")["responses"]
    assert responses["400"]["description"].startswith("a bad `group_by`")
