"""Editing a user message: the transcript is cut at the message and the new text queued,
in one transaction under the chat's row lock.

A turn begins by locking the chat's row (to mark it running), so it can't begin between the
busy check and the cut: either it began before (the edit is refused with 409) or it waits
for the edit to commit (and then runs on the edited transcript). An `Idempotency-Key`
names the edit: a retry (after a 503, say) finds the message it queued instead of the
message it deleted, and is answered as the first call was.
"""

from __future__ import annotations

import uuid

import asyncpg

from api.errors import ApiError
from api.idempotency import check_same_request
from chatd.chat_status import BUSY
from chatd.parts import Part
from chatd.store.events import Conn, append_events
from chatd.store.transcript import QueuedMessage

__all__ = ["cut_and_queue"]

"""Statuses in which a turn runs: a send may wait behind it, an edit may not."""

_QUEUED = "id, parts, client_message_id, created_at, request_digest"


async def cut_and_queue(
    pool: asyncpg.Pool,
    chat_id: uuid.UUID,
    message_id: int,
    parts: list[Part],
    idempotency_key: str | None,
    request_digest: str,
) -> tuple[QueuedMessage, bool]:
    """Delete user message `message_id` and everything after it, and queue `parts` as a new
    message: the queued message, and False if a call with the same key had done it already.

    Raises `ApiError` while a turn runs (409), for a missing (404), non-user (400) or
    compacted (409) message, and for the key of an edit with another body (422).
    """
    client_message_id = _client_message_id(message_id, idempotency_key)
    async with pool.acquire() as conn, conn.transaction():
        status = await conn.fetchval("SELECT status FROM chats WHERE id = $1 FOR UPDATE", chat_id)
        if client_message_id is not None:
            row = await conn.fetchrow(
                f"SELECT {_QUEUED} FROM queued_messages"
                " WHERE chat_id = $1 AND client_message_id = $2",
                chat_id,
                client_message_id,
            )
            if row is not None:
                earlier = QueuedMessage.model_validate(dict(row))
                check_same_request(earlier.request_digest, request_digest)
                return earlier, False
        if status in BUSY:
            raise ApiError(409, "chat_busy", "a turn is running", {"status": status})
        await _check_editable(conn, chat_id, message_id)
        await conn.execute(
            "DELETE FROM messages WHERE chat_id = $1 AND id >= $2", chat_id, message_id
        )
        await append_events(conn, chat_id, [("transcript_edited", {"from_message_id": message_id})])
        row = await conn.fetchrow(
            "INSERT INTO queued_messages (id, chat_id, parts, client_message_id, request_digest)"
            f" VALUES ($1, $2, $3, $4, $5) RETURNING {_QUEUED}",
            uuid.uuid4(),
            chat_id,
            [p.model_dump(exclude_none=True) for p in parts],
            client_message_id,
            request_digest,
        )
        assert row is not None
        return QueuedMessage.model_validate(dict(row)), True


def _client_message_id(message_id: int, idempotency_key: str | None) -> str | None:
    """The key an edit is stored under, among the chat's sends' keys: it names the edit of
    one message (the same key on another message is another edit)."""
    return f"edit:{message_id}:{idempotency_key}" if idempotency_key else None


async def _check_editable(conn: Conn, chat_id: uuid.UUID, message_id: int) -> None:
    row = await conn.fetchrow(
        "SELECT role, compressed FROM messages WHERE chat_id = $1 AND id = $2",
        chat_id,
        message_id,
    )
    if row is None:
        raise ApiError(404, "message_not_found", f"message {message_id} not found")
    if row["role"] != "user":
        raise ApiError(400, "not_a_user_message", "only user messages can be edited")
    if row["compressed"]:
        raise ApiError(409, "message_compacted", "the message was summarised by a compaction")
