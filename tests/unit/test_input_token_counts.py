"""Each provider counts a step's input with its own token counting (`count_input_tokens`),
through its real SDK against the fake provider's counting endpoints: the same input the step
sends, the provider's count, and None (never an error) where there is no count."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from support.names import model_name
from support.provider_steps import streamed_step

from chatd.fake_provider import FakeError, FakeProviderServer, FakeResponse
from chatd.fake_provider.admission import estimate_request_tokens
from chatd.models import ModelConfig
from chatd.parts import Message, TextPart, ToolCallPart, ToolResultPart
from chatd.providers import base, close_clients, make_provider
from chatd.providers.base import ModelRequest, ToolSpec, guarded_count
from chatd.settings import ProviderSettings
from chatd.tool_use import ToolUse

TOOL = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
TRANSCRIPT = [
    Message(role="user", parts=[TextPart(text="weather in Paris?")]),
    Message(
        role="assistant",
        parts=[
            TextPart(text="Looking it up."),
            ToolCallPart(id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
        ],
    ),
    Message(
        role="tool",
        parts=[ToolResultPart(tool_call_id="call_1", name="get_weather", output="sunny")],
    ),
    Message(role="assistant", parts=[TextPart(text="It is sunny in Paris.")]),
    Message(role="user", parts=[TextPart(text="and tomorrow?")]),
]
VERTEX_GEMINI = {
    "google_api_key": None,
    "google_vertex": True,
    "google_cloud_project": "test-project",
    "google_cloud_location": "us-central1",
}


@dataclass
class Case:
    """A provider as a worker makes it, and what its count request leaves out of (or adds
    to) the step's request."""

    id: str
    provider: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    count_path: str = ""


CASES = [
    Case(
        "anthropic",
        "anthropic",
        "claude-sonnet-4-5-{}",
        {"thinking_budget_tokens": 2048, "max_output_tokens": 1000},
        count_path="/v1/messages/count_tokens",
    ),
    Case(
        "anthropic-vertex",
        "anthropic-vertex",
        "claude-sonnet-4-5@{}",
        {"thinking_budget_tokens": 2048},
        count_path="/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/"
        "count-tokens:rawPredict",
    ),
    Case(
        "openai-responses",
        "openai",
        "gpt-{}",
        {"openai_api": "responses", "reasoning_effort": "low", "max_output_tokens": 500},
        count_path="/v1/responses/input_tokens",
    ),
    Case(
        "azure-openai-responses",
        "azure-openai",
        "deployment-{}",
        {"openai_api": "responses", "temperature": 0.2},
        count_path="/openai/responses/input_tokens",
    ),
    Case(
        "gemini",
        "google",
        "gemini-{}",
        {"reasoning_effort": "low", "max_output_tokens": 500, "temperature": 0.3},
        count_path="/v1beta/models/{}:countTokens",
    ),
    Case(
        "gemini-vertex",
        "google",
        "gemini-{}",
        {"reasoning_effort": "low"},
        VERTEX_GEMINI,
        "/v1beta1/projects/test-project/locations/us-central1/publishers/google/models/"
        "{}:countTokens",
    ),
]


@pytest.fixture(autouse=True)
async def _fresh_clients() -> AsyncIterator[None]:
    yield
    await close_clients()


def _settings(server: FakeProviderServer, case: Case) -> ProviderSettings:
    return server.provider_settings().model_copy(update=case.settings)


def _request(case: Case) -> ModelRequest:
    name = case.name.format(model_name())
    return ModelRequest(
        model=ModelConfig(provider=case.provider, name=name, **case.config),
        system="be brief",
        messages=TRANSCRIPT,
        tools=[TOOL],
        tool_use=ToolUse(parallel=False),
    )


def _scripted(server: FakeProviderServer, case: Case) -> ModelRequest:
    request = _request(case)
    server.script(request.model.name, [FakeResponse.of_text("Sunny again.")])
    return request


def _without(body: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in names}


