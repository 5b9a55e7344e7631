"""`POST /v1/responses/compact` through the `openai` SDK: the summary comes back sealed,
stands for the conversation when given as input, and is refused when altered or when it was
made for another owner."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from harness import Stack
from openai import AsyncOpenAI

from chatd.context import SUMMARY_PREAMBLE
from chatd.fake_provider.script import FakeResponse, FakeText

SUMMARY = "The user and the assistant agreed on the code word slate."


def _client(stack: Stack, key: str | None = None) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=key or stack.key, max_retries=0)


def _text(text: str) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text, chunk_size=8)])


def _sent_text(stack: Stack, name: str, index: int) -> str:
    body = stack.fake.requests(name)[index].body
    return str(body.get("system", "")) + str(body["messages"])


async def test_a_compacted_conversation_continues_from_its_summary_alone(stack: Stack) -> None:
    scripted = stack.scripted_model(_text("Noted: slate."), _text(SUMMARY), _text("slate"))
    name = scripted["name"]
    model = f"anthropic/{name}"
    async with _client(stack) as client:
        first = await client.responses.create(model=model, input="The code word is slate.")
        compacted = await client.responses.compact(model=model, previous_response_id=first.id)
        assert compacted.object == "response.compaction"
        (item,) = compacted.output
        assert item.type == "compaction"
        sealed = item.encrypted_content  # type: ignore[union-attr]
        assert SUMMARY not in sealed and "slate" not in sealed, "opaque to the client"
        assert compacted.usage is not None and compacted.usage.output_tokens > 0
        summary_request = _sent_text(stack, name, 1)
        assert "The code word is slate." in summary_request and "Noted: slate." in summary_request
        answer = await client.responses.create(
            model=model,
            input=[
                {"type": "compaction", "id": item.id, "encrypted_content": sealed},  # type: ignore[list-item]
                {"role": "user", "content": "What is the code word?"},
            ],
        )
        assert answer.status == "completed" and answer.output_text == "slate"
    continued = _sent_text(stack, name, 2)
    assert SUMMARY_PREAMBLE in continued and SUMMARY in continued
    assert "The code word is slate." not in continued and "Noted: slate." not in continued


async def test_inline_input_is_compacted_and_a_changed_item_is_refused(stack: Stack) -> None:
    scripted = stack.scripted_model(_text(SUMMARY))
    model = f"anthropic/{scripted['name']}"
    conversation: list[Any] = [
        {"role": "user", "content": "Remember slate."},
        {"role": "assistant", "content": "OK."},
    ]
    async with _client(stack) as client:
        compacted = await client.responses.compact(model=model, input=conversation)
        sealed: str = compacted.output[0].encrypted_content  # type: ignore[union-attr]
        flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
        for altered in (flipped, sealed + "x", "cmp1.server.", "plain text"):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(
                    model=model,
                    input=[
                        {"type": "compaction", "encrypted_content": altered},  # type: ignore[list-item]
                        {"role": "user", "content": "go on"},
                    ],
                )
            assert refused.value.status_code == 400
            assert "encrypted_content" in refused.value.message
    other_key = stack.other_owner.headers["authorization"].removeprefix("Bearer ")
    async with _client(stack, other_key) as other:
        with pytest.raises(openai.BadRequestError):
            await other.responses.create(
                model=model,
                input=[
                    {"type": "compaction", "encrypted_content": sealed},  # type: ignore[list-item]
                    {"role": "user", "content": "go on"},
                ],
            )


async def test_a_compaction_needs_a_model_and_something_to_compact(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    for body, param in (({"input": "hi"}, "model"), ({"model": "demo/demo"}, None)):
        response = await stack.http.post(f"{root}/v1/responses/compact", json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        if param:
            assert error["param"] == param
