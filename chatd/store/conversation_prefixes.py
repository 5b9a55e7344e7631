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
        """Note where the conversation with this digest ends (once per response)."""
        await (conn or self._pool).execute(
            """INSERT INTO conversation_prefixes (owner, digest, chat_id, response_id, items)
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
            owner,
            digest,
            known.chat_id,
            known.response_id,
            known.items,
        )

    async def longest(self, owner: str, digests: list[bytes], limit: int) -> list[KnownPrefix]:
        """Where this owner's conversations are known to hold these prefixes: the longest
        first, then the newest."""
        rows = await self._pool.fetch(
            """SELECT chat_id, response_id, items FROM conversation_prefixes
               WHERE owner = $1 AND digest = ANY($2::bytea[])
               ORDER BY items DESC, created_at DESC LIMIT $3""",
            owner,
            digests,
            limit,
        )
        return [KnownPrefix(r["chat_id"], r["response_id"], r["items"]) for r in rows]

    async def of_response(self, response_id: str) -> tuple[bytes, int] | None:
        """The digest of a response's conversation through its input, and its items."""
        row = await self._pool.fetchrow(
            "SELECT digest, items FROM conversation_prefixes WHERE response_id = $1 LIMIT 1",
            response_id,
        )
        return (bytes(row["digest"]), int(row["items"])) if row else None
