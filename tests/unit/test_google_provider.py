"""The Gemini adapter driven through the real `google-genai` SDK against the fake provider's
Gemini wire (`:streamGenerateContent?alt=sse`), as a worker makes it (`make_provider`)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google import genai
from google.genai import types
from support.names import model_name
from support.provider_steps import streamed_step

from chatd.context import reported_context_limit
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
from chatd.fake_provider.gemini_wire import validate_gemini
from chatd.fake_provider.shapes import InvalidRequest
from chatd.models import ModelConfig, WebSearchConfig
from chatd.output_format import OutputFormat
from chatd.parts import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from chatd.providers import close_clients, make_provider
from chatd.providers.base import (
    LEADING_USER_TEXT,
    ModelRequest,
    ProviderError,
    StepFinish,
    ToolSpec,
)
from chatd.providers.google import SIGNATURE, build_contents
from chatd.settings import ProviderSettings

TOOL = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
HI = [Message(role="user", parts=[TextPart(text="hi")])]


def _answer(name: str) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": "ok"}}}


@pytest.fixture(autouse=True)
async def _fresh_clients() -> AsyncIterator[None]:
    yield
    await close_clients()


def _model(server: FakeProviderServer, *responses: FakeResponse, **config: Any) -> ModelConfig:
    name = f"gemini-{model_name()}"
    server.script(name, list(responses))
    return ModelConfig(provider="google", name=name, **config)


async def _step(
    server: FakeProviderServer,
    model: ModelConfig,
    messages: list[Message],
    settings: ProviderSettings | None = None,
    **request: Any,
) -> tuple[list[Part], StepFinish]:
    provider = make_provider(model, settings or server.provider_settings())
    return await streamed_step(provider, ModelRequest(model=model, messages=messages, **request))


async def test_text_and_thoughts_stream_and_the_signature_goes_back(
    server: FakeProviderServer,
) -> None:
    model = _model(
        server,
        FakeResponse(
            parts=[FakeReasoning(text="Planning the greeting."), FakeText(text="Hello world!")],
            usage=FakeUsage(input_tokens=12, cache_read_tokens=4, reasoning_tokens=30),
        ),
        FakeResponse.of_text("again"),
        reasoning_effort="low",
        max_output_tokens=500,
        temperature=0.3,
    )
    parts, finish = await _step(server, model, HI, system="be brief")

    thought, text, signed = parts
    assert thought == ReasoningPart(text="Planning the greeting.")
    assert text == TextPart(text="Hello world!")
    assert isinstance(signed, ReasoningPart) and signed.text == ""
    assert signed.provider_data is not None and signed.provider_data["type"] == SIGNATURE
    assert finish.stop_reason == "end_turn"
    assert (finish.usage.input_tokens, finish.usage.cache_read_tokens) == (12, 4)
    assert finish.usage.reasoning_tokens == 30

    (sent,) = server.requests(model.name)
    assert sent.path == f"/v1beta/models/{model.name}:streamGenerateContent"
    assert sent.headers["x-goog-api-key"] == "test-google-key"
    config = sent.body["generationConfig"]
    assert config["maxOutputTokens"] == 500 and config["temperature"] == 0.3
    assert config["thinkingConfig"] == {"thinking_budget": 1024, "include_thoughts": True}
    assert sent.body["systemInstruction"]["parts"] == [{"text": "be brief"}]

    history = [*HI, Message(role="assistant", parts=parts), *HI]
    await _step(server, model, history)
    replayed = server.requests(model.name)[1].body["contents"][1]
    assert replayed["role"] == "model"
    # The thought summary stays home; the signature goes back after the text it followed.
    assert [p.get("text") for p in replayed["parts"]] == ["Hello world!", ""]
    assert _decoded(replayed["parts"][1]["thoughtSignature"]) == _decoded(
        signed.provider_data["thought_signature"]
    )


async def test_parallel_calls_keep_their_signature_and_gemini_s_ids_only(
    server: FakeProviderServer,
) -> None:
    model = _model(
        server,
        FakeResponse(
            parts=[
                FakeToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_gem_1"),
                FakeToolCall(name="get_weather", arguments={"city": "Oslo"}, id=""),
            ]
        ),
        FakeResponse.of_text("Sunny in Paris, snow in Oslo."),
    )
    parts, finish = await _step(server, model, HI, tools=[TOOL])
    first, second = parts
    assert isinstance(first, ToolCallPart) and isinstance(second, ToolCallPart)
    assert finish.stop_reason == "tool_use"
    assert (first.id, first.arguments) == ("call_gem_1", '{"city": "Paris"}')
    assert second.id.startswith("call_") and second.arguments == '{"city": "Oslo"}'
    assert first.provider_data and first.provider_data.get("thought_signature")
    assert second.provider_data == {"gemini_id": False}

    results = [
        ToolResultPart(tool_call_id=first.id, name="get_weather", output={"sky": "sunny"}),
        ToolResultPart(tool_call_id=second.id, name="get_weather", output="boom", is_error=True),
    ]
    history = [*HI, Message(role="assistant", parts=parts), Message(role="tool", parts=results)]
    parts, finish = await _step(server, model, history, tools=[TOOL])
    assert parts == [TextPart(text="Sunny in Paris, snow in Oslo."), parts[1]]

    body = server.requests(model.name)[1].body
    calls = body["contents"][1]["parts"]
    assert calls[0]["functionCall"] == {
        "id": "call_gem_1",
        "name": "get_weather",
        "args": {"city": "Paris"},
    }
    assert "thoughtSignature" in calls[0] and "thoughtSignature" not in calls[1]
    assert "id" not in calls[1]["functionCall"], "an id of ours is never sent"
    answers = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert answers == [
        {"id": "call_gem_1", "name": "get_weather", "response": {"output": {"sky": "sunny"}}},
        {"name": "get_weather", "response": {"error": "boom"}},
    ]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


async def test_a_search_is_a_web_search_call_with_its_sources(server: FakeProviderServer) -> None:
    found = [FakeSearchResult(url="https://weather.example/paris", title="Paris weather")]
    model = _model(
        server,
        FakeResponse(
            parts=[FakeText(text="Sunny."), FakeWebSearch(query="paris weather", results=found)]
        ),
        web_search=WebSearchConfig(),
    )
    parts, _ = await _step(server, model, HI)
    calls = [p for p in parts if isinstance(p, ToolCallPart)]
    results = [p for p in parts if isinstance(p, ToolResultPart)]
    assert [(c.name, c.provider_executed, c.arguments) for c in calls] == [
        ("web_search", True, '{"query": "paris weather"}')
    ]
    assert results[0].output == [{"url": "https://weather.example/paris", "title": "Paris weather"}]
    assert SourcePart(url="https://weather.example/paris", title="Paris weather") in parts
    assert server.requests(model.name)[0].body["tools"] == [{"googleSearch": {}}]


async def test_structured_output_asks_for_json_of_the_schema(server: FakeProviderServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    answer = OutputFormat(type="json_schema", schema=schema)
    model = _model(server, FakeResponse.of_text('{"city": "Paris"}'), output_format=answer)
    parts, _ = await _step(server, model, HI)
    assert parts[0] == TextPart(text='{"city": "Paris"}')
    config = server.requests(model.name)[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema


@pytest.mark.parametrize(
    ("error", "kind", "retryable", "retry_after_ms"),
    [
        (FakeError.rate_limited(retry_after_s=7), "rate_limit", True, 7000),
        (FakeError(status=503, message="The model is overloaded."), "overloaded", True, None),
        (FakeError(status=400, message="Invalid JSON payload"), "invalid_request", False, None),
        (FakeError(status=403, message="API key not valid"), "auth", False, None),
    ],
)
async def test_errors_are_classified_from_google_s_envelope(
    server: FakeProviderServer, error: FakeError, kind: str, retryable: bool, retry_after_ms: int
) -> None:
    model = _model(server, FakeResponse.of_error(error))
    with pytest.raises(ProviderError) as raised:
        await _step(server, model, HI)
    assert (raised.value.error.kind, raised.value.error.retryable) == (kind, retryable)
    assert raised.value.error.retry_after_ms == retry_after_ms
    assert raised.value.error.provider == "google"


async def test_a_prompt_over_the_window_is_context_exceeded(server: FakeProviderServer) -> None:
    model = _model(server, FakeResponse.of_text("never"))
    server.book.context_windows[model.name] = 5
    with pytest.raises(ProviderError) as raised:
        await _step(server, model, [Message(role="user", parts=[TextPart(text="x" * 400)])])
    assert raised.value.error.kind == "context_exceeded"
    assert not raised.value.error.retryable


async def test_a_withheld_answer_is_a_content_filtered_error(server: FakeProviderServer) -> None:
    model = _model(server, FakeResponse(parts=[FakeText(text="Once upon")], stop_reason="SAFETY"))
    with pytest.raises(ProviderError) as raised:
        await _step(server, model, HI)
    assert raised.value.error.kind == "content_filtered"
    assert raised.value.error.detail == {"finish_reason": "SAFETY"}


async def test_a_malformed_function_call_is_asked_for_again(server: FakeProviderServer) -> None:
    model = _model(server, FakeResponse(parts=[], stop_reason="MALFORMED_FUNCTION_CALL"))
    with pytest.raises(ProviderError) as raised:
        await _step(server, model, HI, tools=[TOOL])
    assert (raised.value.error.kind, raised.value.error.retryable) == ("generic", True)
    assert raised.value.error.detail == {"finish_reason": "MALFORMED_FUNCTION_CALL"}


async def test_a_mid_stream_error_and_a_cut_stream_are_retryable(
    server: FakeProviderServer,
) -> None:
    text = FakeText(text="a long answer", chunk_size=2)
    model = _model(
        server,
        FakeResponse(parts=[text], stream_error_after_deltas=2, stream_error=FakeError(status=500)),
        FakeResponse(parts=[text], disconnect_after_deltas=2),
    )
    for _ in range(2):
        with pytest.raises(ProviderError) as raised:
            await _step(server, model, HI)
        assert raised.value.error.retryable, raised.value.error


async def test_the_context_window_is_what_models_get_reports(server: FakeProviderServer) -> None:
    model = _model(server, FakeResponse.of_text("unused"))
    server.book.context_windows[model.name] = 32_768
    assert await reported_context_limit(model, server.provider_settings()) == 32_768


def test_another_provider_s_thinking_and_call_ids_stay_out() -> None:
    """A transcript from Anthropic (signed thinking, `toolu_` ids) as Gemini contents."""
    messages = [
        *HI,
        Message(
            role="assistant",
            parts=[
                ReasoningPart(text="hmm", signature="anthropic-signature"),
                ToolCallPart(id="toolu_01", name="get_weather", arguments='{"city": "Rome"}'),
            ],
        ),
        Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id="toolu_01", name="get_weather", output="warm")],
        ),
    ]
    assert build_contents(messages) == [
        {"role": "user", "parts": [{"text": "hi"}]},
        {
            "role": "model",
            "parts": [{"function_call": {"name": "get_weather", "args": {"city": "Rome"}}}],
        },
        {
            "role": "user",
            "parts": [
                {"function_response": {"name": "get_weather", "response": {"output": "warm"}}}
            ],
        },
    ]


def _decoded(signature: str) -> bytes:
    standard = signature.replace("-", "+").replace("_", "/")
    return base64.b64decode(standard + "=" * (-len(standard) % 4))


async def test_gemini_on_vertex_ai_uses_its_own_path_and_credentials(
    server: FakeProviderServer,
) -> None:
    model = _model(server, FakeResponse.of_text("from Vertex"))
    settings = server.provider_settings().model_copy(
        update={
            "google_api_key": None,
            "google_vertex": True,
            "google_cloud_project": "test-project",
            "google_cloud_location": "us-central1",
        }
    )
    parts, _ = await _step(server, model, HI, settings=settings)
    assert parts[0] == TextPart(text="from Vertex")
    (sent,) = server.requests(model.name)
    assert sent.path == (
        "/v1beta1/projects/test-project/locations/us-central1/publishers/google/models/"
        f"{model.name}:streamGenerateContent"
    )
    assert sent.headers["authorization"] == "Bearer test-vertex-token"


async def test_an_image_goes_as_inline_data(server: FakeProviderServer) -> None:
    model = _model(server, FakeResponse.of_text("a red dot"))
    pixel = base64.b64encode(b"\x89PNG fake pixel").decode()
    photo = Message(
        role="user",
        parts=[TextPart(text="what is it?"), FilePart(media_type="image/png", data=pixel)],
    )
    await _step(server, model, [photo])
    (sent,) = server.requests(model.name)
    inline = sent.body["contents"][0]["parts"][1]["inlineData"]
    assert inline["mime_type"] == "image/png"
    assert _decoded(inline["data"]) == b"\x89PNG fake pixel"


async def test_the_fake_answers_generate_content_whole(server: FakeProviderServer) -> None:
    """The fake's non-streamed method, through the SDK's `generate_content`."""
    model = _model(server, FakeResponse(parts=[FakeText(text="Hello, whole world.", chunk_size=4)]))
    client = genai.Client(
        api_key="k", http_options=types.HttpOptions(api_version="v1beta", base_url=server.base_url)
    )
    answer = await client.aio.models.generate_content(model=model.name, contents="hi")
    await client.aio.aclose()
    assert answer.text == "Hello, whole world."
    assert answer.candidates and str(answer.candidates[0].finish_reason.value) == "STOP"


def test_a_history_that_opens_with_the_model_gets_a_user_turn_first() -> None:
    opening = [Message(role="assistant", parts=[TextPart(text="Hello, I'm ready.")]), *HI]
    contents = build_contents(opening)
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[0]["parts"] == [{"text": LEADING_USER_TEXT}]


@pytest.mark.parametrize(
    ("contents", "complaint"),
    [
        ([{"role": "model", "parts": [{"text": "hi"}]}], "opens with the user's turn"),
        (
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "a", "args": {}}}]},
                {"role": "user", "parts": [{"text": "no answer"}, _answer("a"), _answer("b")]},
            ],
            "number of function response parts",
        ),
        (
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"function_call": {"name": "a", "id": "c1"}}]},
                {"role": "user", "parts": [_answer("b")]},
            ],
            "does not answer the function call 'a'",
        ),
        (
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "a", "id": "c1"}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "a", "id": "c2"}}]},
            ],
            "id does not match",
        ),
        (
            [{"role": "user", "parts": [{"text": "hi", "thoughtSignature": "not*base64"}]}],
            "not valid base64",
        ),
    ],
)
def test_the_fake_refuses_what_gemini_refuses(
    contents: list[dict[str, Any]], complaint: str
) -> None:
    with pytest.raises(InvalidRequest, match=complaint):
        validate_gemini({"contents": contents})
