"""Every store write that publishes goes through `chatd_append_events` and builds `message`
events with `chatd_message_event`: one numbering, one notification, one event shape."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest
from support.spend import unpriced_attempt

from chatd.models import ModelConfig, ModelError
from chatd.parts import (
    INTERNAL_FIELDS,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from chatd.store.chats import ChatStore
from chatd.store.events import NOTIFY_CHANNEL, EventLog
from chatd.store.transcript import NewMessage, StoredMessage, TranscriptStore, message_event
from chatd.store.turns import TurnStore


async def _chat(pool: asyncpg.Pool) -> uuid.UUID:
    return (await ChatStore(pool).create(owner="o", model=ModelConfig())).id


async def test_every_writer_numbers_and_notifies_alike(
    pool: asyncpg.Pool, database_url: str
) -> None:
    chat_id, other = await _chat(pool), await _chat(pool)
    transcript, turns, log = TranscriptStore(pool), TurnStore(pool), EventLog(pool)
    notified: list[str] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: notified.append(args[-1]))
    try:
        queued, _ = await transcript.enqueue(chat_id, [TextPart(text="hi")], None)
        turn_id = str(queued.id)
        assert await turns.begin(chat_id, turn_id)  # message, queue, status
        await log.publish_many([(other, "a", {}), (chat_id, "delta", {"n": 1}), (other, "b", {})])
        await transcript.save(
            chat_id,
            turn_id=turn_id,
            step_key="0:assistant",
            role="assistant",
            parts=[TextPart(text="calling")],
            extra_events=[("before", {})],
        )  # before, message
        await turns.set_status(chat_id, turn_id, "requires_action")  # status
        last = NewMessage("1:assistant", "assistant", [TextPart(text="done")], Usage())
        settled = unpriced_attempt(chat_id, turn_id, last)
        deltas = [("delta", {"n": 2})]
        assert await turns.save_last_step(chat_id, turn_id, last, settled, deltas)  # +2 events
        late = NewMessage("2:assistant", "assistant", [TextPart(text="late")])
        settled = unpriced_attempt(chat_id, turn_id, late)
        assert await turns.save_last_step(chat_id, turn_id, late, settled)  # message only: ended
        # Ended already: a late finish changes and publishes nothing.
        await turns.finish(chat_id, turn_id, "error", last_error=ModelError(message="x"))
        await log.publish(chat_id, [("retry", {}), ("reset", {})])
        for _ in range(200):
            if len(notified) == 8:
                break
            await asyncio.sleep(0.02)
    finally:
        await listener.close()
    events = (await log.read_page(chat_id, 0)).events
    assert [(e.seq, e.event) for e in events] == list(enumerate([
        "message", "queue", "status", "delta", "before", "message", "status", "delta",
        "message", "status", "message", "retry", "reset",
    ], start=1))  # fmt: skip
    assert [e.event for e in (await log.read_page(other, 0)).events] == ["a", "b"]
    assert await log.last_seq(chat_id) == 13
    heads = [":".join(payload.split(":", 2)[:2]) for payload in notified]
    assert sorted(heads) == sorted(
        [f"{chat_id}:{n}" for n in (3, 4, 6, 7, 10, 11, 13)] + [f"{other}:2"]
    )
    # Each notification carries its events (all fit here), as the log has them.
    stored = {(c, e.seq): (e.event, e.data) for c in (chat_id, other) for e in
              (await log.read_page(c, 0)).events}  # fmt: skip
    for payload in notified:
        chat, last, body = payload.split(":", 2)
        first, _at, names, data = json.loads(body)
        seqs = range(first, int(last) + 1)
        assert [stored[uuid.UUID(chat), seq] for seq in seqs] == list(zip(names, data, strict=True))


async def test_message_events_are_message_event_of_the_stored_message(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool)
    transcript, turns = TranscriptStore(pool), TurnStore(pool)
    internal = dict.fromkeys(INTERNAL_FIELDS, "hidden")
    queued, _ = await transcript.enqueue(chat_id, [TextPart(text="hi")], None)
    turn_id = str(queued.id)
    assert await turns.begin(chat_id, turn_id)
    saved = [
        await transcript.save(
            chat_id,
            turn_id=turn_id,
            step_key="0:assistant",
            role="assistant",
            parts=[
                ReasoningPart(text="hmm", signature="sig", provider_data={"x": 1}),
                ToolCallPart(id="c", name="t", arguments="{}", provider_data={"y": 2}),
            ],
            usage=Usage(input_tokens=3, reasoning_tokens=1),
        ),
        await transcript.save(
            chat_id,
            turn_id=turn_id,
            step_key="0:tools",
            role="tool",
            parts=[ToolResultPart(tool_call_id="c", name="t", output={"k": None})],
        ),
    ]
    last = NewMessage("1:assistant", "assistant", [])
    ended = await turns.save_last_step(
        chat_id, turn_id, last, unpriced_attempt(chat_id, turn_id, last)
    )
    assert ended is not None
    stored = [*(await transcript.page(chat_id, after_id=0, limit=1)).rows, *saved, ended[0]]
    published = await pool.fetch(
        "SELECT data FROM chat_events WHERE chat_id = $1 AND event = 'message' ORDER BY seq",
        chat_id,
    )
    assert [r["data"] for r in published] == [message_event(m)[1] for m in stored]
    assert not any(f in str(published) for f in internal), "clients never see internal fields"


@pytest.mark.parametrize(
    "created_at",
    [
        datetime(2026, 11, 26, 7, 15, 3, 0, tzinfo=UTC),
        datetime(2026, 11, 26, 7, 15, 3, 120000, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=timezone(timedelta(hours=5))),
    ],
)
async def test_the_message_events_time_is_written_as_pydantic_writes_it(
    pool: asyncpg.Pool, created_at: datetime
) -> None:
    chat_id = await _chat(pool)
    row = await pool.fetchrow(
        "INSERT INTO messages (chat_id, turn_id, step_key, role, parts, created_at)"
        " VALUES ($1, 't', 't:user', 'user', '[]', $2) RETURNING *",
        chat_id,
        created_at,
    )
    assert row is not None
    built = await pool.fetchval(
        "SELECT chatd_message_event(m) FROM messages m WHERE id = $1", row["id"]
    )
    assert built == message_event(StoredMessage.model_validate(dict(row)))[1]


async def test_appending_to_a_missing_chat(pool: asyncpg.Pool) -> None:
    log, chat_id, missing = EventLog(pool), await _chat(pool), uuid.uuid4()
    with pytest.raises(LookupError):
        await log.publish(missing, [("x", {})])
    await log.publish_many([(missing, "x", {}), (chat_id, "y", {})])
    assert [(e.seq, e.event) for e in (await log.read_page(chat_id, 0)).events] == [(1, "y")]
