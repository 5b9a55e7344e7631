"""The fake provider can enforce a context window, refusing in each API's own words."""

from __future__ import annotations

from typing import Any

import pytest

from chatd.fake_provider import FakeProviderServer, FakeResponse
from chatd.fake_provider.admission import estimate_request_tokens
from chatd.fake_provider.script import ScriptBook
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest, ProviderError

CONFIGS: list[dict[str, Any]] = [
    {"provider": "anthropic"},
    {"provider": "openai", "openai_api": "chat"},
    {"provider": "openai", "openai_api": "responses"},
]


pytestmark = pytest.mark.usefixtures("closed_sdk_clients")


def _request(name: str, config: dict[str, Any], chars: int) -> ModelRequest:
    model = ModelConfig(name=name, **config)
    text = "x" * chars
    return ModelRequest(model=model, messages=[Message(role="user", parts=[TextPart(text=text)])])


async def _stream(server: FakeProviderServer, request: ModelRequest) -> str:
    provider = make_provider(request.model, server.provider_settings())
    deltas = [e async for e in provider.stream_step(request) if isinstance(e, PartDelta)]
    return "".join(d.text or "" for d in deltas)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.get("openai_api", c["provider"]))
async def test_a_prompt_over_the_window_is_context_exceeded_and_leaves_the_script(
    server: FakeProviderServer, config: dict[str, Any]
) -> None:
    name = f"window-{config.get('openai_api', config['provider'])}"
    server.script(name, [FakeResponse.of_text("fits")])
    server.book.context_windows[name] = 100
    with pytest.raises(ProviderError) as caught:
        await _stream(server, _request(name, config, chars=800))
    assert caught.value.error.kind == "context_exceeded"
    assert caught.value.error.status_code == 400
    assert server.remaining(name) == 1, "the refusal consumed no scripted response"
    assert await _stream(server, _request(name, config, chars=200)) == "fits"


def test_the_estimate_counts_the_prompt_fields_only() -> None:
    body = {"model": "m" * 400, "system": "s" * 36, "messages": [{"content": "c" * 100}]}
    assert estimate_request_tokens(body) == (38 + len('[{"content": ""}]') + 100 + 3) // 4


def test_a_model_without_its_own_window_gets_the_servers() -> None:
    book = ScriptBook()
    book.default_context_window = 500
    book.context_windows["small"] = 50
    assert (book.context_window("small"), book.context_window("other")) == (50, 500)
