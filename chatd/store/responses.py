"""Open Responses rows (migration 023): what each `/v1/responses` request asked for, which
chat turn serves it, and how it ended. The output itself is the transcript's."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from chatd.models import ModelError
from chatd.store.events import Conn
from chatd.store.spend import STEP_COST_JOIN
from chatd.store.transcript import StoredMessage

__all__ = ["NewResponse", "ResponseRecord", "ResponseStore", "new_response_id"]


def new_response_id() -> str:
    """`resp_` and 32 hex digits: unguessable, as a response id is shown to its owner only."""
    return f"resp_{secrets.token_hex(16)}"


class NewResponse(BaseModel):
    """A response about to be handed to its chat."""

    id: str
    chat_id: uuid.UUID
    owner: str
    turn_id: str
    after_message_id: int | None
    """For a response to the client's function results: the transcript before it."""
    previous_response_id: str | None
    request: dict[str, Any]
    """The request's fields a response object echoes (model, instructions, tools...)."""
    input_items: list[dict[str, Any]]
    answered_call_ids: list[str] = []
    idempotency_key: str | None = None
    request_digest: str | None = None
    store: bool = True
    """False: readable only through the connection that made it (migration 024)."""


class ResponseRecord(NewResponse):
    """A response as stored."""

    after_event_seq: int
    """The chat's events after this one are this response's stream: its newest event when
    the row was written (`ResponseStore.create` reads it in the same statement)."""
    created_at: datetime
    cancel_requested_at: datetime | None
    ended_at: datetime | None
    ended_status: str | None
    """The chat's status when the turn stopped running: waiting, requires_action or error."""
    ended_error: ModelError | None
    deleted_at: datetime | None


_COLUMNS = (
    "id, chat_id, owner, turn_id, after_message_id, after_event_seq, previous_response_id,"
    " request, input_items, answered_call_ids, idempotency_key, request_digest, created_at,"
    " cancel_requested_at, ended_at, ended_status, ended_error, deleted_at, store"
)


def _record(row: asyncpg.Record) -> ResponseRecord:
    return ResponseRecord.model_validate(dict(row))


