"""Structured output on `/v1`: `text.format` json_schema and json_object, as the `openai`
SDK's `responses.parse` and the Agents SDK's `output_type` ask for it, mapped to each
provider's own mechanism, checked when strict, corrected once, then failed."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner
from harness import Stack
from pydantic import BaseModel

from chatd.fake_provider.script import FakeResponse, FakeText
from chatd.output_format import FORMAT_NOTE_PREFIX


class Forecast(BaseModel):
    city: str
    celsius: int
    sunny: bool
    hours: list[int]


async def _what_happened(stack: Stack, response_id: str) -> str:
    """The response's error, its chat's transcript and the demo's last requests."""
    rows = await stack.pool.fetch(
        "SELECT m.role, m.parts, m.usage, c.model FROM responses r JOIN chats c ON c.id = r.chat_id"
        " JOIN messages m ON m.chat_id = r.chat_id WHERE r.id = $1 ORDER BY m.id",
        response_id,
    )
    asked = [r.body.get("messages") for r in stack.fake.requests("demo")][-3:]
    error = await stack.pool.fetchval(
        "SELECT ended_error FROM responses WHERE id = $1", response_id
    )
    return f"error {error}\ntranscript {[dict(r) for r in rows]}\nthe demo got {asked}"


def _scripted(stack: Stack, *texts: str, provider: str = "anthropic") -> tuple[str, str]:
    """A fake model answering `texts` in turn: its `/v1` name and its own name."""
    name = stack.scripted_model(*(FakeResponse(parts=[FakeText(text=t)]) for t in texts))["name"]
    return f"{provider}/{name}", name


async def test_parse_with_the_demo_model_gives_the_schema_s_object(stack: Stack) -> None:
    """`responses.parse(text_format=...)`: the demo model answers JSON that fits, and the
    response repeats the format it was asked for."""
    async with stack.responses_client() as client:
        response = await client.responses.parse(
            model="demo/demo", input="the weather in Paris", text_format=Forecast
        )
    assert response.status == "completed", await _what_happened(stack, response.id)
    parsed = response.output_parsed
    assert isinstance(parsed, Forecast), response.output_text
    assert parsed.hours, "every property of the schema is filled"
    assert response.text.format.type == "json_schema"  # type: ignore[union-attr]
    asked = stack.fake.requests("demo")[-1].body["output_config"]["format"]
    assert asked["type"] == "json_schema"
    assert set(asked["schema"]["properties"]) == {"city", "celsius", "sunny", "hours"}


async def test_a_strict_answer_that_misses_the_schema_gets_one_correction(stack: Stack) -> None:
    good = json.dumps({"city": "Oslo", "celsius": 3, "sunny": False, "hours": [9, 10]})
    model, name = _scripted(stack, '{"city": "Oslo", "celsius": "cold"}', good)
    async with stack.responses_client() as client:
        response = await client.responses.parse(model=model, input="Oslo?", text_format=Forecast)
    assert response.status == "completed", response.error
    assert response.output_parsed == Forecast.model_validate_json(good)
    second = stack.fake.requests(name)[1].body["messages"]
    note = second[-1]["content"][-1]["text"]
    assert note.startswith(FORMAT_NOTE_PREFIX) and "celsius" in note and "sunny" in note, note


async def test_a_second_misfit_fails_the_response_with_a_clear_error(stack: Stack) -> None:
    model, name = _scripted(stack, "Sunny, 20 degrees.", '{"city": "Rome"}', "unused")
    async with stack.responses_client() as client:
        response = await client.responses.create(
            model=model,
            input="Rome?",
            text={
                "format": {
                    "type": "json_schema",
                    "name": "forecast",
                    "schema": Forecast.model_json_schema(),
                    "strict": True,
                }
            },
        )
    assert response.status == "failed"
    assert response.error is not None and response.error.code == "output_format"
    assert "required property" in response.error.message, response.error.message
    assert len(stack.fake.requests(name)) == 2, "one correction, no more"


async def test_json_object_mode_on_chat_completions_streams_text(stack: Stack) -> None:
    """`json_object` on an OpenAI model (Chat Completions: `response_format`), streamed as
    `output_text` deltas."""
    model, name = _scripted(stack, '{"answer": 42}', provider="openai")
    deltas: list[str] = []
    async with stack.responses_client() as client:
        stream = await client.responses.create(
            model=model,
            input="the answer, as JSON",
            text={"format": {"type": "json_object"}, "verbosity": "low"},
            stream=True,
        )
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type == "response.completed":
                assert event.response.text.format.type == "json_object"  # type: ignore[union-attr]
                assert event.response.text.verbosity == "low"  # type: ignore[union-attr]
    assert json.loads("".join(deltas)) == {"answer": 42}
    sent = stack.fake.requests(name)[0].body
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["verbosity"] == "low"


async def test_a_malformed_schema_is_a_400_naming_the_field(stack: Stack) -> None:
    async with stack.responses_client() as client:
        with pytest.raises(openai.BadRequestError) as bad:
            await client.responses.create(
                model="demo/demo",
                input="hi",
                text={"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}},
            )
    body: Any = bad.value.body
    assert "text.format" in body["param"] and "JSON Schema" in body["message"], body


async def test_the_agents_sdk_output_type_gets_its_object(stack: Stack) -> None:
    """The Agents SDK with `output_type`, as its docs configure it."""
    async with stack.responses_client() as client:
        agent = Agent(
            name="forecaster",
            instructions="Answer with a forecast.",
            model=OpenAIResponsesModel(model="demo/demo", openai_client=client),
            output_type=Forecast,
        )
        result = await Runner.run(agent, "the weather in Lyon")
    assert isinstance(result.final_output, Forecast)