def _step_input(case: Case, step: dict[str, Any], model: str) -> dict[str, Any]:
    """The count request a step's request makes: the same input, without what only shapes
    the output."""
    if case.provider.startswith("anthropic"):
        counted = _without(step, "max_tokens", "stream", "temperature", "top_p")
        return {**counted, "model": model}  # Vertex AI names it in the count's body
    if case.provider == "google" and case.settings.get("google_vertex"):
        return {k: step[k] for k in ("contents", "systemInstruction", "tools")}
    if case.provider == "google":
        return {"generateContentRequest": {"model": f"models/{model}", **step}}
    return _without(step, "stream", "max_output_tokens", "temperature", "top_p", "store", "include")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_the_count_is_the_providers_and_counts_what_the_step_sends(
    server: FakeProviderServer, case: Case
) -> None:
    request = _scripted(server, case)
    name = request.model.name
    server.script_token_count(name, 1234)
    provider = make_provider(request.model, _settings(server, case))

    assert await provider.count_input_tokens(request) == 1234
    assert server.requests(name) == [] and server.remaining(name) == 1  # no step consumed
    await streamed_step(provider, request)

    (counted,) = server.count_requests(name)
    (step,) = server.requests(name)
    assert counted.path == case.count_path.format(name)
    assert counted.body == _step_input(case, step.body, name)


async def test_the_anthropic_count_carries_the_steps_system_tools_and_thinking(
    server: FakeProviderServer,
) -> None:
    request = _scripted(server, CASES[0])
    provider = make_provider(request.model, server.provider_settings())
    await provider.count_input_tokens(request)

    (counted,) = server.count_requests(request.model.name)
    body = counted.body
    assert body["system"][0]["text"] == "be brief"
    assert [t["name"] for t in body["tools"]] == ["get_weather"]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert "max_tokens" not in body


