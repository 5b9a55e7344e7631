"""Chat creations by Idempotency-Key: a retried `POST /chats` (or fork) finds the chat the
first made."""

from __future__ import annotations

import uuid

import asyncpg
from pydantic import BaseModel

from chatd.store.events import Conn

__all__ = ["ChatCreation", "ChatCreations", "claim_chat_id"]


class ChatCreation(BaseModel):
    """The chat id an owner's key was given, and the digest of the body that claimed it."""

    chat_id: uuid.UUID
    request_digest: str


class ChatCreations:
    """Claims chat ids for creation keys; the first claim of a key wins."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def claim(self, owner: str, key: str, request_digest: str) -> ChatCreation:
        """The creation recorded under (`owner`, `key`): a new one with a fresh chat id, or
        the one an earlier request made (whose digest may differ from `request_digest`)."""
        return await claim_chat_id(self._pool, owner, key, request_digest)


async def claim_chat_id(
    conn: Conn | asyncpg.Pool, owner: str, key: str, request_digest: str
) -> ChatCreation:
    """`ChatCreations.claim` on `conn`: inside a transaction, the claim commits (or rolls
    back) with the rest of it."""
    row = await conn.fetchrow(
        """INSERT INTO chat_creations (owner, idempotency_key, request_digest, chat_id)
           VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING chat_id, request_digest""",
        owner,
        key,
        request_digest,
        uuid.uuid4(),
    )
    if row is None:  # claimed before: this statement sees the committed claim
        row = await conn.fetchrow(
            "SELECT chat_id, request_digest FROM chat_creations"
            " WHERE owner = $1 AND idempotency_key = $2",
            owner,
            key,
        )
    assert row is not None
    return ChatCreation.model_validate(dict(row))
