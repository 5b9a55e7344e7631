"""A fake provider that answers every model with one short text at once and says when it
received each request and emitted each delta (`GET /bench/times`), for a turn's timeline.

It runs in a child process of its own (`serve_timed_fake`), so that the model's side of a
turn costs the process under test nothing; `take_provider_times` reads it from the bench.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx
from _stack import serve_fake_app
from starlette.requests import Request
from starlette.responses import JSONResponse

from chatd.fake_provider.script import FakeRequest, FakeResponse, ScriptBook
from chatd.fake_provider.server import create_app

__all__ = ["ProviderTimes", "TimedBook", "serve_timed_fake", "take_provider_times"]


class TimedBook(ScriptBook):
    """Every model answers `reply` at once; only the times of requests and deltas are kept
    (the request log of `ScriptBook` would only grow)."""

    def __init__(self, reply: str) -> None:
        super().__init__()
        self._reply = reply
        self._times_lock = threading.Lock()
        self._received_ns: list[int] = []
        self._emitted_ns: list[int] = []

    def knows(self, model: str) -> bool:
        """Every model is served."""
        return True

    def next_response(self, request: FakeRequest) -> FakeResponse:
        return FakeResponse.of_text(self._reply)

    def record_request(self, request: FakeRequest) -> None:
        with self._times_lock:
            self._received_ns.append(request.received_ns)

    def record_delta(self, model: str, text: str) -> None:
        emitted_ns = time.time_ns()
        with self._times_lock:
            self._emitted_ns.append(emitted_ns)

    def take_times(self) -> dict[str, list[int]]:
        """The times kept since the last call (`time.time_ns()`), forgotten here."""
        with self._times_lock:
            taken = {"received_ns": self._received_ns, "emitted_ns": self._emitted_ns}
            self._received_ns, self._emitted_ns = [], []
        return taken


def serve_timed_fake(port: int, reply: str) -> None:
    """Serve a `TimedBook` on 127.0.0.1:`port` in the foreground (a child process's main)."""
    book = TimedBook(reply)
    app = create_app(book)

    async def times(_request: Request) -> JSONResponse:
        return JSONResponse(book.take_times())

    app.add_route("/bench/times", times, methods=["GET"])
    serve_fake_app(app, port)


@dataclass
class ProviderTimes:
    """When the fake provider received requests and emitted text deltas (`time.time_ns()`)."""

    received_ns: list[int]
    emitted_ns: list[int]

    def first_received_ms(self, t0_ns: int) -> float:
        """The first request, ms after `t0_ns` (NaN without one)."""
        return (min(self.received_ns) - t0_ns) / 1e6 if self.received_ns else float("nan")

    def first_emitted_ms(self, t0_ns: int) -> float:
        """The first delta, ms after `t0_ns` (NaN without one)."""
        return (min(self.emitted_ns) - t0_ns) / 1e6 if self.emitted_ns else float("nan")


async def take_provider_times(fake: httpx.AsyncClient) -> ProviderTimes:
    """The times the provider kept since the last call (`fake`'s base URL is the provider's)."""
    response = await fake.get("/bench/times")
    response.raise_for_status()
    body = response.json()
    return ProviderTimes(body["received_ns"], body["emitted_ns"])
