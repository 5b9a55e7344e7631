"""The demo model names a chat after its first words when asked for a title, as the title
activity asks (its instructions, through the Anthropic SDK), not with its scripted answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from activities.compaction import TITLE_INSTRUCTIONS
from chatd.fake_provider.demo import demo_title
from chatd.fake_provider.server import FakeProviderServer
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest


@pytest.fixture(scope="module")
def demo() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


async def _title(demo: FakeProviderServer, message: str) -> str:
    model = ModelConfig(provider="demo", name="demo", max_output_tokens=32)
    request = ModelRequest(
        model=model,
        system=TITLE_INSTRUCTIONS,
        messages=[Message(role="user", parts=[TextPart(text=message)])],
    )
    provider = make_provider(model, demo.provider_settings())
    text = [
        e.text
        async for e in provider.stream_step(request)
        if isinstance(e, PartDelta) and e.type == "text" and e.text
    ]
    return "".join(text)


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("hello, what time is it?", "Hello, what time is it"),
        (
            "  please refactor the billing module so that invoices are cached",
            "Please refactor the billing module so",
        ),
        ("¿qué hora es?", "¿qué hora es"),
    ],
)
async def test_the_demo_model_answers_a_title_request_with_a_short_title(
    demo: FakeProviderServer, message: str, title: str
) -> None:
    assert await _title(demo, message) == title


def test_a_message_without_words_gets_a_placeholder_title() -> None:
    assert demo_title(" \n ") == "New chat"
