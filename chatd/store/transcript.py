"""The transcript: persisted messages and queued user messages.

Every write is keyed by `step_key` (turn, step, kind) so a retried activity is a no-op
that returns the existing row; the `message` event is appended in the same statement.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg
from pydantic import BaseModel, TypeAdapter

from chatd.answered_calls import every_call_answered
from chatd.parts import (
    Message,
    Part,
    Role,
    Usage,
    without_provider_metadata,
)
from chatd.store.events import Conn, append_events
from chatd.store.pages import DEFAULT_PAGE_BYTES, Page
from chatd.store.spend import STEP_COST_JOIN
from chatd.store.step_keys import StepKey, stored_key

__all__ = [
    "INSERT_STEP",
    "MESSAGE_EVENT_SQL",
    "QUEUED_ROLE_SQL",
    "NewMessage",
    "QueuedMessage",
    "StoredMessage",
    "TranscriptStore",
    "TurnContext",
    "context_sql",
    "message_event",
    "turn_context",
    "user_message_event_sql",
]

_messages_adapter: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


class StoredMessage(BaseModel):
    """A persisted transcript message."""

    id: int
    turn_id: str
    role: Role
    parts: list[Part]
    compressed: bool
    usage: Usage | None
    created_at: datetime
    cost_usd: float | None = None
    """In a page of the transcript, on a model step: what its attempts cost (None: not
    priced, or not a step)."""
    cost_estimated: bool | None = None
    """With `cost_usd`: some of it is an estimate (an attempt cut short, or lost)."""
    turn_run_id: str | None = None
    """In a page of the transcript: the Temporal run (of workflow `chat-<chat id>`) that
    began this message's turn, for linking it; None for a message of no turn (history given
    as input, a fork's copy) or a turn whose queue row retention removed."""

    def for_client(self) -> StoredMessage:
        """This message without internal provider metadata (signatures, encrypted items)."""
        return self.model_copy(update={"parts": [without_provider_metadata(p) for p in self.parts]})


class QueuedMessage(BaseModel):
    """A user message waiting for its turn."""

    id: uuid.UUID
    parts: list[Part]
    client_message_id: str | None
    created_at: datetime
    request_digest: str | None = None
    """The digest of the request that sent it (see `api.idempotency`)."""
    earlier_not_handed_over: list[uuid.UUID] | None = None
    """Stored just now: the chat's older messages Temporal may not have had then, oldest
    first (`not_handed_over`); None when not read with it."""


_SENT = "id, parts, client_message_id, created_at, request_digest"

_NOT_HANDED_OVER = (
    "SELECT id FROM queued_messages WHERE chat_id = {chat} AND promoted_at IS NULL"
    " AND handed_over_at IS NULL ORDER BY created_at, id"
)
"""Chat {chat}'s waiting messages Temporal may not have yet, oldest first."""

QUEUED_ROLE_SQL = """CASE WHEN parts @> '[{"type": "tool_result"}]' THEN 'tool' ELSE 'user' END"""
"""The role a queued message takes in the transcript: a user's message, or the function
results a stateless client's conversation ends with (a turn that begins from them)."""


def _stored(row: asyncpg.Record) -> StoredMessage:
    return StoredMessage.model_validate(dict(row))


def message_event(message: StoredMessage) -> tuple[str, dict[str, Any]]:
    """The `message` stream event for a persisted message."""
    return ("message", message.for_client().model_dump(mode="json", exclude_none=True))


MESSAGE_EVENT_SQL = "chatd_message_event(m)"
"""The `message` event of the `messages` row `m` a statement inserts: `chatd_message_event`
(migration 008), `message_event` in SQL, which every statement that saves a message uses."""


def user_message_event_sql(row: str) -> str:
    """`chatd_message_event` over any record `row` with a message's columns (a table-less
    test row, say): the columns it lacks are NULL, as a user message's usage is."""
    return f"chatd_message_event(jsonb_populate_record(NULL::messages, to_jsonb({row})))"


class TurnContext(NamedTuple):
    """A turn's context, and whether its message was still waiting in the queue when read
    (then it is the context's last message)."""

    messages: list[Message]
    message_waiting: bool


