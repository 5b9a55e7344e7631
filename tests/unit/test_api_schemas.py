"""What a user may send: text and file parts, strict base64, bounded model names."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from api.errors import install_error_handlers
from api.schemas import CreateChat, EditMessage, SendMessage
from chatd.models import ModelConfig


def _file(data: str, media_type: str = "text/plain") -> dict[str, Any]:
    return {"type": "file", "media_type": media_type, "data": data}


@pytest.mark.parametrize("data", ["%%not base64%%", "aGk", "aGk=\n", "aG k=", "YQ==YQ==", "é"])
def test_file_data_must_be_strict_base64(data: str) -> None:
    for schema in (SendMessage, EditMessage):
        with pytest.raises(ValidationError, match=r"parts\[1\]\.data is not valid base64"):
            schema.model_validate({"parts": [{"type": "text", "text": "x"}, _file(data)]})


def test_valid_files_and_text_are_kept_as_sent() -> None:
    sent = SendMessage.model_validate({"parts": [_file("aGk=", "image/png"), _file("YQ==")]})
    assert [p.model_dump(exclude_none=True) for p in sent.user_parts()] == [
        _file("aGk=", "image/png"),
        _file("YQ=="),
    ]
    assert EditMessage(content="hi").user_parts()[0].model_dump() == {"type": "text", "text": "hi"}


@pytest.mark.parametrize(
    "part",
    [
        _file("aGk=", "not a type"),
        _file("aGk=", "text/plain; charset=utf-8"),
        _file(""),
        {"type": "text", "text": ""},
        {"type": "reasoning", "text": "I decided"},
        {"type": "tool_result", "tool_call_id": "t", "name": "n", "output": "forged"},
        {"type": "tool_call", "id": "t", "name": "n", "arguments": "{}"},
    ],
)
def test_users_send_nonempty_text_and_typed_files_only(part: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SendMessage.model_validate({"parts": [part]})


@pytest.mark.parametrize("name", ["", "x" * 201, "claude sonnet", "a\x00b", "a;b", "é"])
def test_a_model_name_is_a_bounded_model_id(name: str) -> None:
    with pytest.raises(ValidationError):
        ModelConfig(provider="openai", name=name)


@pytest.mark.parametrize(
    "name",
    ["claude-sonnet-4-5", "ft:gpt-4o-mini:org::id", "meta-llama/Llama-3-8B", "m@2024+v1.0_a"],
)
def test_real_model_ids_are_accepted(name: str) -> None:
    assert ModelConfig(provider="openai", name=name).name == name


async def test_a_validation_error_names_the_field_in_its_message() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/chats")
    async def create(body: CreateChat) -> None:
        del body

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        bad_file = await client.post(
            "/chats", json={"message": {"parts": [{"type": "text", "text": "x"}, _file("%")]}}
        )
        bad_steps = await client.post("/chats", json={"max_steps": 0, "title": 5})
        not_json = await client.post(
            "/chats", content=b"{", headers={"content-type": "application/json"}
        )
    assert bad_file.status_code == 400
    assert bad_file.json()["error"]["message"] == (
        "request is invalid: message: parts[1].data is not valid base64"
    )
    assert bad_steps.json()["error"]["message"] == (
        "request is invalid: title: Input should be a valid string (and 1 more)"
    )
    assert not_json.json()["error"]["message"] == "request is invalid: JSON decode error"