class ResponseStore:
    """Reads and writes `responses` rows."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(
        self, response: NewResponse, conn: Conn | None = None
    ) -> tuple[ResponseRecord, bool]:
        """Store the response; with an idempotency key seen before, the first one instead
        (and False). With `conn`, within that connection's transaction."""
        row = await (conn or self._pool).fetchrow(
            f"""INSERT INTO responses (id, chat_id, owner, turn_id, after_message_id,
                   after_event_seq, previous_response_id, request, input_items,
                   answered_call_ids, idempotency_key, request_digest, store)
               VALUES ($1, $2, $3, $4, $5,
                       (SELECT last_event_seq FROM chats WHERE id = $2),
                       $6, $7, $8, $9, $10, $11, $12)
               ON CONFLICT (owner, idempotency_key) DO NOTHING
               RETURNING {_COLUMNS}""",
            response.id,
            response.chat_id,
            response.owner,
            response.turn_id,
            response.after_message_id,
            response.previous_response_id,
            response.request,
            response.input_items,
            response.answered_call_ids,
            response.idempotency_key,
            response.request_digest,
            response.store,
        )
        if row is not None:
            return _record(row), True
        assert response.idempotency_key is not None
        earlier = await self.by_key(response.owner, response.idempotency_key)
        assert earlier is not None
        return earlier, False

    async def by_key(self, owner: str, idempotency_key: str) -> ResponseRecord | None:
        """The owner's response made under this idempotency key, deleted or not."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM responses WHERE owner = $1 AND idempotency_key = $2",
            owner,
            idempotency_key,
        )
        return _record(row) if row else None

    async def get(self, owner: str, response_id: str) -> ResponseRecord | None:
        """The owner's stored response, unless deleted (a `store: false` one is not
        readable by id: only its connection holds it)."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM responses"
            " WHERE id = $1 AND owner = $2 AND deleted_at IS NULL AND store",
            response_id,
            owner,
        )
        return _record(row) if row else None

    async def reread(self, response_id: str) -> ResponseRecord | None:
        """The response as it is now, stored or not; None once deleted."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM responses WHERE id = $1 AND deleted_at IS NULL",
            response_id,
        )
        return _record(row) if row else None

    async def latest_in_chat(self, chat_id: uuid.UUID) -> str | None:
        """The id of the chat's newest response, the one a continuation carries on from."""
        value = await self._pool.fetchval(
            "SELECT id FROM responses WHERE chat_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1",
            chat_id,
        )
        return str(value) if value is not None else None

    async def next_in_turn(self, response: ResponseRecord) -> ResponseRecord | None:
        """The response that answered this one's function calls, in the same turn."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM responses WHERE chat_id = $1 AND turn_id = $2"
            " AND (created_at, id) > ($3, $4) ORDER BY created_at, id LIMIT 1",
            response.chat_id,
            response.turn_id,
            response.created_at,
            response.id,
        )
        return _record(row) if row else None

    async def request_cancel(self, response_id: str) -> None:
        """Record that the client cancelled the response (its turn is interrupted)."""
        await self._pool.execute(
            "UPDATE responses SET cancel_requested_at = coalesce(cancel_requested_at, now())"
            " WHERE id = $1 AND ended_at IS NULL",
            response_id,
        )

    async def end_unstarted(self, response_id: str) -> None:
        """End a response whose input was dropped before its turn began (a cancel)."""
        await self._pool.execute(
            "UPDATE responses SET ended_at = now(), ended_status = 'waiting'"
            " WHERE id = $1 AND ended_at IS NULL",
            response_id,
        )

    async def end_if_turn_over(self, response: ResponseRecord) -> None:
        """End a response written for a turn that already ran and ended (a retried create
        whose first call died after its message was taken): the trigger saw that end
        before this row existed."""
        await self._pool.execute(
            """UPDATE responses r
                  SET ended_at = now(),
                      ended_status = CASE WHEN c.status = 'error' THEN 'error' ELSE 'waiting' END,
                      ended_error = CASE WHEN c.status = 'error' THEN c.last_error END
                 FROM chats c, queued_messages q
                WHERE r.id = $1 AND r.ended_at IS NULL AND c.id = r.chat_id
                  AND q.id = r.turn_id::uuid AND q.promoted_at IS NOT NULL
                  AND c.turn_id IS DISTINCT FROM r.turn_id""",
            response.id,
        )

    async def discard(self, response_id: str) -> None:
        """Remove a response whose input the chat refused (nothing ran for it)."""
        await self._pool.execute("DELETE FROM responses WHERE id = $1", response_id)

    async def delete(self, owner: str, response_id: str) -> bool:
        """Hide the response from every read; False if there was none to delete."""
        status = await self._pool.execute(
            "UPDATE responses SET deleted_at = now()"
            " WHERE id = $1 AND owner = $2 AND deleted_at IS NULL",
            response_id,
            owner,
        )
        return status.endswith(" 1")

    async def output_messages(self, response: ResponseRecord) -> list[StoredMessage]:
        """The transcript messages this response produced, oldest first: its turn's model
        steps and tool results after its input, up to the next response's input."""
        following = await self.next_in_turn(response)
        rows = await self._pool.fetch(
            f"""SELECT m.id, m.turn_id, m.role, m.parts, m.compressed, m.usage, m.created_at,
                      s.cost_usd, s.cost_estimated
               FROM messages m {STEP_COST_JOIN}
               WHERE m.chat_id = $1 AND m.turn_id = $2 AND m.role <> 'user'
                 AND ($3::bigint IS NULL OR m.id > $3)
                 AND ($4::bigint IS NULL OR m.id <= $4)
               ORDER BY m.id""",
            response.chat_id,
            response.turn_id,
            response.after_message_id,
            following.after_message_id if following else None,
        )
        return [StoredMessage.model_validate(dict(row)) for row in rows]

    async def last_turn_message_id(self, response: ResponseRecord) -> int | None:
        """The newest transcript message of the response's turn."""
        value = await self._pool.fetchval(
            "SELECT max(id) FROM messages WHERE chat_id = $1 AND turn_id = $2",
            response.chat_id,
            response.turn_id,
        )
        return int(value) if value is not None else None

    async def last_message_id(self, chat_id: uuid.UUID) -> int | None:
        """The newest transcript message of the chat."""
        value = await self._pool.fetchval(
            "SELECT max(id) FROM messages WHERE chat_id = $1", chat_id
        )
        return int(value) if value is not None else None
