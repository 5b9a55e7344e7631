"""A webhook receiver for tests: an HTTP server in a thread that checks each request's
Standard Webhooks signature with the `standardwebhooks` verifier and keeps what it got."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["Received", "WebhookReceiver", "webhook_receiver"]


@dataclass
class Received:
    """One request as received: its headers, body, and the verified payload (None if the
    signature didn't verify)."""

    path: str
    headers: dict[str, str]
    body: str
    verified: dict[str, Any] | None


@dataclass
class WebhookReceiver:
    """What the server received; `answers` are the status codes to answer with, in turn
    (200 once they run out); `secret` is set once the endpoint is registered."""

    port: int
    secret: str | None = None
    answers: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        """The receiver's URL on the loopback address."""
        return f"http://127.0.0.1:{self.port}/hook"

    def take(self, headers: dict[str, str], path: str, body: str) -> int:
        verified: dict[str, Any] | None = None
        if self.secret is not None:
            try:
                verified = Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError:
                verified = None
        with self.arrived:
            self.received.append(Received(path, headers, body, verified))
            self.arrived.notify_all()
            return self.answers.pop(0) if self.answers else 200


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """A receiver on a free loopback port for the duration of the block."""
    holder: list[WebhookReceiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length).decode()
            status = holder[0].take(dict(self.headers.items()), self.path, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(WebhookReceiver(port=server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
