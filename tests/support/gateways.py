"""A client of several gateways, as behind a load balancer, for tests that kill gateways."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from chatd.tls import client_context

__all__ = ["Gateways"]


class Gateways:
    """The clients' load balancer: a request goes to the next gateway that hasn't failed
    one; a request that fails in transport is retried with the same Idempotency-Key on
    another gateway, and so is a 5xx; a 429 is retried after its Retry-After (a key's request
    rate is per gateway, and a dead gateway leaves its share to the others)."""

    def __init__(self, urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        # A send right after a worker's death may wait for its sticky workflow task to time out.
        self.clients = [
            httpx.AsyncClient(
                base_url=f"{u}/api/v1", headers=headers, timeout=60, verify=client_context()
            )
            for u in urls
        ]
        self.down: set[int] = set()
        self._next = 0
        self.retries = 0
        """Requests sent again after a transport error or a 5xx."""
        self.throttled = 0
        """Requests sent again after a 429."""

    async def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """The first answer that isn't a transport error, a 5xx or a 429, from any gateway."""
        for _ in range(20):
            up = [i for i in range(len(self.clients)) if i not in self.down]
            index = up[self._next % len(up)]
            self._next += 1
            try:
                response = await self.clients[index].request(method, path, **options)
            except httpx.TransportError:
                self.down.add(index)
                self.retries += 1
                continue
            if response.status_code == 429:
                self.throttled += 1
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                continue
            if response.status_code < 500:
                return response
            self.retries += 1
            await asyncio.sleep(0.2)
        raise AssertionError(f"{method} {path}: no gateway answered")

    async def create_chat(self, model: str) -> str:
        """A new chat of the fake provider's `model` (created once, retried or not)."""
        body = {"model": {"provider": "anthropic", "name": model}}
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        response = await self.request("POST", "/chats", json=body, headers=headers)
        assert response.status_code == 201, response.text
        chat_id: str = response.json()["id"]
        return chat_id

    async def transcript(self, chat_id: str) -> list[tuple[str, str]]:
        """(role, text) of every message, its text parts' and tool results' text, in order."""
        response = await self.request("GET", f"/chats/{chat_id}/messages", params={"limit": 500})
        assert response.status_code == 200 and not response.json()["has_more"], response.text
        return [(m["role"], "".join(map(_text, m["parts"]))) for m in response.json()["messages"]]

    async def turn(self, chat_id: str, content: str) -> str:
        """Send `content` and wait for its turn to end (30 s at most); the reply's text."""
        before = len(await self.transcript(chat_id))
        sent = await self.request("POST", f"/chats/{chat_id}/messages", json={"content": content})
        assert sent.status_code == 202, sent.text
        for _ in range(300):
            chat = (await self.request("GET", f"/chats/{chat_id}")).json()
            transcript = await self.transcript(chat_id)
            if chat["status"] == "waiting" and len(transcript) > before + 1:
                role, text = transcript[-1]
                assert role == "assistant", transcript
                return text
            await asyncio.sleep(0.1)
        raise AssertionError(f"the turn {content!r} did not end: {transcript}")

    async def close(self) -> None:
        """Close the clients."""
        for client in self.clients:
            await client.aclose()


def _text(part: dict[str, Any]) -> str:
    """A part's text, or its tool result's output (structured output as JSON)."""
    value = part.get("text") or part.get("output") or ""
    return value if isinstance(value, str) else json.dumps(value)
