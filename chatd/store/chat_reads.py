"""Chats as their owner reads them, each read in one query with the key's check: a chat
with its queue and its subagents' usage, a page of chat summaries.

`GET /chats/{id}` is the read a client polls; checking the key and reading the chat, then its
queue, were two round trips (and two statements' worth of gateway CPU) per poll; a page of
chats was read after a query of its own for the key.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TypeVar

import asyncpg
from pydantic import BaseModel

from chatd.store.chats import (
    DESCENDANTS_USAGE,
    QUEUED_COUNT,
    ROOTS_ONLY,
    SUMMARY_COLUMNS,
    ChatSummary,
)
from chatd.store.pages import Page
from chatd.store.spend import CHAT_COST

__all__ = ["ChatReads"]

View = TypeVar("View", bound=BaseModel)

# `c.*` as `ChatStore` reads it, plus the chat's queue, oldest first, as three arrays of the
# same order (a record of a jsonb column can't be decoded by asyncpg), and what its
# subagents used (NULL without any).
_CHAT_WITH_QUEUE = f"""
SELECT k.owner AS key_owner, c.*,
       q.ids AS queued_ids, q.parts AS queued_parts, q.created_at AS queued_created_at,
       ({DESCENDANTS_USAGE.format(chat="c.id")}) AS children_usage,
       {CHAT_COST.format(chat="c.id")} AS cost_usd
FROM api_keys k
LEFT JOIN chats c ON c.id = $1 AND c.owner = k.owner AND c.discard_at IS NULL
LEFT JOIN LATERAL (
    SELECT array_agg(m.id ORDER BY m.created_at, m.id) AS ids,
           jsonb_agg(m.parts ORDER BY m.created_at, m.id) AS parts,
           array_agg(m.created_at ORDER BY m.created_at, m.id) AS created_at
    FROM queued_messages m
    WHERE m.chat_id = c.id AND m.promoted_at IS NULL
) q ON c.id IS NOT NULL
WHERE k.key_hash = $2 AND k.revoked_at IS NULL
"""


# A page of the key owner's chat summaries with their queue lengths (as `ChatStore.list` read
# it, after a query for the key). `candidate` reads one row past the limit, and the running
# size of each, to tell whether more follow; the first row always fits, so a chat larger than
# the budget still gets a page. A valid key with no chats is one row of NULLs.
_KEY_AND_PAGE = f"""
WITH key AS (
    SELECT owner FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL
), candidate AS (
    SELECT {SUMMARY_COLUMNS},
           row_number() OVER w AS n,
           sum(octet_length(c.model::text) + octet_length(c.usage::text)
               + coalesce(octet_length(c.title), 0)
               + coalesce(octet_length(c.last_error::text), 0)) OVER w AS upto
    FROM chats c
    WHERE c.owner = (SELECT owner FROM key)
      AND ($2::timestamptz IS NULL OR (c.created_at, c.id) < ($2, $3))
      AND c.discard_at IS NULL
      {{roots}}
    WINDOW w AS (ORDER BY c.created_at DESC, c.id DESC ROWS UNBOUNDED PRECEDING)
    ORDER BY c.created_at DESC, c.id DESC
    LIMIT $4 + 1
), page AS (
    SELECT * FROM candidate WHERE n = 1 OR (n <= $4 AND upto <= $5)
)
SELECT key.owner AS key_owner, page.*, {QUEUED_COUNT.format(chat="page.id")},
       (SELECT count(*) FROM candidate) > (SELECT count(*) FROM page) AS more
FROM key LEFT JOIN page ON true ORDER BY page.n
"""
_KEY_AND_ROOTS = _KEY_AND_PAGE.format(roots=ROOTS_ONLY)
_KEY_AND_ALL = _KEY_AND_PAGE.format(roots="")


class ChatReads:
    """Reads a chat with its queue on behalf of an API key."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def chat_with_queue(
        self, chat_id: uuid.UUID, key_hash: str, view: type[View]
    ) -> tuple[str | None, View | None]:
        """The owner of an active API key and, if that owner has the chat, the chat's columns
        and its `queued_messages` (id, parts, created_at; oldest first) validated as `view`,
        which names the fields it shows: one validation from the row, no intermediate model.
        The chat's `usage` has `children`: its subagents' (theirs included; None without)."""
        row = await self._pool.fetchrow(_CHAT_WITH_QUEUE, chat_id, key_hash)
        if row is None:
            return None, None
        data = dict(row)
        owner = str(data.pop("key_owner"))
        if data["id"] is None:
            return owner, None
        queue = zip(
            data.pop("queued_ids") or [],
            data.pop("queued_parts") or [],
            data.pop("queued_created_at") or [],
            strict=True,
        )
        data["queued_messages"] = [
            {"id": queued_id, "parts": parts, "created_at": created_at}
            for queued_id, parts, created_at in queue
        ]
        data["usage"] = {**data["usage"], "children": data.pop("children_usage")}
        return owner, view.model_validate(data)

    async def summaries(
        self,
        key_hash: str,
        *,
        limit: int,
        before: tuple[datetime, uuid.UUID] | None,
        max_bytes: int,
        include_children: bool = False,
    ) -> tuple[str | None, Page[ChatSummary]]:
        """The owner of an active API key and a page of that owner's root chats (subagents
        too, with `include_children`), newest first, strictly before the (created_at, id)
        cursor, up to `limit` rows or `max_bytes` of their summaries' JSON, whichever comes
        first."""
        rows = await self._pool.fetch(
            _KEY_AND_ALL if include_children else _KEY_AND_ROOTS,
            key_hash,
            before[0] if before else None,
            before[1] if before else None,
            limit,
            max_bytes,
        )
        if not rows:
            return None, Page([], False)
        chats = [ChatSummary.model_validate(dict(r)) for r in rows if r["id"] is not None]
        return str(rows[0]["key_owner"]), Page(chats, bool(rows[0]["more"]))
