"""The context window an OpenAI-compatible server reports: answers kept, failures retried."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.names import model_name

import chatd.context
from chatd.context import reported_context_limit
from chatd.models import ModelConfig
from chatd.settings import ProviderSettings


class _FlakyModels:
    """Serves `GET /v1/models/{name}`: 503 for the first `failures` requests, then a window."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                if outer.hits <= outer.failures:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps({"id": "m", "object": "model", "max_model_len": 2000}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def settings(self) -> ProviderSettings:
        port = self.server.server_address[1]
        return ProviderSettings(openai_api_key="k", openai_base_url=f"http://127.0.0.1:{port}/v1")


@pytest.fixture
def flaky() -> Iterator[_FlakyModels]:
    server = _FlakyModels(failures=1)
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _model() -> ModelConfig:
    return ModelConfig(provider="openai", name=model_name())


async def test_a_failed_lookup_is_retried_once_it_expires_and_an_answer_is_kept(
    flaky: _FlakyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chatd.context, "FAILED_LOOKUP_TTL_S", 0.0)  # expires at once
    model = _model()
    assert await reported_context_limit(model, flaky.settings) is None  # the server failed
    assert await reported_context_limit(model, flaky.settings) == 2000  # asked again
    assert await reported_context_limit(model, flaky.settings) == 2000
    assert flaky.hits == 2, "the answer is cached: no third request"


async def test_a_failed_lookup_is_remembered_briefly(flaky: _FlakyModels) -> None:
    model = _model()
    assert await reported_context_limit(model, flaky.settings) is None
    assert await reported_context_limit(model, flaky.settings) is None
    assert flaky.hits == 1, "within the failure's short memory the server is not asked again"