def context_sql(chat: str, turn_message: str, through: str) -> str:
    """The read of a turn's context: chat `chat`'s messages the model sees (up to message
    `through`, if not NULL), then the queued message `turn_message` if it is still waiting,
    as one JSON text (`messages`), and whether it was (`waiting`). Each argument is a SQL
    expression (a parameter). One statement, so it sees the queued message exactly once,
    before or after a turn's begin promotes it. Built as one JSON text by Postgres and
    validated in one pass (`turn_context`): a long chat's context is read at every step, and
    decoding and validating it row by row costs more than the query."""
    return f"""SELECT coalesce(json_agg(json_build_object(
                   'role', role, 'parts', parts, 'response_id', response_id
               ) ORDER BY id NULLS LAST), '[]')::text AS messages,
               coalesce(bool_or(id IS NULL), false) AS waiting
           FROM (
               SELECT id, role, parts, response_id FROM messages
               WHERE chat_id = {chat} AND NOT compressed
                   AND ({through}::bigint IS NULL OR id <= {through}::bigint)
               UNION ALL
               SELECT NULL, {QUEUED_ROLE_SQL}, parts, NULL FROM queued_messages
               WHERE id = {turn_message}::uuid AND chat_id = {chat} AND promoted_at IS NULL
           ) AS context"""


def turn_context(messages: str, waiting: bool) -> TurnContext:
    """The `TurnContext` of a `context_sql` row: every tool call answered."""
    return TurnContext(
        every_call_answered(_messages_adapter.validate_json(messages)), message_waiting=waiting
    )


_MODEL_CONTEXT = context_sql("$1", "NULL", "$2")


