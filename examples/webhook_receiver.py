"""A webhook receiver that verifies chatd's Standard Webhooks signatures.

It starts a small HTTP server, registers it with chatd for `turn.completed`, sends a
message, and checks that the delivery arrives signed with the endpoint's secret. A receiver
must verify every delivery before trusting it: `standardwebhooks` checks the signature and
that the timestamp is recent (so an old delivery can't be replayed at you).

chatd's workers refuse to deliver to private addresses unless told otherwise; this receiver
listens on 127.0.0.1, so run `chatd dev` with `CHATD_WEBHOOK_ALLOW_PRIVATE=1`
(`examples/run_all.py` does):

    CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
        python examples/webhook_receiver.py
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

BASE_URL = os.environ.get("CHATD_BASE_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["CHATD_API_KEY"]

verified: queue.Queue[dict[str, Any]] = queue.Queue()
"""Deliveries whose signature checked out, as the receiver parsed them."""


def make_handler(secret: str) -> type[BaseHTTPRequestHandler]:
    """A request handler that verifies each delivery with the endpoint's secret."""
    webhook = Webhook(secret)  # takes the "whsec_..." secret as chatd returns it

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                # Verify the raw bytes, before parsing: a re-serialised body won't match.
                payload = webhook.verify(body, dict(self.headers))
            except WebhookVerificationError as error:
                print(f"  refused a delivery: {error}")
                self.send_response(400)  # not a 2xx: chatd logs it as a failed attempt
                self.end_headers()
                return
            # `webhook-id` is the same for every retry of a delivery: deduplicate on it.
            verified.put({"webhook_id": self.headers["webhook-id"], **payload})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:  # keep the example's output short
            pass

    return Receiver


def main() -> None:
    api = httpx.Client(
        base_url=f"{BASE_URL}/api/v1", headers={"Authorization": f"Bearer {API_KEY}"}
    )

    # 1. Listen on a free port, then register the endpoint. The secret is shown only now.
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_port}/hook"
    created = api.post("/webhooks", json={"url": url, "events": ["turn.completed"]})
    assert created.status_code == 201, created.text
    endpoint = created.json()
    secret = endpoint["secret"]
    assert secret.startswith("whsec_")
    server.RequestHandlerClass = make_handler(secret)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"receiving at {url} (webhook {endpoint['id']})")

    try:
        # 2. A turn that completes produces a `turn.completed` delivery.
        chat = api.post("/chats", json={"message": {"content": "ping the webhook"}}).json()
        deadline = time.monotonic() + 30
        delivery = None
        while delivery is None and time.monotonic() < deadline:
            try:
                event = verified.get(timeout=1)
            except queue.Empty:
                continue
            if event["data"]["chat_id"] == chat["id"]:  # other chats of the owner may deliver too
                delivery = event
        assert delivery is not None, "no verified turn.completed delivery within 30 s"
        print("verified delivery:", json.dumps(delivery))
        assert delivery["type"] == "turn.completed"
        assert delivery["data"]["status"] == "waiting"

        # 3. chatd's delivery log records the attempt (written once our 204 reached it).
        mine: dict[str, Any] = {}
        while time.monotonic() < deadline and mine.get("status") != "succeeded":
            log = api.get(f"/webhooks/{endpoint['id']}/deliveries").json()["data"]
            mine = next((d for d in log if d["id"] == delivery["webhook_id"]), {})
            time.sleep(0.2)
        assert mine.get("status") == "succeeded", mine
        print(
            "chatd's log: delivery",
            mine["id"],
            mine["status"],
            "after",
            len(mine["attempts"]),
            "attempt(s)",
        )

        # 4. A forged or altered delivery fails verification.
        headers = {
            "webhook-id": "msg_forged",
            "webhook-timestamp": str(int(time.time())),
            "webhook-signature": "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        }
        forged = httpx.post(url, content=b'{"type": "turn.completed"}', headers=headers)
        assert forged.status_code == 400, "a forged delivery must be refused"
        print("a forged delivery was refused")
    finally:
        api.delete(f"/webhooks/{endpoint['id']}")  # stop deliveries to a receiver that's going away
        server.shutdown()
    print("OK")


if __name__ == "__main__":
    main()
