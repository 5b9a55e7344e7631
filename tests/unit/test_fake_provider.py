"""The fake provider speaks each wire format well enough for the real SDKs to parse it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from chatd.fake_provider import (
    CURRENT_TIME_TOOL,
    DEMO_MODEL,
    FakeError,
    FakeProviderServer,
    FakeReasoning,
    FakeRequest,
    FakeResponse,
    FakeSearchResult,
    FakeText,
    FakeToolCall,
    FakeUsage,
    FakeWebSearch,
    demo_responder,
)
from chatd.fake_provider.validation import InvalidRequest, validate

WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CHAT_WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": WEATHER_TOOL["input_schema"],
    },
}
TIME_TOOL: Any = {
    "name": CURRENT_TIME_TOOL,
    "description": "The current time",
    "input_schema": {"type": "object", "properties": {}},
}
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as srv:
        yield srv


def claude(server: FakeProviderServer, **kw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0, **kw)


def oai(server: FakeProviderServer, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test", max_retries=0, **kw)


# --- Anthropic -----------------------------------------------------------------------------


async def test_anthropic_thinking_text_and_tool_use(server: FakeProviderServer) -> None:
    server.script(
        "a-mixed",
        [
            FakeResponse(
                parts=[
                    FakeReasoning(text="Let me think about it.", signature="sig-1"),
                    FakeText(text="Hello there, world!", chunk_size=5),
                    FakeToolCall(name="get_weather", arguments={"city": "Paris"}, chunk_size=4),
                ],
                usage=FakeUsage(
                    input_tokens=12,
                    output_tokens=34,
                    cache_read_tokens=5,
                    cache_write_tokens=7,
                    reasoning_tokens=3,
                ),
            )
        ],
    )
    async with claude(server) as client:
        async with client.messages.stream(
            model="a-mixed", max_tokens=100, messages=HI, tools=[WEATHER_TOOL]
        ) as stream:
            texts = [t async for t in stream.text_stream]
            message = await stream.get_final_message()
    assert texts == ["Hello", " ther", "e, wo", "rld!"]
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me think about it."
    assert thinking.signature == "sig-1"
    assert text.type == "text" and text.text == "Hello there, world!"
    assert tool.type == "tool_use" and tool.name == "get_weather"
    assert tool.input == {"city": "Paris"} and tool.id.startswith("toolu_01")
    assert message.stop_reason == "tool_use"
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (12, 34)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (5, 7)
    assert usage.output_tokens_details is not None
    assert usage.output_tokens_details.thinking_tokens == 3
    deltas = server.deltas("a-mixed")
    assert [d.text for d in deltas] == texts
    assert all(a.emitted_ns <= b.emitted_ns for a, b in itertools.pairwise(deltas))


async def test_anthropic_redacted_thinking_and_web_search(server: FakeProviderServer) -> None:
    search = FakeWebSearch(
        query="temporal workflows", results=[FakeSearchResult(url="https://x.test/a", title="A")]
    )
    parts = [FakeReasoning(redacted=True, encrypted_content="opaque"), search, FakeText(text="ok")]
    server.script("a-search", [FakeResponse(parts=parts)])
    async with claude(server) as client:
        async with client.messages.stream(model="a-search", max_tokens=10, messages=HI) as stream:
            message = await stream.get_final_message()
    kinds = [b.type for b in message.content]
    assert kinds == ["redacted_thinking", "server_tool_use", "web_search_tool_result", "text"]
    redacted, call, result, _ = message.content
    assert redacted.type == "redacted_thinking" and redacted.data == "opaque"
    assert call.type == "server_tool_use" and call.input == {"query": "temporal workflows"}
    assert result.type == "web_search_tool_result" and result.tool_use_id == call.id
    assert isinstance(result.content, list) and result.content[0].url == "https://x.test/a"
    assert message.stop_reason == "end_turn"
    assert message.usage.server_tool_use is not None
    assert message.usage.server_tool_use.web_search_requests == 1


async def test_anthropic_tool_without_arguments_streams_empty_json(
    server: FakeProviderServer,
) -> None:
    server.script("a-noargs", [FakeResponse.of_tool_call("current_time")])
    async with claude(server) as client:
        async with client.messages.stream(model="a-noargs", max_tokens=10, messages=HI) as stream:
            partials = [e.partial_json async for e in stream if e.type == "input_json"]
            message = await stream.get_final_message()
    assert partials == [""]
    assert message.content[0].type == "tool_use" and message.content[0].input == {}


async def test_anthropic_http_errors(server: FakeProviderServer) -> None:
    server.script(
        "a-errors",
        [
            FakeResponse.of_error(FakeError.rate_limited(retry_after_s=2, retry_after_ms=1500)),
            FakeResponse.of_error(FakeError.overloaded()),
            FakeResponse.of_error(
                FakeError(status=401, type="authentication_error", message="invalid x-api-key")
            ),
        ],
    )
    async with claude(server) as client:
        with pytest.raises(anthropic.RateLimitError) as rate:
            await client.messages.create(model="a-errors", max_tokens=5, messages=HI, stream=True)
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            await client.messages.create(model="a-errors", max_tokens=5, messages=HI, stream=True)
        with pytest.raises(anthropic.AuthenticationError) as auth:
            await client.messages.create(model="a-errors", max_tokens=5, messages=HI, stream=True)
    assert rate.value.status_code == 429 and rate.value.type == "rate_limit_error"
    assert rate.value.response.headers["retry-after"] == "2"
    assert rate.value.response.headers["retry-after-ms"] == "1500"
    assert rate.value.request_id is not None
    assert overloaded.value.status_code == 529 and overloaded.value.type == "overloaded_error"
    assert auth.value.api_message == "invalid x-api-key"


async def test_anthropic_mid_stream_error(server: FakeProviderServer) -> None:
    response = FakeResponse(
        parts=[FakeText(text="abcdefghij", chunk_size=2)], stream_error_after_deltas=2
    )
    server.script("a-midstream", [response])
    received: list[str] = []
    async with claude(server) as client:
        with pytest.raises(anthropic.APIStatusError) as err:
            async with client.messages.stream(
                model="a-midstream", max_tokens=10, messages=HI
            ) as stream:
                async for text in stream.text_stream:
                    received.append(text)
    assert received == ["ab", "cd"]
    assert err.value.type == "overloaded_error"
    assert isinstance(err.value.body, dict) and err.value.body["error"]["message"] == "Overloaded"


async def test_anthropic_validation_rejects_tool_call_without_result(
    server: FakeProviderServer,
) -> None:
    messages: Any = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {"role": "user", "content": "never mind"},
    ]
    async with claude(server) as client:
        with pytest.raises(anthropic.BadRequestError) as err:
            await client.messages.create(
                model="a-invalid", max_tokens=5, messages=messages, stream=True
            )
    assert err.value.type == "invalid_request_error"
    assert "`tool_use` ids were found without `tool_result`" in str(err.value.api_message)
    assert "toolu_1" in str(err.value.api_message)


async def test_recorded_requests(server: FakeProviderServer) -> None:
    server.script("a-record", [FakeResponse.of_text("ok")])
    system: Any = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    async with claude(server) as client:
        async with client.messages.stream(
            model="a-record", max_tokens=10, system=system, messages=HI
        ) as stream:
            await stream.get_final_message()
    [request] = server.requests("a-record")
    assert (request.api, request.path, request.model) == ("anthropic", "/v1/messages", "a-record")
    assert request.headers["authorization"] == "Bearer test"  # this SDK sends a bearer token
    assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert request.body["messages"] == HI and request.body["stream"] is True
    assert server.remaining("a-record") == 0


async def test_exhausted_script_is_a_clear_500(server: FakeProviderServer) -> None:
    server.script("a-empty", [])
    async with claude(server) as client:
        with pytest.raises(anthropic.InternalServerError) as err:
            await client.messages.create(model="a-empty", max_tokens=5, messages=HI, stream=True)
    assert "exhausted" in str(err.value.api_message)


async def test_disconnect_hang_and_first_byte_delay(server: FakeProviderServer) -> None:
    text = FakeText(text="abcdef", chunk_size=2)
    server.script(
        "a-faults",
        [
            FakeResponse(parts=[text], disconnect_after_deltas=1),
            FakeResponse(parts=[text], hang_after_deltas=1),
            FakeResponse(parts=[text], first_byte_delay_s=10),
        ],
    )
    received: list[str] = []
    # The timeout must also cover the phases that are meant to succeed on a loaded machine.
    async with claude(server, timeout=2.0) as client:
        # A body cut short, then one that stops: the transport's errors, which anthropic 2.17
        # wraps as its own (a connection error, a timeout).
        with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as cut:
            async with client.messages.stream(model="a-faults", max_tokens=5, messages=HI) as s:
                async for t in s.text_stream:
                    received.append(t)
        assert "incomplete chunked read" in str(cut.value)
        with pytest.raises((httpx2.ReadTimeout, anthropic.APITimeoutError)):
            async with client.messages.stream(model="a-faults", max_tokens=5, messages=HI) as s:
                async for t in s.text_stream:
                    received.append(t)
        with pytest.raises(anthropic.APITimeoutError):
            async with client.messages.stream(model="a-faults", max_tokens=5, messages=HI) as s:
                await s.get_final_message()
    assert received == ["ab", "ab"]


# --- OpenAI Chat Completions ---------------------------------------------------------------


async def test_chat_stream_text_and_tool_call_fragments(server: FakeProviderServer) -> None:
    parts = [
        FakeText(text="Checking both.", chunk_size=4),
        FakeToolCall(name="get_weather", arguments={"city": "Paris"}, chunk_size=5),
        FakeToolCall(name="get_weather", arguments='{"city": "Oslo"}', id="call_given"),
    ]
    usage = FakeUsage(input_tokens=50, output_tokens=9, cache_read_tokens=20)
    server.script("c-tools", [FakeResponse(parts=parts, usage=usage)])
    content, calls, finish, last = "", dict[int, dict[str, str]](), None, None
    async with oai(server) as client:
        stream = await client.chat.completions.create(
            model="c-tools",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[CHAT_WEATHER_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            last = chunk
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                for frag in choice.delta.tool_calls or []:
                    call = calls.setdefault(frag.index, {"id": "", "name": "", "args": ""})
                    call["id"] += frag.id or ""
                    call["name"] += frag.function.name or "" if frag.function else ""
                    call["args"] += frag.function.arguments or "" if frag.function else ""
    assert content == "Checking both."
    assert finish == "tool_calls"
    assert [json.loads(c["args"]) for c in calls.values()] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert calls[0]["id"].startswith("call_") and calls[1]["id"] == "call_given"
    assert {c["name"] for c in calls.values()} == {"get_weather"}
    assert last is not None and last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (50, 9)
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == 20


async def test_chat_stream_helper_and_errors(server: FakeProviderServer) -> None:
    quota = FakeError(
        status=429,
        type="insufficient_quota",
        code="insufficient_quota",
        message="You exceeded your current quota",
        headers={"retry-after-ms": "250"},
    )
    context = FakeError(
        status=400,
        type="invalid_request_error",
        code="context_length_exceeded",
        message="maximum context length",
        param="messages",
    )
    midstream = FakeResponse(
        parts=[FakeText(text="abcd", chunk_size=1)], stream_error_after_deltas=1
    )
    server.script(
        "c-helper",
        [
            FakeResponse.of_text("hello world"),
            FakeResponse.of_error(quota),
            FakeResponse.of_error(context),
            midstream,
        ],
    )
    msgs: Any = [{"role": "user", "content": "hi"}]
    async with oai(server) as client:
        async with client.chat.completions.stream(model="c-helper", messages=msgs) as stream:
            final = await stream.get_final_completion()
        with pytest.raises(openai.RateLimitError) as rate:
            await client.chat.completions.create(model="c-helper", messages=msgs, stream=True)
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model="c-helper", messages=msgs, stream=True)
        with pytest.raises(openai.APIError) as mid:
            stream2 = await client.chat.completions.create(
                model="c-helper", messages=msgs, stream=True
            )
            _ = [chunk async for chunk in stream2]
    assert final.choices[0].message.content == "hello world"
    assert final.choices[0].finish_reason == "stop"
    assert rate.value.code == "insufficient_quota" and rate.value.type == "insufficient_quota"
    assert rate.value.response.headers["retry-after-ms"] == "250"
    assert bad.value.code == "context_length_exceeded" and bad.value.param == "messages"
    assert "Overloaded" in mid.value.message


async def test_chat_validation_rejects_unanswered_tool_call(server: FakeProviderServer) -> None:
    messages: Any = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "hello?"},
    ]
    async with oai(server) as client:
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="c-invalid", messages=messages, stream=True)
    assert "did not have response messages: call_1" in err.value.message


# --- OpenAI Responses ----------------------------------------------------------------------


async def test_responses_stream_reasoning_text_and_function_call(
    server: FakeProviderServer,
) -> None:
    parts = [
        FakeReasoning(text="thinking hard", encrypted_content="enc-1"),
        FakeText(text="Let me look that up.", chunk_size=6),
        FakeToolCall(name="lookup", arguments={"q": "x"}, chunk_size=3),
        FakeWebSearch(query="news", results=[FakeSearchResult(url="https://n.test")]),
    ]
    usage = FakeUsage(input_tokens=40, output_tokens=8, cache_read_tokens=30, reasoning_tokens=5)
    server.script("r-mixed", [FakeResponse(parts=parts, usage=usage)])
    tool: Any = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": False,
    }
    async with oai(server) as client:
        async with client.responses.stream(
            model="r-mixed", input="hi", tools=[tool], include=["reasoning.encrypted_content"]
        ) as stream:
            events = [event async for event in stream]
            final = await stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Let me", " look ", "that u", "p."]
    kinds = [item.type for item in final.output]
    assert kinds == ["reasoning", "message", "function_call", "web_search_call"]
    reasoning, _, call, search = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content == "enc-1"
    assert reasoning.summary[0].text == "thinking hard"
    assert final.output_text == "Let me look that up."
    assert call.type == "function_call" and json.loads(call.arguments) == {"q": "x"}
    assert call.call_id.startswith("call_") and call.name == "lookup"
    assert search.type == "web_search_call" and search.status == "completed"
    assert final.status == "completed" and final.usage is not None
    assert final.usage.input_tokens_details.cached_tokens == 30
    assert final.usage.output_tokens_details.reasoning_tokens == 5


async def test_responses_mid_stream_failure_and_validation(server: FakeProviderServer) -> None:
    failing = FakeResponse(
        parts=[FakeText(text="abcdef", chunk_size=2)],
        stream_error_after_deltas=1,
        stream_error=FakeError(code="server_error", message="boom"),
    )
    server.script("r-fail", [failing])
    bad_input: Any = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": "{}"},
    ]
    async with oai(server) as client:
        stream = await client.responses.create(model="r-fail", input="hi", stream=True)
        events = [event async for event in stream]
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(model="r-fail", input=bad_input, stream=True)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    failed = events[-1]
    assert failed.type == "response.failed" and failed.response.error is not None
    assert failed.response.error.message == "boom"
    assert "No tool output found for function call call_9" in err.value.message


# --- Demo model and validation rules -------------------------------------------------------


async def test_demo_model_calls_current_time_then_answers(server: FakeProviderServer) -> None:
    ask: list[Any] = [{"role": "user", "content": "What time is it?"}]
    async with claude(server) as client:
        async with client.messages.stream(
            model=DEMO_MODEL, max_tokens=100, messages=ask, tools=[TIME_TOOL]
        ) as stream:
            first = await stream.get_final_message()
        [call] = first.content
        assert call.type == "tool_use" and call.name == CURRENT_TIME_TOOL
        assert first.stop_reason == "tool_use"
        follow_up = [
            *ask,
            {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "12:34 UTC"}
                ],
            },
        ]
        async with client.messages.stream(
            model=DEMO_MODEL, max_tokens=100, messages=follow_up, tools=[TIME_TOOL]
        ) as stream:
            chunks = [t async for t in stream.text_stream]
            answer = await stream.get_final_message()
    text = "".join(chunks)
    assert text.startswith("[demo model]") and "12:34 UTC" in text
    assert len(chunks) > 1 and answer.stop_reason == "end_turn"


def _demo(api: Any, body: dict[str, Any]) -> FakeResponse:
    return demo_responder(FakeRequest(api=api, path="/", model="demo", headers={}, body=body))


def test_demo_echoes_and_works_on_openai_formats() -> None:
    echo = _demo("anthropic", {"messages": [{"role": "user", "content": "hello there"}]})
    assert isinstance(echo.parts[0], FakeText) and "hello there" in echo.parts[0].text
    assert echo.parts[0].text.startswith("[demo model]") and echo.delta_delay_s > 0
    chat_tools = [{"type": "function", "function": {"name": CURRENT_TIME_TOOL}}]
    chat = _demo(
        "openai_chat", {"messages": [{"role": "user", "content": "time?"}], "tools": chat_tools}
    )
    assert isinstance(chat.parts[0], FakeToolCall) and chat.resolved_stop_reason() == "tool_use"
    items = [
        {"role": "user", "content": "what is the time"},
        {"type": "function_call", "call_id": "c1", "name": CURRENT_TIME_TOOL, "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "noon"},
    ]
    answer = _demo("openai_responses", {"input": items, "tools": [{"name": CURRENT_TIME_TOOL}]})
    assert isinstance(answer.parts[0], FakeText) and "noon" in answer.parts[0].text


@pytest.mark.parametrize(
    ("api", "body", "fragment"),
    [
        ("anthropic", {"max_tokens": 5, "messages": HI}, "model"),
        ("anthropic", {"model": "m", "max_tokens": 5, "messages": []}, "at least one message"),
        ("anthropic", {"model": "m", "messages": HI}, "max_tokens"),
        (
            "anthropic",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": "x"}]},
            "first message",
        ),
        ("anthropic", {"model": "m", "max_tokens": 5, "messages": HI + HI}, "alternate"),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    *HI,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "here"},
                            {"type": "tool_result", "tool_use_id": "t1", "content": "r"},
                        ],
                    },
                ],
            },
            "must come first",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    *HI,
                    {"role": "assistant", "content": "ok"},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "r"}],
                    },
                ],
            },
            "unexpected `tool_use_id`",
        ),
        ("openai_chat", {"model": "m", "messages": []}, "too short"),
        (
            "openai_chat",
            {
                "model": "m",
                "messages": [*HI, {"role": "tool", "tool_call_id": "x", "content": "r"}],
            },
            "must be a response to a preceeding message",
        ),
        (
            "openai_responses",
            {
                "model": "m",
                "input": [{"type": "function_call_output", "call_id": "c", "output": ""}],
            },
            "No tool call found",
        ),
    ],
)
def test_validation_rules(api: Any, body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate(api, body)
    assert fragment in err.value.message


def test_validation_accepts_answered_tool_calls() -> None:
    validate(
        "openai_chat",
        {
            "model": "m",
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "r"},
                {"role": "user", "content": "thanks"},
            ],
        },
    )
    validate("openai_responses", {"model": "m", "input": "hi"})