async def test_the_gemini_count_sends_the_whole_request_on_the_developer_api(
    server: FakeProviderServer,
) -> None:
    """The SDK's count config can't carry a system instruction or tools on the Developer API:
    the count goes as a `generateContentRequest`, without `contents` beside it."""
    request = _scripted(server, CASES[4])
    provider = make_provider(request.model, server.provider_settings())
    await provider.count_input_tokens(request)

    (counted,) = server.count_requests(request.model.name)
    assert set(counted.body) == {"generateContentRequest"}
    whole = counted.body["generateContentRequest"]
    assert whole["systemInstruction"]["parts"] == [{"text": "be brief"}]
    assert whole["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"
    assert len(whole["contents"]) == 5


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_an_unscripted_count_is_an_estimate_of_the_prompt(
    server: FakeProviderServer, case: Case
) -> None:
    request = _scripted(server, case)
    provider = make_provider(request.model, _settings(server, case))

    count = await provider.count_input_tokens(request)

    (counted,) = server.count_requests(request.model.name)
    prompt = counted.body.get("generateContentRequest", counted.body)
    assert count == estimate_request_tokens(prompt) > 0


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_a_failing_count_is_none_and_the_step_still_streams(
    server: FakeProviderServer, case: Case
) -> None:
    request = _scripted(server, case)
    name = request.model.name
    server.script_token_count(name, FakeError(status=500, message="count broke"))
    provider = make_provider(request.model, _settings(server, case))

    assert await provider.count_input_tokens(request) is None
    assert len(server.count_requests(name)) == 1
    parts, _ = await streamed_step(provider, request)
    assert parts[0] == TextPart(text="Sunny again.")


async def test_a_count_for_a_model_the_server_lacks_is_none(server: FakeProviderServer) -> None:
    request = _request(CASES[0])  # no script: the API's 404 for the model
    provider = make_provider(request.model, server.provider_settings())
    assert await provider.count_input_tokens(request) is None


@pytest.mark.parametrize(
    ("provider", "name"), [("openai", "gpt-{}"), ("azure-openai", "deployment-{}")]
)
async def test_chat_completions_has_no_count(
    server: FakeProviderServer, provider: str, name: str
) -> None:
    request = _scripted(server, Case("chat", provider, name))
    adapter = make_provider(request.model, server.provider_settings())
    assert await adapter.count_input_tokens(request) is None
    assert server.count_requests(request.model.name) == []


async def test_claude_on_bedrock_has_no_count(server: FakeProviderServer) -> None:
    """Its SDK client refuses to count ("not supported in Bedrock yet"): nothing is sent."""
    request = _scripted(server, Case("bedrock", "anthropic-bedrock", "us.anthropic.claude-{}"))
    provider = make_provider(request.model, server.provider_settings())
    assert await provider.count_input_tokens(request) is None
    assert server.count_requests(request.model.name) == []


async def test_a_chained_count_whose_response_is_gone_counts_the_whole_transcript(
    server: FakeProviderServer,
) -> None:
    """As the step does: a `previous_response_id` no longer stored is sent once more with
    the whole transcript."""
    case = Case("chain", "openai", "gpt-{}", {"openai_api": "responses", "openai_chain": True})
    request = _scripted(server, case)
    answered = TRANSCRIPT[3].model_copy(update={"response_id": "resp_gone"})
    request = request.model_copy(update={"messages": [*TRANSCRIPT[:3], answered, TRANSCRIPT[4]]})
    server.script_token_count(request.model.name, 77)
    provider = make_provider(request.model, server.provider_settings())

    assert await provider.count_input_tokens(request) == 77

    chained, whole = server.count_requests(request.model.name)
    assert chained.body["previous_response_id"] == "resp_gone"
    assert len(chained.body["input"]) == 1
    assert "previous_response_id" not in whole.body
    assert len(whole.body["input"]) > 1


async def test_a_slow_or_broken_count_is_none_but_cancellation_still_propagates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "COUNT_TIMEOUT_S", 0.05)

    async def slow() -> int:
        await asyncio.sleep(5)
        return 1

    async def broken() -> int:
        raise RuntimeError("boom")

    assert await guarded_count("p", slow()) is None
    assert await guarded_count("p", broken()) is None

    task = asyncio.ensure_future(guarded_count("p", asyncio.sleep(5, result=3)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- the fake's counting endpoints, on the wire ----------------------------------------------


async def _post(server: FakeProviderServer, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        return await client.post(path, content=json.dumps(body))


HI_ANTHROPIC = [{"role": "user", "content": "hi"}]
HI_GEMINI = [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_the_fake_answers_each_count_in_the_real_shape(server: FakeProviderServer) -> None:
    name = model_name()
    server.script(name, [])
    server.script_token_count(name, 9)

    claude = await _post(
        server, "/v1/messages/count_tokens", {"model": name, "messages": HI_ANTHROPIC}
    )
    openai = await _post(server, "/v1/responses/input_tokens", {"model": name, "input": "hi"})
    gemini = await _post(server, f"/v1beta/models/{name}:countTokens", {"contents": HI_GEMINI})

    assert claude.json() == {"input_tokens": 9}
    assert openai.json() == {"object": "response.input_tokens", "input_tokens": 9}
    assert gemini.json()["totalTokens"] == 9
    assert len(server.count_requests(name)) == 3 and server.requests(name) == []


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/v1/messages/count_tokens", {"messages": HI_ANTHROPIC}, "model: Field required"),
        ("/v1/messages/count_tokens", {"model": "MODEL", "messages": []}, "at least one message"),
        (
            "/v1/messages/count_tokens",
            {"model": "MODEL", "messages": HI_ANTHROPIC, "max_tokens": 10},
            "max_tokens: Extra inputs are not permitted",
        ),
        (
            "/v1/responses/input_tokens",
            {"model": "MODEL", "input": "hi", "max_output_tokens": 10},
            "Unknown parameter: 'max_output_tokens'.",
        ),
        ("/v1/responses/input_tokens", {"model": "MODEL", "input": []}, "'input'"),
        ("/v1beta/models/{}:countTokens", {}, "contents is not specified"),
        (
            "/v1beta/models/{}:countTokens",
            {"contents": HI_GEMINI, "generateContentRequest": {"contents": HI_GEMINI}},
            "mutually exclusive",
        ),
        (
            "/v1beta/models/{}:countTokens",
            {"generateContentRequest": {"contents": HI_GEMINI}},
            "GenerateContentRequest.model",
        ),
    ],
)
async def test_the_fake_refuses_a_count_the_real_api_would(
    server: FakeProviderServer, path: str, body: dict[str, Any], words: str
) -> None:
    name = model_name()
    server.script(name, [])
    sent = json.loads(json.dumps(body).replace("MODEL", name))
    response = await _post(server, path.format(name), sent)
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]
