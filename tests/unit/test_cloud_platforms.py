"""Claude on Bedrock and on Vertex AI, OpenAI on Azure: each through its real SDK client
(`AsyncAnthropicBedrock`, `AsyncAnthropicVertex`, `AsyncAzureOpenAI`) as a worker makes it,
against the fake provider serving the platform's URLs, auth and framing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError
from support.names import model_name
from support.provider_steps import streamed_step

from chatd.context import context_limit
from chatd.fake_provider import FakeError, FakeProviderServer, FakeResponse, FakeText, FakeToolCall
from chatd.models import ModelConfig, WebSearchConfig
from chatd.parts import Message, Part, TextPart, ToolCallPart
from chatd.providers import close_clients, make_provider
from chatd.providers.base import ModelRequest, ProviderError, StepFinish, ToolSpec
from chatd.settings import ProviderSettings

TOOL = ToolSpec(name="lookup", description="Look it up", input_schema={"type": "object"})
HI = [Message(role="user", parts=[TextPart(text="hi")])]
PLATFORMS: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "anthropic-bedrock",
        "us.anthropic.claude-sonnet-4-5-{}-v1:0",
        {},
        "/model/{}/invoke-with-response-stream",
    ),
    (
        "anthropic-vertex",
        "claude-sonnet-4-5@{}",
        {},
        "/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/{}:streamRawPredict",
    ),
    ("azure-openai", "deployment-{}", {}, "/openai/deployments/{}/chat/completions"),
    ("azure-openai", "deployment-{}", {"openai_api": "responses"}, "/openai/responses"),
]


@pytest.fixture(autouse=True)
async def _fresh_clients() -> AsyncIterator[None]:
    yield
    await close_clients()


async def _step(
    settings: ProviderSettings, model: ModelConfig, **request: Any
) -> tuple[list[Part], StepFinish]:
    provider = make_provider(model, settings)
    return await streamed_step(provider, ModelRequest(model=model, messages=HI, **request))


@pytest.mark.parametrize(("provider", "name", "extra", "path"), PLATFORMS)
async def test_each_platform_streams_calls_tools_and_classifies_errors(
    server: FakeProviderServer, provider: str, name: str, extra: dict[str, Any], path: str
) -> None:
    name = name.format(model_name())
    server.script(
        name,
        [
            FakeResponse(
                parts=[
                    FakeText(text="Looking."),
                    FakeToolCall(name="lookup", arguments={"q": "x"}, id="call_lookup_1"),
                ]
            ),
            FakeResponse.of_error(FakeError.rate_limited(retry_after_s=2)),
        ],
    )
    model = ModelConfig(provider=provider, name=name, **extra)
    parts, finish = await _step(server.provider_settings(), model, tools=[TOOL])
    text, call = parts
    assert text == TextPart(text="Looking.")
    assert isinstance(call, ToolCallPart) and (call.name, call.arguments) == (
        "lookup",
        '{"q": "x"}',
    )
    assert finish.stop_reason == "tool_use"
    (request,) = server.requests(name)
    assert request.path == path.format(name)

    with pytest.raises(ProviderError) as raised:
        await _step(server.provider_settings(), model, tools=[TOOL])
    error = raised.value.error
    assert (error.kind, error.retryable, error.retry_after_ms) == ("rate_limit", True, 2000)
    assert error.provider == provider


async def test_bedrock_signs_with_aws_credentials_and_its_stream_errors_are_retried(
    server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    name = f"anthropic.claude-haiku-4-5-{model_name()}"
    overloaded = FakeError(status=529, type="overloaded_error", message="Overloaded")
    server.script(
        name,
        [
            FakeResponse(
                parts=[FakeText(text="a long answer", chunk_size=2)],
                stream_error_after_deltas=2,
                stream_error=overloaded,
            ),
            FakeResponse.of_error(overloaded),
        ],
    )
    settings = server.provider_settings().model_copy(update={"bedrock_api_key": None})
    model = ModelConfig(provider="anthropic-bedrock", name=name)
    for kind in ("overloaded", "overloaded"):  # mid-stream exception, then an HTTP 503
        with pytest.raises(ProviderError) as raised:
            await _step(settings, model)
        assert (raised.value.error.kind, raised.value.error.retryable) == (kind, True)
    for request in server.requests(name):
        signed = request.headers["authorization"]
        assert signed.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), signed
        assert "x-amz-date" in request.headers


@pytest.mark.parametrize("provider", ["anthropic-bedrock", "azure-openai"])
def test_a_platform_without_web_search_refuses_it_when_the_chat_is_made(provider: str) -> None:
    with pytest.raises(ValidationError, match="has no web search tool"):
        ModelConfig(provider=provider, name="m", web_search=WebSearchConfig())


def test_bedrock_and_vertex_ids_find_the_model_s_window() -> None:
    claude = context_limit(ModelConfig(provider="anthropic", name="claude-sonnet-4-5"))
    for provider, name in [
        ("anthropic-bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("anthropic-bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("anthropic-vertex", "claude-sonnet-4-5@20250929"),
    ]:
        assert context_limit(ModelConfig(provider=provider, name=name)) == claude


async def test_a_platform_without_its_settings_is_a_config_error() -> None:
    for provider, missing in [
        ("anthropic-bedrock", "AWS_REGION"),
        ("anthropic-vertex", "CLOUD_ML_REGION"),
        ("azure-openai", "AZURE_OPENAI_ENDPOINT"),
    ]:
        with pytest.raises(ProviderError, match=missing) as raised:
            make_provider(ModelConfig(provider=provider, name="m"), ProviderSettings())
        assert (raised.value.error.kind, raised.value.error.retryable) == ("config", False)