class TranscriptStore:
    """Reads and writes a chat's messages."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def enqueue(
        self,
        chat_id: uuid.UUID,
        parts: list[Part],
        client_message_id: str | None,
        request_digest: str | None = None,
        conn: Conn | None = None,
        max_cost_usd: float | None = None,
    ) -> tuple[QueuedMessage, bool]:
        """Queue a user message (the turn it starts may spend `max_cost_usd`), with the older
        messages not handed over (its hand-over's first read, in the same round trip); with a
        known `client_message_id`, return the first one. With `conn`, within that
        connection's transaction."""
        row = await (conn or self._pool).fetchrow(
            f"""INSERT INTO queued_messages
                   (id, chat_id, parts, client_message_id, request_digest, max_cost_usd)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (chat_id, client_message_id) DO NOTHING
               RETURNING {_SENT},
                   ARRAY({_NOT_HANDED_OVER.format(chat="$2")}) AS earlier_not_handed_over""",
            uuid.uuid4(),
            chat_id,
            [p.model_dump(exclude_none=True) for p in parts],
            client_message_id,
            request_digest,
            max_cost_usd,
        )
        if row is not None:
            return QueuedMessage.model_validate(dict(row)), True
        assert client_message_id is not None
        existing = await self.sent(chat_id, client_message_id)
        assert existing is not None
        return existing, False

    async def sent(self, chat_id: uuid.UUID, client_message_id: str) -> QueuedMessage | None:
        """The message sent to the chat under `client_message_id`, taken by a turn or not."""
        row = await self._pool.fetchrow(
            f"SELECT {_SENT} FROM queued_messages WHERE chat_id = $1 AND client_message_id = $2",
            chat_id,
            client_message_id,
        )
        return QueuedMessage.model_validate(dict(row)) if row else None

    async def queued(self, chat_id: uuid.UUID) -> list[QueuedMessage]:
        """Messages still waiting, oldest first."""
        rows = await self._pool.fetch(
            "SELECT id, parts, client_message_id, created_at FROM queued_messages"
            " WHERE chat_id = $1 AND promoted_at IS NULL ORDER BY created_at, id",
            chat_id,
        )
        return [QueuedMessage.model_validate(dict(r)) for r in rows]

    async def queued_message(
        self, chat_id: uuid.UUID, queued_id: uuid.UUID
    ) -> QueuedMessage | None:
        """A message sent to the chat, whether its turn has taken it yet or not."""
        row = await self._pool.fetchrow(
            "SELECT id, parts, client_message_id, created_at FROM queued_messages"
            " WHERE id = $1 AND chat_id = $2",
            queued_id,
            chat_id,
        )
        return QueuedMessage.model_validate(dict(row)) if row else None

    async def drop_queued(self, chat_id: uuid.UUID, queued_id: uuid.UUID) -> bool:
        """Delete a queued message that no turn has taken yet; False if there is none."""
        async with self._pool.acquire() as conn, conn.transaction():
            deleted = await conn.fetchval(
                "DELETE FROM queued_messages WHERE id = $1 AND chat_id = $2"
                " AND promoted_at IS NULL RETURNING id",
                queued_id,
                chat_id,
            )
            if deleted is None:
                return False
            await append_events(conn, chat_id, [_queue_event()])
            return True

    async def is_promoted(self, queued_id: uuid.UUID) -> bool:
        """Whether a turn has taken this queued message into the transcript."""
        value = await self._pool.fetchval(
            "SELECT promoted_at IS NOT NULL FROM queued_messages WHERE id = $1", queued_id
        )
        return bool(value)

    async def not_handed_over(self, chat_id: uuid.UUID) -> list[uuid.UUID]:
        """The chat's waiting messages Temporal may not have yet, oldest first (see
        migration 022): a hand-over sends these first, so no message overtakes an older one
        whose gateway died between storing and handing it over."""
        rows = await self._pool.fetch(_NOT_HANDED_OVER.format(chat="$1"), chat_id)
        return [row["id"] for row in rows]

    async def handed_over(self, queued_ids: list[uuid.UUID]) -> None:
        """Record that Temporal has these messages. Not flushed before it returns: a mark
        lost in a crash only hands a message over twice, which its turn takes once."""
        await self._pool.execute(
            "UPDATE queued_messages SET handed_over_at = now()"
            " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed"
            " WHERE id = ANY($1::uuid[]) AND handed_over_at IS NULL",
            queued_ids,
        )

    async def save(
        self,
        chat_id: uuid.UUID,
        *,
        turn_id: str,
        step_key: StepKey | str,
        role: Role,
        parts: list[Part],
        usage: Usage | None = None,
        response_id: str | None = None,
        extra_events: list[tuple[str, dict[str, Any]]] | None = None,
        conn: Conn | None = None,
    ) -> StoredMessage:
        """Persist a message once; a retry with the same key returns the existing row. With
        `conn`, within that connection's transaction."""
        return await _save(
            conn or self._pool,
            chat_id,
            turn_id,
            NewMessage(step_key, role, parts, usage, response_id),
            extra_events,
        )

    async def save_step(
        self, chat_id: uuid.UUID, *, turn_id: str, messages: list[NewMessage]
    ) -> list[StoredMessage]:
        """Persist several messages of a step in one transaction (all or none)."""
        async with self._pool.acquire() as conn, conn.transaction():
            return [await _save(conn, chat_id, turn_id, m, None) for m in messages]

    async def replace_with_summary(
        self,
        chat_id: uuid.UUID,
        *,
        turn_id: str,
        step_key: StepKey | str,
        summary: list[Part],
        events: list[tuple[str, dict[str, Any]]],
    ) -> StoredMessage:
        """Mark every message so far compressed and add the user-role summary, atomically."""
        async with self._pool.acquire() as conn, conn.transaction():
            existing = await conn.fetchrow(
                "SELECT * FROM messages WHERE chat_id = $1 AND step_key = $2",
                chat_id,
                stored_key(turn_id, step_key),
            )
            if existing is not None:
                return _stored(existing)
            await conn.execute(
                "UPDATE messages SET compressed = true WHERE chat_id = $1 AND NOT compressed",
                chat_id,
            )
            return await _save(
                conn, chat_id, turn_id, NewMessage(step_key, "user", summary), events
            )

    async def truncate_from(self, chat_id: uuid.UUID, message_id: int) -> int:
        """Delete a message and everything after it (an edit); return how many went."""
        async with self._pool.acquire() as conn, conn.transaction():
            deleted = await conn.fetch(
                "DELETE FROM messages WHERE chat_id = $1 AND id >= $2 RETURNING id",
                chat_id,
                message_id,
            )
            await append_events(
                conn, chat_id, [("transcript_edited", {"from_message_id": message_id})]
            )
            return len(deleted)

    async def find(
        self, chat_id: uuid.UUID, turn_id: str, step_key: StepKey | str
    ) -> StoredMessage | None:
        """The message saved under (turn, step key), if any."""
        row = await self._pool.fetchrow(
            "SELECT * FROM messages WHERE chat_id = $1 AND step_key = $2",
            chat_id,
            stored_key(turn_id, step_key),
        )
        return _stored(row) if row else None

    async def get(self, chat_id: uuid.UUID, message_id: int) -> StoredMessage | None:
        """One message of the chat."""
        row = await self._pool.fetchrow(
            "SELECT * FROM messages WHERE chat_id = $1 AND id = $2", chat_id, message_id
        )
        return _stored(row) if row else None

    async def page(
        self,
        chat_id: uuid.UUID,
        *,
        after_id: int,
        limit: int,
        max_bytes: int = DEFAULT_PAGE_BYTES,
    ) -> Page[StoredMessage]:
        """Messages after `after_id`, oldest first (compressed ones included, for people), up
        to `limit` rows or `max_bytes` of their parts' JSON, whichever comes first."""
        rows = await self._pool.fetch(_PAGE, chat_id, after_id, limit, max_bytes)
        return Page([_stored(r) for r in rows], bool(rows[0]["more"]) if rows else False)

    async def for_model(self, chat_id: uuid.UUID, *, through: int | None = None) -> list[Message]:
        """The messages the model sees: not compressed, in order (up to message `through`),
        every tool call answered (`chatd.answered_calls`)."""
        row = await self._pool.fetchrow(_MODEL_CONTEXT, chat_id, through)
        assert row is not None  # an aggregate always has its row
        return turn_context(row["messages"], row["waiting"]).messages


# Walks the transcript a row at a time (one index probe each) and stops at the first row that
# doesn't fit: a page reads its own rows and one more, however long the chat and its messages.
# The first row always fits, so a message larger than the budget still gets a page. The row
# comparison keeps each probe on the (chat_id, id) index: on `id` alone, a chat's next message
# may lie behind every other chat's.
_PAGE = f"""
WITH RECURSIVE walk (id, n, upto, fits) AS (
    SELECT $2::bigint, 0::bigint, 0::bigint, true
    UNION ALL
    SELECT next.id, walk.n + 1, walk.upto + next.size,
           walk.n = 0 OR (walk.n < $3 AND walk.upto + next.size <= $4)
    FROM walk CROSS JOIN LATERAL (
        SELECT m.id, octet_length(m.parts::text) AS size FROM messages m
        WHERE m.chat_id = $1 AND (m.chat_id, m.id) > ($1, walk.id) AND m.visible
        ORDER BY m.chat_id, m.id LIMIT 1
    ) AS next
    WHERE walk.fits
)
SELECT m.*, q.promoted_by AS turn_run_id, s.cost_usd, s.cost_estimated,
       EXISTS (SELECT 1 FROM walk WHERE NOT walk.fits) AS more
FROM walk JOIN messages m ON m.id = walk.id
LEFT JOIN queued_messages q ON q.chat_id = m.chat_id AND q.id::text = m.turn_id
{STEP_COST_JOIN}
WHERE walk.n > 0 AND walk.fits
ORDER BY m.id
"""


class NewMessage(NamedTuple):
    """A message to persist under `step_key` (unique within its turn)."""

    step_key: StepKey | str
    role: Role
    parts: list[Part]
    usage: Usage | None = None
    response_id: str | None = None


INSERT_STEP = """INSERT INTO messages (chat_id, turn_id, step_key, role, parts, usage, response_id)
    VALUES ({chat_id}, {turn_id}, {step_key}, {role}, {parts}, {usage}, {response_id})
    ON CONFLICT (chat_id, step_key) DO NOTHING RETURNING *"""
"""Insert a step's message unless its step key is taken: the `m` of a statement that saves
a step. Format it with the statement's parameters (`$n`) for each column."""

# One statement, atomic on its own: insert the message unless its step key is taken, and
# only then publish the events before it and its `message` event.
_SAVE_INSERT = INSERT_STEP.format(
    chat_id="$1",
    turn_id="$2",
    step_key="$3",
    role="$4",
    parts="$5",
    usage="$6",
    response_id="$7",
)
_SAVE = f"""
WITH m AS (
    {_SAVE_INSERT}
)
SELECT m.*,
       chatd_append_events(
           $1,
           array_append($8::text[], 'message'),
           array_append($9::jsonb[], {MESSAGE_EVENT_SQL})
       ) AS last_event_seq
FROM m
"""


async def _save(
    conn: Conn | asyncpg.Pool,
    chat_id: uuid.UUID,
    turn_id: str,
    new: NewMessage,
    extra_events: list[tuple[str, dict[str, Any]]] | None,
) -> StoredMessage:
    key = stored_key(turn_id, new.step_key)
    events = extra_events or []
    row = await conn.fetchrow(
        _SAVE,
        chat_id,
        turn_id,
        key,
        new.role,
        [p.model_dump(exclude_none=True) for p in new.parts],
        new.usage.model_dump() if new.usage else None,
        new.response_id,
        [name for name, _ in events],
        [data for _, data in events],
    )
    if row is None:
        existing = await conn.fetchrow(
            "SELECT * FROM messages WHERE chat_id = $1 AND step_key = $2", chat_id, key
        )
        assert existing is not None
        return _stored(existing)
    return _stored(row)


def _queue_event() -> tuple[str, dict[str, Any]]:
    return ("queue", {})
