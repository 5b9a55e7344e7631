"""Editing a message is atomic with the turns of its chat, and a retried edit is answered once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest
from harness import Stack, StackFactory
from support.names import model_name

import api.sending
from chatd.fake_provider.script import FakeResponse, FakeText
from chatd.parts import TextPart
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


async def _first_turn(stack: Stack, reply: str) -> tuple[str, str, int]:
    """A chat whose first turn ended: (chat id, model name, id of its user message)."""
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text=reply)])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "one")
    await stack.wait_status(chat["id"], "waiting")
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
    return chat["id"], name, messages[0]["id"]


async def _until_a_query_waits_on_a_lock(pool: asyncpg.Pool) -> None:
    """Return once another session of this database waits for a lock (the edit, on ours)."""
    for _ in range(1000):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if waiting:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the edit never waited for the chat's lock")


async def test_a_turn_that_begins_while_an_edit_checks_the_chat_loses_no_message(
    stack: Stack,
) -> None:
    """A turn begins (the queued message promoted, the chat running) while the edit runs:
    the edit either sees the turn and is refused, or cuts the transcript before the turn's
    message lands. It used to read `waiting`, then delete what the turn had begun on."""
    chat_id, _, user_id = await _first_turn(stack, "first answer")
    queued, _ = await TranscriptStore(stack.pool).enqueue(
        uuid.UUID(chat_id), [TextPart(text="two")], None
    )
    async with stack.pool.acquire() as conn, conn.transaction():
        # The real begin, held open: the chat's row stays locked until it commits.
        turns = TurnStore(cast(asyncpg.Pool, conn))
        assert await turns.begin(uuid.UUID(chat_id), str(queued.id))
        edit = asyncio.create_task(
            stack.http.patch(f"/chats/{chat_id}/messages/{user_id}", json={"content": "uno"})
        )
        await _until_a_query_waits_on_a_lock(stack.pool)
    response = await edit
    assert response.status_code == 409, response.text
    assert response.json()["error"]["detail"] == {"status": "running"}
    messages = await stack.messages(chat_id)
    assert [(m["role"], _texts(m)) for m in messages] == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
    ]
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["queued_messages"] == []


async def test_an_edit_no_worker_takes_is_queued_durably_and_answered_once(
    make_stack: StackFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker takes the edit's message: it is queued (202, `turn_id` null) and its turn
    runs once a worker comes. A retry with the same Idempotency-Key is answered as the
    first was while the message waits, and with the turn it started after. (It used to be
    a 503, then a 404 on retry, with the chat left truncated.)"""
    async with make_stack() as stack:
        chat_id, name, user_id = await _first_turn(stack, "first answer")
    monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 0.5)
    async with make_stack(with_worker=False, task_queue=stack.task_queue) as stack:
        path = f"/chats/{chat_id}/messages/{user_id}"
        edit = {"json": {"content": "uno"}, "headers": {"Idempotency-Key": "edit-1"}}
        first = await stack.http.patch(path, **edit)
        assert first.status_code == 202, first.text
        assert first.json()["queued"] is True and first.json()["turn_id"] is None
        assert await stack.messages(chat_id) == [], "cut; the new text waits in the queue"
        retried = await stack.http.patch(path, **edit)
        assert retried.status_code == 202, retried.text
        assert retried.json() == first.json()
        # Twice: the late worker runs in this busy process, and a step whose heartbeats came
        # late under load is retried (announced by a reset).
        second_answer = FakeResponse(parts=[FakeText(text="second answer")])
        stack.fake.script(name, [second_answer, second_answer])
        async with stack.late_worker(tmp_path):
            after = await _last_event(stack, chat_id)
            events = await stack.wait_status(chat_id, "waiting", after=after)
            again = await stack.http.patch(path, **edit)
        assert again.status_code == 202, again.text
        message_id = first.json()["message_id"]
        assert again.json() == {"queued": False, "message_id": message_id, "turn_id": message_id}
        messages = await stack.messages(chat_id)
        assert [(m["role"], _texts(m)) for m in messages] == [
            ("user", "uno"),
            ("assistant", "second answer"),
        ]
        assert message_id == messages[0]["turn_id"]
        resets = [e for e in events if e.event == "reset"]
        requests = len(stack.fake.requests(name))
        assert 2 <= requests <= 2 + len(resets), "one model call per turn"
        other = await stack.http.patch(path, json={"content": "x"})
        assert other.status_code == 404, "without the key, the edited message is gone"


async def _last_event(stack: Stack, chat_id: str) -> int:
    seq = await stack.pool.fetchval(
        "SELECT last_event_seq FROM chats WHERE id = $1", uuid.UUID(chat_id)
    )
    return int(seq)
