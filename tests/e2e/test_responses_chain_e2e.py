"""OpenAI Responses chain mode survives its stored response expiring, end to end."""

from __future__ import annotations

import uuid
from typing import Any

from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeText


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


async def _turn(stack: Stack, chat_id: str, content: str, after: int) -> int:
    """Send a message and wait for the turn to end; the id of its last event."""
    await stack.send(chat_id, content)
    events = await stack.wait_status(chat_id, "waiting", after=after)
    return events[-1].id or 0


async def test_a_turn_after_the_stored_response_expired_sends_the_whole_history(
    stack: Stack,
) -> None:
    name = model_name()
    model = {"provider": "openai", "name": name, "openai_api": "responses", "openai_chain": True}
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text=t)]) for t in ("1st", "2nd", "3rd")])
    chat = await stack.create_chat(model=model)
    seen = await _turn(stack, chat["id"], "one", 0)
    previous = await stack.pool.fetchval(
        "SELECT response_id FROM messages WHERE chat_id = $1 AND role = 'assistant'",
        uuid.UUID(chat["id"]),
    )
    assert previous and stack.fake.book.has_response(previous)
    stack.fake.book.forget_response(previous)  # OpenAI expired it, or someone deleted it

    seen = await _turn(stack, chat["id"], "two", seen)
    await _turn(stack, chat["id"], "three", seen)

    messages = await stack.messages(chat["id"])
    assert [_texts(m) for m in messages if m["role"] == "assistant"] == ["1st", "2nd", "3rd"]
    bodies = [r.body for r in stack.fake.requests(name)]
    assert len(bodies) == 4
    refused, resent, chained = bodies[1:]
    assert refused["previous_response_id"] == previous
    assert "previous_response_id" not in resent and resent["store"] is True
    assert [i["role"] for i in resent["input"]] == ["user", "assistant", "user"]
    # The full-history step was stored, so the next turn chains from it again.
    assert chained["previous_response_id"] not in (None, previous)
    assert [i["role"] for i in chained["input"]] == ["user"]
