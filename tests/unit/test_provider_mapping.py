"""Provider adapters: request mapping (pure) and stream mapping over canned SSE (no server)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from chatd.models import ModelConfig
from chatd.output_format import OutputFormat
from chatd.parts import (
    FilePart,
    Message,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from chatd.providers.anthropic import ANSWER_TOOL, AnthropicProvider, build_anthropic_request
from chatd.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    StepAccumulator,
    StepFinish,
    ToolSpec,
)
from chatd.providers.openai_chat import OpenAIChatProvider, build_chat_request
from chatd.providers.openai_responses import OpenAIResponsesProvider, build_responses_request

EPHEMERAL = {"type": "ephemeral"}
TOOL = ToolSpec(
    name="lookup", description="Look it up", input_schema={"type": "object", "properties": {}}
)
SEARCH_CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "q"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [{"type": "web_search_result", "url": "https://a.test", "title": "A"}],
}


def request(messages: list[Message], **model: Any) -> ModelRequest:
    return ModelRequest(
        model=ModelConfig(provider="anthropic", name="m", **model),
        system="be brief",
        messages=messages,
        tools=[TOOL],
    )


def transcript() -> list[Message]:
    """user -> assistant (thinking, text, tool call) -> tool result -> user."""
    return [
        Message(role="user", parts=[TextPart(text="hi")]),
        Message(
            role="assistant",
            parts=[
                ReasoningPart(text="hmm", signature="sig"),
                TextPart(text="let me look"),
                ToolCallPart(id="call_1", name="lookup", arguments='{"q": 1}'),
            ],
        ),
        Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id="call_1", name="lookup", output={"answer": 42})],
        ),
        Message(role="user", parts=[TextPart(text="thanks")]),
    ]


# --- Anthropic request -----------------------------------------------------------------------


def test_anthropic_request_options_and_tools() -> None:
    kwargs = build_anthropic_request(request(transcript(), temperature=0.3, top_p=0.9))
    assert kwargs["model"] == "m"
    assert kwargs["max_tokens"] == 4096
    assert kwargs["extra_body"] == {"temperature": 0.3, "top_p": 0.9}
    assert kwargs["system"] == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert kwargs["tools"] == [
        {"name": "lookup", "description": "Look it up", "input_schema": TOOL.input_schema}
    ]
    assert "thinking" not in kwargs


def test_anthropic_thinking_raises_max_tokens_and_drops_sampling() -> None:
    kwargs = build_anthropic_request(
        request([], thinking_budget_tokens=8000, max_output_tokens=2000, temperature=0.5)
    )
    assert kwargs["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert kwargs["max_tokens"] > 8000
    assert "temperature" not in kwargs
    kept = build_anthropic_request(request([], thinking_budget_tokens=2000, max_output_tokens=9000))
    assert kept["max_tokens"] == 9000


def test_anthropic_tool_role_folds_into_alternating_user_turn() -> None:
    messages = build_anthropic_request(request(transcript()))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assistant, last = messages[1]["content"], messages[2]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    assert assistant[2] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "lookup",
        "input": {"q": 1},
        "cache_control": EPHEMERAL,
    }
    assert last[0] == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": [{"type": "text", "text": '{"answer": 42}'}],
    }
    assert last[1]["text"] == "thanks"


def test_anthropic_cache_control_on_last_two_messages_only() -> None:
    messages = build_anthropic_request(request(transcript()))["messages"]
    marked = [(i, j) for i, m in enumerate(messages) for j, b in enumerate(m["content"])]
    marked = [(i, j) for i, j in marked if "cache_control" in messages[i]["content"][j]]
    assert marked == [(1, 2), (2, 1)]


def test_anthropic_cache_control_skips_thinking_blocks() -> None:
    messages = [
        Message(role="user", parts=[TextPart(text="q")]),
        Message(
            role="assistant",
            parts=[TextPart(text="a"), ReasoningPart(text="late", signature="s")],
        ),
    ]
    out = build_anthropic_request(request(messages))["messages"]
    assert out[1]["content"][0]["cache_control"] == EPHEMERAL
    assert "cache_control" not in out[1]["content"][1]


def test_anthropic_reasoning_variants() -> None:
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    messages = [
        Message(role="user", parts=[TextPart(text="q")]),
        Message(
            role="assistant",
            parts=[
                ReasoningPart(provider_data=redacted),
                ReasoningPart(text="unsigned, from another provider"),
                TextPart(text="a"),
            ],
        ),
    ]
    content = build_anthropic_request(request(messages))["messages"][1]["content"]
    assert [b["type"] for b in content] == ["redacted_thinking", "text"]
    assert content[0] == redacted


def test_anthropic_tool_result_media_and_errors() -> None:
    messages = [
        Message(
            role="tool",
            parts=[
                ToolResultPart(tool_call_id="a", name="shot", media_type="image/png", data="AAA"),
                ToolResultPart(tool_call_id="b", name="x", output="failed", is_error=True),
            ],
        )
    ]
    content = build_anthropic_request(request(messages))["messages"][0]["content"]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
    }
    assert content[0] == {"type": "tool_result", "tool_use_id": "a", "content": [image]}
    assert content[1]["is_error"] is True
    assert content[1]["content"] == [{"type": "text", "text": "failed"}]


def test_anthropic_user_files() -> None:
    messages = [
        Message(
            role="user",
            parts=[
                FilePart(media_type="image/jpeg", data="IMG"),
                FilePart(media_type="application/pdf", data="PDF"),
                TextPart(text="what is this?"),
            ],
        )
    ]
    content = build_anthropic_request(request(messages))["messages"][0]["content"]
    assert [b["type"] for b in content] == ["image", "document", "text"]


def test_anthropic_provider_tools_round_trip_in_place() -> None:
    messages = [
        Message(role="user", parts=[TextPart(text="search")]),
        Message(
            role="assistant",
            parts=[
                ToolCallPart(
                    id="srvtoolu_1",
                    name="web_search",
                    arguments='{"query": "q"}',
                    provider_executed=True,
                    provider_data=SEARCH_CALL,
                ),
                ToolResultPart(
                    tool_call_id="srvtoolu_1",
                    name="web_search",
                    provider_executed=True,
                    provider_data=SEARCH_RESULT,
                ),
                SourcePart(url="https://a.test", title="A"),
                TextPart(text="found it"),
                ToolCallPart(
                    id="srvtoolu_2",
                    name="web_search",
                    provider_executed=True,
                    provider_data={**SEARCH_CALL, "id": "srvtoolu_2"},
                ),
            ],
        ),
    ]
    content = build_anthropic_request(request(messages))["messages"][1]["content"]
    assert [b["type"] for b in content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert content[0] == SEARCH_CALL
    assert content[1]["content"] == SEARCH_RESULT["content"]
    assert "cache_control" not in SEARCH_RESULT  # provider_data is copied, not mutated


# --- OpenAI Chat request ---------------------------------------------------------------------


def test_chat_request_mapping() -> None:
    messages = transcript()
    messages[0].parts.append(FilePart(media_type="image/png", data="IMG"))
    req = request(messages, max_output_tokens=100, reasoning_effort="low", temperature=0.2)
    kwargs = build_chat_request(req)
    assert kwargs["stream_options"] == {"include_usage": True}
    assert kwargs["max_completion_tokens"] == 100
    assert kwargs["reasoning_effort"] == "low"
    assert kwargs["temperature"] == 0.2
    assert "top_p" not in kwargs
    assert kwargs["tools"][0] == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look it up",
            "parameters": TOOL.input_schema,
        },
    }
    system, user, assistant, tool, last = kwargs["messages"]
    assert system == {"role": "system", "content": "be brief"}
    assert user["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,IMG"},
    }
    assert assistant == {
        "role": "assistant",
        "content": "let me look",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": 1}'},
            }
        ],
    }
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": '{"answer": 42}'}
    assert last == {"role": "user", "content": [{"type": "text", "text": "thanks"}]}


def test_chat_tool_role_one_message_per_result_media_after() -> None:
    messages = [
        Message(
            role="tool",
            parts=[
                ToolResultPart(tool_call_id="a", name="shot", media_type="image/png", data="IMG"),
                ToolResultPart(tool_call_id="b", name="x", output="bad", is_error=True),
            ],
        )
    ]
    out = build_chat_request(request(messages))["messages"][1:]
    assert [(m["role"], m.get("tool_call_id")) for m in out] == [
        ("tool", "a"),
        ("tool", "b"),
        ("user", None),
    ]
    assert out[1]["content"] == "Error: bad"
    assert out[2]["content"][0]["type"] == "image_url"


def test_chat_drops_reasoning_and_provider_tools() -> None:
    messages = [
        Message(
            role="assistant",
            parts=[
                ReasoningPart(text="secret", signature="s"),
                ToolCallPart(id="s1", name="web_search", provider_executed=True),
                ToolResultPart(tool_call_id="s1", name="web_search", provider_executed=True),
            ],
        )
    ]
    assert build_chat_request(request(messages))["messages"] == [
        {"role": "system", "content": "be brief"}
    ]


# --- OpenAI Responses request ----------------------------------------------------------------


def test_responses_request_mapping() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"}
    messages = transcript()
    messages[1].parts[0] = ReasoningPart(text="hmm", provider_data=reasoning)
    kwargs = build_responses_request(request(messages, reasoning_effort="high"))
    assert kwargs["instructions"] == "be brief"
    assert kwargs["reasoning"] == {"effort": "high", "summary": "auto"}
    assert kwargs["store"] is False
    assert kwargs["include"] == ["reasoning.encrypted_content"]
    assert kwargs["tools"][0]["name"] == "lookup"
    assert kwargs["tools"][0]["parameters"] == TOOL.input_schema
    assert kwargs["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        reasoning,
        {"role": "assistant", "content": "let me look"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"answer": 42}'},
        {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
    ]


def test_responses_without_reasoning_is_stored_default() -> None:
    kwargs = build_responses_request(request(transcript()))
    assert not {"reasoning", "store", "include"} & kwargs.keys()
    # Anthropic-signed reasoning is not replayable on OpenAI.
    assert all(item.get("type") != "reasoning" for item in kwargs["input"])


def test_responses_media_tool_output_and_web_search_replay() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}}
    messages = [
        Message(
            role="assistant",
            parts=[
                ToolCallPart(
                    id="ws_1", name="web_search", provider_executed=True, provider_data=search
                ),
                ToolResultPart(tool_call_id="ws_1", name="web_search", provider_executed=True),
            ],
        ),
        Message(
            role="tool",
            parts=[
                ToolResultPart(
                    tool_call_id="c", name="shot", output="ok", media_type="image/png", data="I"
                )
            ],
        ),
    ]
    items = build_responses_request(request(messages))["input"]
    assert items[0] == search
    assert items[1]["output"] == [
        {"type": "input_text", "text": "ok"},
        {"type": "input_image", "image_url": "data:image/png;base64,I", "detail": "auto"},
    ]


# --- stream mapping over canned SSE ----------------------------------------------------------

Handler = Callable[[httpx2.Request], httpx2.Response]


def sse(events: Sequence[tuple[str | None, Any]]) -> bytes:
    lines = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        body = data if isinstance(data, str) else json.dumps(data)
        lines.append(f"{head}data: {body}\n\n")
    return "".join(lines).encode()


def answer(body: bytes, seen: list[httpx2.Request]) -> Handler:
    def handle(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return handle


def http(handler: Handler) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


async def run(provider: ModelProvider, req: ModelRequest) -> tuple[StepAccumulator, StepFinish]:
    acc = StepAccumulator()
    finishes: list[StepFinish] = []
    async for event in provider.stream_step(req):
        if isinstance(event, StepFinish):
            finishes.append(event)
        else:
            assert not finishes, "deltas after StepFinish"
            acc.apply(event)
    assert len(finishes) == 1
    return acc, finishes[0]


def anthropic_provider(handler: Handler) -> AnthropicProvider:
    client = anthropic.AsyncAnthropic(
        api_key="k", base_url="http://fake.test", max_retries=0, http_client=http(handler)
    )
    return AnthropicProvider(client)


def block(index: int, content_block: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_start", {"type": "content_block_start", "index": index, **content_block})


def delta(index: int, payload: dict[str, Any]) -> tuple[str, Any]:
    return (
        "content_block_delta",
        {"type": "content_block_delta", "index": index, "delta": payload},
    )


def stop(index: int) -> tuple[str, Any]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def anthropic_events() -> list[tuple[str | None, Any]]:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5},
    }
    return [
        ("message_start", {"type": "message_start", "message": message}),
        ("ping", {"type": "ping"}),
        block(0, {"content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        delta(0, {"type": "thinking_delta", "thinking": "let me "}),
        delta(0, {"type": "thinking_delta", "thinking": "think"}),
        delta(0, {"type": "signature_delta", "signature": "SIG"}),
        stop(0),
        block(1, {"content_block": {"type": "redacted_thinking", "data": "opaque"}}),
        stop(1),
        block(2, {"content_block": {**SEARCH_CALL, "input": {}}}),
        delta(2, {"type": "input_json_delta", "partial_json": '{"query": '}),
        delta(2, {"type": "input_json_delta", "partial_json": '"q"}'}),
        stop(2),
        block(3, {"content_block": SEARCH_RESULT}),
        stop(3),
        block(4, {"content_block": {"type": "text", "text": ""}}),
        delta(4, {"type": "text_delta", "text": "Hello"}),
        delta(4, {"type": "text_delta", "text": " world"}),
        stop(4),
        block(
            5, {"content_block": {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {}}}
        ),
        delta(5, {"type": "input_json_delta", "partial_json": '{"x":'}),
        delta(5, {"type": "input_json_delta", "partial_json": " 1}"}),
        stop(5),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 42},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


async def test_anthropic_stream_mapping() -> None:
    seen: list[httpx2.Request] = []
    provider = anthropic_provider(answer(sse(anthropic_events()), seen))
    acc, finish = await run(provider, request(transcript()))
    assert finish.stop_reason == "tool_use"
    assert finish.usage.model_dump() == {
        "input_tokens": 10,
        "output_tokens": 42,
        "cache_read_tokens": 5,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
    }
    parts = acc.parts()
    assert parts[0] == ReasoningPart(text="let me think", signature="SIG")
    assert parts[1] == ReasoningPart(provider_data={"type": "redacted_thinking", "data": "opaque"})
    call = parts[2]
    assert isinstance(call, ToolCallPart) and call.provider_executed
    assert call.provider_data == SEARCH_CALL
    result = parts[3]
    assert isinstance(result, ToolResultPart) and result.provider_executed
    assert result.provider_data == SEARCH_RESULT
    assert result.name == "web_search"
    assert parts[4] == SourcePart(url="https://a.test", title="A")
    assert parts[5] == TextPart(text="Hello world")
    assert parts[6] == ToolCallPart(id="tu_1", name="lookup", arguments='{"x": 1}')
    assert acc.tool_calls() == [parts[6]]
    sent = json.loads(seen[0].content)
    assert sent["stream"] is True
    # What streamed in round-trips into the next request unchanged.
    replay = build_anthropic_request(
        request([*transcript(), Message(role="assistant", parts=parts)])
    )["messages"][-1]["content"]
    assert [b["type"] for b in replay] == [
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "text",
        "tool_use",
    ]


async def test_anthropic_request_is_what_the_sdks_create_sends() -> None:
    """The provider serializes its request's body itself (the SDK's copy of a long chat's
    messages costs more than the rest): the API must get what `messages.create` sends."""
    seen: list[httpx2.Request] = []
    provider = anthropic_provider(answer(sse(anthropic_events()), seen))
    req = request(transcript(), temperature=0.3, top_p=0.9)
    await run(provider, req)
    client = anthropic_provider(answer(sse(anthropic_events()), seen))._client
    create = client.messages.with_streaming_response.create
    async with create(**build_anthropic_request(req), stream=True):
        pass
    ours, sdks = seen
    assert (ours.method, ours.url) == (sdks.method, sdks.url)
    assert json.loads(ours.content) == json.loads(sdks.content)
    assert json.loads(ours.content)["temperature"] == 0.3, "extra_body is merged in"
    for header in ("x-api-key", "anthropic-version", "content-type", "accept", "user-agent"):
        assert ours.headers.get(header) == sdks.headers.get(header), header


async def test_anthropic_mid_stream_error_event() -> None:
    events = anthropic_events()[:5]
    events.append(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    provider = anthropic_provider(answer(sse(events), []))
    with pytest.raises(ProviderError) as caught:
        await run(provider, request([]))
    assert (caught.value.error.kind, caught.value.error.retryable) == ("overloaded", True)


async def test_anthropic_truncated_stream_is_retryable_error() -> None:
    provider = anthropic_provider(answer(sse(anthropic_events()[:8]), []))
    with pytest.raises(ProviderError) as caught:
        await run(provider, request([]))
    assert caught.value.error.retryable is True


async def test_anthropic_http_error_is_not_retried_by_sdk() -> None:
    seen: list[httpx2.Request] = []

    def handle(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
        return httpx2.Response(429, headers={"retry-after": "2"}, json=body)

    with pytest.raises(ProviderError) as caught:
        await run(anthropic_provider(handle), request([]))
    error = caught.value.error
    assert (error.kind, error.retryable, error.retry_after_ms) == ("rate_limit", True, 2000)
    assert len(seen) == 1


def openai_client(handler: Handler) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="k", base_url="http://fake.test/v1", max_retries=0, http_client=http(handler)
    )


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> tuple[None, Any]:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return (None, {**base, "choices": choices, **extra})


def tool_delta(index: int, **fields: Any) -> dict[str, Any]:
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    return {"tool_calls": [{"index": index, **fields, "function": function}]}


async def test_chat_stream_mapping() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Look"}),
        chunk({"content": "ing"}),
        chunk(tool_delta(0, id="call_a", type="function", name="lookup", arguments="")),
        chunk(tool_delta(1, id="call_b", type="function", name="other", arguments="{}")),
        chunk(tool_delta(0, arguments='{"q":')),
        chunk(tool_delta(0, arguments=" 1}")),
        chunk({}, finish="tool_calls"),
        (
            None,
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [],
                "usage": usage,
            },
        ),
        (None, "[DONE]"),
    ]
    seen: list[httpx2.Request] = []
    provider = OpenAIChatProvider(openai_client(answer(sse(events), seen)))
    acc, finish = await run(provider, request(transcript()))
    assert finish.stop_reason == "tool_use"
    assert finish.usage.model_dump() == {
        "input_tokens": 40,
        "output_tokens": 20,
        "cache_read_tokens": 60,
        "cache_write_tokens": 0,
        "reasoning_tokens": 7,
    }
    assert acc.parts() == [
        TextPart(text="Looking"),
        ToolCallPart(id="call_a", name="lookup", arguments='{"q": 1}'),
        ToolCallPart(id="call_b", name="other", arguments="{}"),
    ]
    assert json.loads(seen[0].content)["stream_options"] == {"include_usage": True}


async def test_chat_mid_stream_error() -> None:
    events = [
        chunk({"content": "hi"}),
        (None, {"error": {"message": "boom", "type": "server_error"}}),
    ]
    provider = OpenAIChatProvider(openai_client(answer(sse(events), [])))
    with pytest.raises(ProviderError) as caught:
        await run(provider, request([]))
    assert (caught.value.error.kind, caught.value.error.retryable) == ("generic", True)


def rev(event_type: str, **fields: Any) -> tuple[str, Any]:
    return (event_type, {"type": event_type, "sequence_number": 0, **fields})


def response_obj(status: str, output: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **extra,
    }


async def test_responses_stream_mapping() -> None:
    reasoning_item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"}
    done_reasoning = {**reasoning_item, "summary": [{"type": "summary_text", "text": "plan"}]}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": "",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    citation = {
        "type": "url_citation",
        "url": "https://a.test",
        "title": "A",
        "start_index": 0,
        "end_index": 2,
    }
    usage = {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 59,
    }
    events = [
        rev("response.created", response=response_obj("in_progress", [])),
        rev("response.output_item.added", output_index=0, item=reasoning_item),
        rev(
            "response.reasoning_summary_text.delta",
            output_index=0,
            item_id="rs_1",
            summary_index=0,
            delta="pl",
        ),
        rev(
            "response.reasoning_summary_text.delta",
            output_index=0,
            item_id="rs_1",
            summary_index=0,
            delta="an",
        ),
        rev("response.output_item.done", output_index=0, item=done_reasoning),
        rev("response.output_item.added", output_index=1, item=message),
        rev(
            "response.output_text.delta",
            output_index=1,
            item_id="msg_1",
            content_index=0,
            delta="Hi",
            logprobs=[],
        ),
        *[
            rev(
                "response.output_text.annotation.added",
                output_index=1,
                item_id="msg_1",
                content_index=0,
                annotation_index=n,
                annotation=citation,
            )
            for n in range(2)
        ],
        rev("response.output_item.added", output_index=2, item=call),
        rev(
            "response.function_call_arguments.delta",
            output_index=2,
            item_id="fc_1",
            delta='{"q": 1}',
        ),
        rev("response.output_item.done", output_index=2, item={**call, "arguments": '{"q": 1}'}),
        rev("response.completed", response=response_obj("completed", [], usage=usage)),
    ]
    seen: list[httpx2.Request] = []
    provider = OpenAIResponsesProvider(openai_client(answer(sse(events), seen)))
    acc, finish = await run(provider, request(transcript()))
    assert finish.stop_reason == "tool_use"
    assert (finish.usage.input_tokens, finish.usage.cache_read_tokens) == (40, 10)
    assert (finish.usage.output_tokens, finish.usage.reasoning_tokens) == (9, 4)
    parts = acc.parts()
    assert parts[0] == ReasoningPart(text="plan", provider_data=done_reasoning)
    assert parts[1] == TextPart(text="Hi")
    assert parts[2] == SourcePart(url="https://a.test", title="A")  # cited twice, listed once
    assert parts[3] == ToolCallPart(id="call_1", name="lookup", arguments='{"q": 1}')
    assert seen[0].url.path == "/v1/responses"


async def test_responses_failed_event_raises() -> None:
    error = {"code": "rate_limit_exceeded", "message": "slow down"}
    events = [rev("response.failed", response=response_obj("failed", [], error=error))]
    provider = OpenAIResponsesProvider(openai_client(answer(sse(events), [])))
    with pytest.raises(ProviderError) as caught:
        await run(provider, request([]))
    assert (caught.value.error.kind, caught.value.error.retryable) == ("rate_limit", True)
    assert caught.value.error.message == "slow down"


# --- Structured output -----------------------------------------------------------------------

ANSWER_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
STRICT = OutputFormat(type="json_schema", name="count", schema=ANSWER_SCHEMA, strict=True)


def test_each_api_is_given_the_format_in_its_own_words() -> None:
    anthropic_kwargs = build_anthropic_request(
        request(transcript(), output_format=STRICT).model_copy(
            update={"model": ModelConfig(provider="anthropic", name="claude-sonnet-4-5",
                                         output_format=STRICT)}
        )
    )  # fmt: skip
    assert anthropic_kwargs["output_config"] == {
        "format": {"type": "json_schema", "schema": ANSWER_SCHEMA}
    }
    chat = build_chat_request(request(transcript(), output_format=STRICT, verbosity="low"))
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "count", "schema": ANSWER_SCHEMA, "strict": True},
    }
    assert chat["verbosity"] == "low"
    responses = build_responses_request(request(transcript(), output_format=STRICT))
    assert responses["text"] == {
        "format": {"type": "json_schema", "name": "count", "schema": ANSWER_SCHEMA, "strict": True}
    }
    json_mode = OutputFormat(type="json_object")
    assert build_chat_request(request(transcript(), output_format=json_mode))[
        "response_format"
    ] == {"type": "json_object"}
    assert build_responses_request(request(transcript(), output_format=json_mode))["text"] == {
        "format": {"type": "json_object"}
    }


def test_an_older_claude_answers_through_a_forced_tool_without_thinking() -> None:
    model = ModelConfig(
        provider="anthropic",
        name="claude-3-7-sonnet-latest",
        output_format=STRICT,
        thinking_budget_tokens=2048,
    )
    alone = build_anthropic_request(ModelRequest(model=model, messages=transcript()[:1]))
    assert "output_config" not in alone and "thinking" not in alone
    assert alone["tools"][-1]["name"] == ANSWER_TOOL
    assert alone["tools"][-1]["input_schema"] == ANSWER_SCHEMA
    assert alone["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL}
    with_tools = build_anthropic_request(
        ModelRequest(model=model, messages=transcript()[:1], tools=[TOOL])
    )
    assert [t["name"] for t in with_tools["tools"]] == ["lookup", ANSWER_TOOL]
    assert with_tools["tool_choice"] == {"type": "any"}, "a real tool may still come first"
    plain = build_anthropic_request(
        ModelRequest(model=model.for_prose(), messages=transcript()[:1])
    )
    assert "tools" not in plain and "thinking" in plain
