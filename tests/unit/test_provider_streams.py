"""Each provider adapter driven against the fake provider server (real SDKs, real HTTP)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import openai
import pytest
from support.provider_steps import streamed_step

from chatd.fake_provider import (
    FakeError,
    FakeProviderServer,
    FakeReasoning,
    FakeResponse,
    FakeSearchResult,
    FakeText,
    FakeToolCall,
    FakeUsage,
    FakeWebSearch,
)
from chatd.models import ModelConfig
from chatd.output_format import OutputFormat
from chatd.parts import (
    Message,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from chatd.providers import close_clients, make_provider
from chatd.providers.anthropic import ANSWER_TOOL, AnthropicProvider
from chatd.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    ToolSpec,
)
from chatd.providers.openai_chat import OpenAIChatProvider
from chatd.providers.openai_responses import OpenAIResponsesProvider
from chatd.settings import ProviderSettings

TOOL = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
APIS = ["anthropic", "chat", "responses"]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as srv:
        yield srv


class Adapters:
    """Builds adapters on fresh SDK clients against the fake server; closes them afterwards."""

    def __init__(self, server: FakeProviderServer) -> None:
        self.server = server
        self.clients: list[anthropic.AsyncAnthropic | openai.AsyncOpenAI] = []

    def __call__(self, api: str, timeout: float | None = None) -> ModelProvider:
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        url = self.server.base_url
        if api == "anthropic":
            claude = anthropic.AsyncAnthropic(base_url=url, api_key="t", max_retries=0, **extra)
            self.clients.append(claude)
            return AnthropicProvider(claude)
        oai = openai.AsyncOpenAI(base_url=url + "/v1", api_key="t", max_retries=0, **extra)
        self.clients.append(oai)
        return OpenAIChatProvider(oai) if api == "chat" else OpenAIResponsesProvider(oai)


@pytest.fixture
async def adapter(server: FakeProviderServer) -> AsyncIterator[Adapters]:
    adapters = Adapters(server)
    yield adapters
    for client in adapters.clients:
        await client.close()
    await close_clients()


def ask(model: str, messages: list[Message] | None = None, **config: Any) -> ModelRequest:
    return ModelRequest(
        model=ModelConfig(name=model, **config),
        system="be brief",
        messages=messages or [Message(role="user", parts=[TextPart(text="weather in Paris?")])],
        tools=[TOOL],
    )


async def fails(provider: ModelProvider, request: ModelRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await streamed_step(provider, request)
    return caught.value


@pytest.mark.parametrize("api", APIS)
async def test_text_and_tool_call_then_tool_result_turn(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-tool-{api}"
    server.script(
        model,
        [
            FakeResponse(
                parts=[
                    FakeText(text="Checking the weather.", chunk_size=4),
                    FakeToolCall(name="get_weather", arguments={"city": "Paris"}, chunk_size=3),
                ],
                usage=FakeUsage(input_tokens=100, cache_read_tokens=30, output_tokens=12),
            ),
            FakeResponse.of_text("Sunny."),
        ],
    )
    provider = adapter(api)
    first = ask(model)
    parts, finish = await streamed_step(provider, first)
    assert parts[0] == TextPart(text="Checking the weather.")
    call = parts[1]
    assert isinstance(call, ToolCallPart) and call.name == "get_weather" and call.id
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert finish.stop_reason == "tool_use"
    assert finish.usage.output_tokens == 12
    assert finish.usage.cache_read_tokens == 30
    # Our input count excludes cache reads on every provider (OpenAI's includes them).
    assert finish.usage.input_tokens == (100 if api == "anthropic" else 70)

    result = ToolResultPart(tool_call_id=call.id, name=call.name, output={"sky": "clear"})
    second = ask(
        model,
        [
            *first.messages,
            Message(role="assistant", parts=parts),
            Message(role="tool", parts=[result]),
        ],
    )
    parts, finish = await streamed_step(provider, second)
    assert parts == [TextPart(text="Sunny.")]
    assert finish.stop_reason == "end_turn"
    assert server.remaining(model) == 0


async def test_anthropic_thinking_round_trips_with_signature(
    adapter: Adapters, server: FakeProviderServer
) -> None:
    model = "streams-thinking"
    server.script(
        model,
        [
            FakeResponse(
                parts=[
                    FakeReasoning(text="Paris is in France.", signature="sig-1"),
                    FakeReasoning(redacted=True, encrypted_content="opaque"),
                    FakeToolCall(name="get_weather", arguments={"city": "Paris"}),
                ]
            ),
            FakeResponse.of_text("done"),
        ],
    )
    provider = adapter("anthropic")
    first = ask(model, thinking_budget_tokens=2048)
    parts, _ = await streamed_step(provider, first)
    assert parts[0] == ReasoningPart(text="Paris is in France.", signature="sig-1")
    assert isinstance(parts[1], ReasoningPart) and parts[1].provider_data == {
        "type": "redacted_thinking",
        "data": "opaque",
    }
    call = parts[2]
    assert isinstance(call, ToolCallPart)
    result = ToolResultPart(tool_call_id=call.id, name=call.name, output="sunny")
    history = [*first.messages, Message(role="assistant", parts=parts)]
    tool_turn = Message(role="tool", parts=[result])
    await streamed_step(provider, ask(model, [*history, tool_turn], thinking_budget_tokens=2048))
    sent = server.requests(model)[-1].body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [b["type"] for b in sent["messages"][1]["content"]] == [
        "thinking",
        "redacted_thinking",
        "tool_use",
    ]
    assert sent["messages"][1]["content"][0]["signature"] == "sig-1"


@pytest.mark.parametrize("api", APIS)
async def test_sampling_options_reach_the_provider(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-sampling-{api}"
    server.script(model, [FakeResponse.of_text("ok")])
    await streamed_step(adapter(api), ask(model, temperature=0.3, top_p=0.9))
    sent = server.requests(model)[-1].body
    assert (sent["temperature"], sent["top_p"]) == (0.3, 0.9)


async def test_responses_reasoning_is_replayed_encrypted(
    adapter: Adapters, server: FakeProviderServer
) -> None:
    model = "streams-reasoning"
    server.script(
        model,
        [
            FakeResponse(
                parts=[
                    FakeReasoning(text="Think first.", encrypted_content="ENC"),
                    FakeText(text="Answer."),
                ],
                usage=FakeUsage(reasoning_tokens=5),
            ),
            FakeResponse.of_text("Again."),
        ],
    )
    provider = adapter("responses")
    first = ask(model, reasoning_effort="low")
    parts, finish = await streamed_step(provider, first)
    reasoning = parts[0]
    assert isinstance(reasoning, ReasoningPart) and reasoning.text == "Think first."
    assert reasoning.provider_data and reasoning.provider_data["encrypted_content"] == "ENC"
    assert parts[1] == TextPart(text="Answer.")
    assert finish.usage.reasoning_tokens == 5
    follow_up = Message(role="user", parts=[TextPart(text="again")])
    history = [*first.messages, Message(role="assistant", parts=parts), follow_up]
    await streamed_step(provider, ask(model, history, reasoning_effort="low"))
    sent = server.requests(model)[-1].body
    assert sent["store"] is False and sent["include"] == ["reasoning.encrypted_content"]
    assert sent["input"][1]["type"] == "reasoning"
    assert sent["input"][1]["encrypted_content"] == "ENC"


@pytest.mark.parametrize("api", ["anthropic", "responses"])
async def test_web_search_is_provider_executed(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-search-{api}"
    hits = [FakeSearchResult(url="https://a.test", title="A")]
    server.script(
        model,
        [
            FakeResponse(
                parts=[FakeWebSearch(query="paris weather", results=hits), FakeText(text="Warm.")]
            ),
            FakeResponse.of_text("ok"),
        ],
    )
    provider = adapter(api)
    first = ask(model)
    parts, finish = await streamed_step(provider, first)
    call, result = parts[0], parts[1]
    assert isinstance(call, ToolCallPart) and call.provider_executed and call.provider_data
    assert isinstance(result, ToolResultPart) and result.provider_executed
    assert result.tool_call_id == call.id
    assert SourcePart(url="https://a.test", title="A" if api == "anthropic" else None) in parts
    assert parts[-1] == TextPart(text="Warm.")
    assert finish.stop_reason == "end_turn"
    follow_up = Message(role="user", parts=[TextPart(text="more")])
    await streamed_step(
        provider, ask(model, [*first.messages, Message(role="assistant", parts=parts), follow_up])
    )


@pytest.mark.parametrize("api", APIS)
async def test_http_rate_limit(adapter: Adapters, server: FakeProviderServer, api: str) -> None:
    model = f"streams-429-{api}"
    server.script(model, [FakeResponse.of_error(FakeError.rate_limited(retry_after_s=2))])
    error = (await fails(adapter(api), ask(model))).error
    assert (error.kind, error.retryable, error.status_code) == ("rate_limit", True, 429)
    assert error.retry_after_ms == 2000
    assert len(server.requests(model)) == 1


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_openai_insufficient_quota_is_not_retryable(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-quota-{api}"
    quota = FakeError(status=429, type="insufficient_quota", code="insufficient_quota")
    server.script(model, [FakeResponse.of_error(quota)])
    error = (await fails(adapter(api), ask(model))).error
    assert (error.kind, error.retryable) == ("config", False)


@pytest.mark.parametrize("api", APIS)
async def test_mid_stream_error_event(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-midstream-{api}"
    server.script(
        model,
        [
            FakeResponse(
                parts=[FakeText(text="abcdefgh", chunk_size=2)], stream_error_after_deltas=2
            )
        ],
    )
    error = (await fails(adapter(api), ask(model))).error
    assert error.retryable is True
    assert error.kind == ("overloaded" if api == "anthropic" else "generic")


@pytest.mark.parametrize("api", APIS)
async def test_disconnect_is_retryable(
    adapter: Adapters, server: FakeProviderServer, api: str
) -> None:
    model = f"streams-disconnect-{api}"
    server.script(
        model,
        [FakeResponse(parts=[FakeText(text="abcdefgh", chunk_size=2)], disconnect_after_deltas=1)],
    )
    error = (await fails(adapter(api), ask(model))).error
    assert (error.kind, error.retryable) == ("generic", True)


@pytest.mark.parametrize("api", APIS)
async def test_hang_times_out(adapter: Adapters, server: FakeProviderServer, api: str) -> None:
    model = f"streams-hang-{api}"
    server.script(
        model, [FakeResponse(parts=[FakeText(text="abcd", chunk_size=2)], hang_after_deltas=1)]
    )
    error = (await fails(adapter(api, timeout=0.3), ask(model))).error
    assert (error.kind, error.retryable) == ("timeout", True)


async def test_demo_model_via_make_provider(adapter: Adapters, server: FakeProviderServer) -> None:
    settings = ProviderSettings(demo_base_url=server.base_url)
    provider = make_provider(ModelConfig(provider="demo", name="demo"), settings)
    hello = [Message(role="user", parts=[TextPart(text="hello")])]
    parts, finish = await streamed_step(provider, ask("demo", hello))
    assert isinstance(parts[0], TextPart) and "[demo model]" in parts[0].text
    assert finish.stop_reason == "end_turn"
    # A message that names a client tool ("weather in Paris?", get_weather) gets it called.
    parts, finish = await streamed_step(provider, ask("demo"))
    assert isinstance(parts[0], ToolCallPart) and parts[0].name == TOOL.name
    assert json.loads(parts[0].arguments or "{}") == {}  # it requires no field
    assert finish.stop_reason == "tool_use"


async def test_an_answer_tool_s_input_streams_as_the_answer_s_text(
    adapter: Adapters, server: FakeProviderServer
) -> None:
    """A Claude without structured outputs answers through a forced tool: its input is the
    step's text, and the step ends as a final answer, not a tool call."""
    model = "claude-3-5-haiku-streams"
    answer = FakeToolCall(name=ANSWER_TOOL, arguments={"n": 3}, chunk_size=2)
    server.script(model, [FakeResponse(parts=[answer])])
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    request = ModelRequest(
        model=ModelConfig(
            provider="anthropic",
            name=model,
            output_format=OutputFormat(type="json_schema", schema=schema, strict=True),
        ),
        messages=[Message(role="user", parts=[TextPart(text="count")])],
    )
    parts, finish = await streamed_step(adapter("anthropic"), request)
    assert parts == [TextPart(text='{"n": 3}')]
    assert finish.stop_reason == "end_turn"
    sent = server.requests(model)[0].body
    assert sent["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL}
