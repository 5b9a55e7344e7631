"""A fake model provider speaking the Anthropic and OpenAI streaming wire formats."""

from chatd.fake_provider.demo import CURRENT_TIME_TOOL, DEMO_MODEL, demo_responder
from chatd.fake_provider.script import (
    DeltaRecord,
    FakeError,
    FakePart,
    FakeReasoning,
    FakeRequest,
    FakeResponse,
    FakeSearchResult,
    FakeText,
    FakeToolCall,
    FakeUsage,
    FakeWebSearch,
    Responder,
)
from chatd.fake_provider.server import FakeProviderServer, create_app

__all__ = [
    "CURRENT_TIME_TOOL",
    "DEMO_MODEL",
    "DeltaRecord",
    "FakeError",
    "FakePart",
    "FakeProviderServer",
    "FakeReasoning",
    "FakeRequest",
    "FakeResponse",
    "FakeSearchResult",
    "FakeText",
    "FakeToolCall",
    "FakeUsage",
    "FakeWebSearch",
    "Responder",
    "create_app",
    "demo_responder",
]
