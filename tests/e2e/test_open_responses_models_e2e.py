"""`/v1/models` and the models a response may name, driven by the official `openai` SDK
against a real stack; and a chat naming a model the demo server doesn't serve ends at once."""

from __future__ import annotations

import json
import time

import openai
import pytest
from harness import Stack, StackFactory
from openai import AsyncOpenAI
from support.names import model_name

from api.open_responses.model_catalog import PROVIDER_MODELS
from api.open_responses.model_names import ALIASES_ENV
from chatd.context import KNOWN_CONTEXT_LIMITS


def _client(stack: Stack) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=stack.key, max_retries=0)


async def test_models_are_listed_and_retrieved_through_the_sdk(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = {"provider": "anthropic", "name": "claude-haiku-4-5", "max_output_tokens": 512}
    monkeypatch.setenv(ALIASES_ENV, json.dumps({"fast": fast}))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key-of-the-gateway")
    for unset in (
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
    ):
        monkeypatch.delenv(unset, raising=False)
    async with make_stack() as stack, _client(stack) as client:
        listed = [model.to_dict() async for model in client.models.list()]
        by_id = {model["id"]: model for model in listed}
        anthropic = [f"anthropic/{name}" for name in PROVIDER_MODELS["anthropic"]]
        assert list(by_id) == ["fast", "demo/demo", *anthropic], "no OpenAI key, no OpenAI model"
        assert by_id["fast"] == {
            "id": "fast",
            "object": "model",
            "created": 0,
            "owned_by": "anthropic",
            "context_window": KNOWN_CONTEXT_LIMITS["claude-haiku-4"],
            "max_output_tokens": 512,
        }
        demo = await client.models.retrieve("demo/demo")
        assert demo.to_dict() == by_id["demo/demo"]
        assert demo.owned_by == "demo"
        assert by_id["demo/demo"]["context_window"] == KNOWN_CONTEXT_LIMITS["demo"]
        sonnet = await client.models.retrieve("anthropic/claude-sonnet-4-5")
        assert sonnet.to_dict() == by_id["anthropic/claude-sonnet-4-5"]

        for unknown in ("openai/gpt-5", "demo/p:r", "nothing"):
            with pytest.raises(openai.NotFoundError) as missing:
                await client.models.retrieve(unknown)
            body = missing.value.body
            assert isinstance(body, dict) and unknown in body["message"]
            assert (body["type"], body["param"], body["code"]) == (
                "invalid_request_error",
                "model",
                "model_not_found",
            )

        root = stack.base_url.removesuffix("/api/v1")
        async with AsyncOpenAI(base_url=f"{root}/v1", api_key="no-key", max_retries=0) as anon:
            with pytest.raises(openai.AuthenticationError):
                await anon.models.list()
            with pytest.raises(openai.AuthenticationError):
                await anon.models.retrieve("demo/demo")


async def test_a_demo_model_the_demo_server_lacks_is_refused_at_creation(stack: Stack) -> None:
    async with _client(stack) as client:
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="demo/p:r", input="hi")
        assert time.monotonic() - started < 5, "refused before any turn"
        assert refused.value.code == "model_not_found" and refused.value.param == "model"
        assert "demo/demo" in refused.value.message
        with pytest.raises(openai.BadRequestError) as fallback:
            await client.responses.create(
                model="demo/demo", input="hi", extra_body={"chatd:fallback_models": ["demo/x"]}
            )
        assert fallback.value.code == "model_not_found"
    assert await stack.pool.fetchval("SELECT count(*) FROM chats") == 0


async def test_a_chat_on_a_model_the_demo_server_lacks_ends_without_retrying(
    stack: Stack,
) -> None:
    """The native API takes any name; the demo server answers an unknown one with a 404 the
    provider classifies as final, so the turn ends at its first step."""
    name = model_name()
    chat = await stack.create_chat(model={"provider": "demo", "name": name})
    await stack.send(chat["id"], "hi")
    events = await stack.wait_status(chat["id"], "error", within_s=20)
    assert [e for e in events if e.event == "retry"] == []
    assert len(stack.fake.requests(name)) == 1
    last = (await stack.http.get(f"/chats/{chat['id']}")).json()["last_error"]
    assert (last["kind"], last["retryable"], last["status_code"]) == ("config", False, 404)
    assert last["provider"] == "demo"
