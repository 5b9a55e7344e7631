"""The conversations clients keep themselves, by digest: which chat (and response) a known
prefix of one ends at (`api.open_responses.prefixes`)."""

from __future__ import annotations

import uuid
from typing import NamedTuple

import asyncpg

from chatd.store.events import Conn

__all__ = ["ConversationPrefixes", "KnownPrefix"]


class KnownPrefix(NamedTuple):
    """A conversation's first `items` items end at `response_id`'s input, in `chat_id`."""

    chat_id: uuid.UUID
    response_id: str
    items: int


class ConversationPrefixes:
    """Reads and writes `conversation_prefixes`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def remember(
        self,
        owner: str,
        digest: bytes,
        known: KnownPrefix,
        conn: Conn | None = None,
    ) -> None:
        """Note where the conversation with this digest ends; the newest response wins."""
        await (conn or self._pool).execute(
            """INSERT INTO conversation_prefixes (owner, digest, chat_id, response_id, items)
               VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (owner, digest) DO UPDATE
               SET chat_id = EXCLUDED.chat_id, response_id = EXCLUDED.response_id,
                   items = EXCLUDED.items""",
            owner,
            digest,
            known.chat_id,
            known.response_id,
            known.items,
        )

    async def longest(self, owner: str, digests: list[bytes]) -> KnownPrefix | None:
        """The longest of these prefixes this owner's conversations are known to hold."""
        row = await self._pool.fetchrow(
            """SELECT chat_id, response_id, items FROM conversation_prefixes
               WHERE owner = $1 AND digest = ANY($2::bytea[])
               ORDER BY items DESC LIMIT 1""",
            owner,
            digests,
        )
        return KnownPrefix(row["chat_id"], row["response_id"], row["items"]) if row else None
