"""Forks: a new chat of the same owner, with another chat's settings and its conversation up
to and including one message, copied in one transaction.

The source chat's row is share-locked while its transcript is checked and copied. Every
transcript write (a turn's begin, a step, a compaction, an edit) updates that row in its own
transaction, so none commits in between: the cut that was checked is the cut that is copied.
The source itself is not changed.
"""

from __future__ import annotations

import uuid
from typing import Literal, NamedTuple

import asyncpg
from pydantic import TypeAdapter

from chatd.answered_calls import unanswered_calls
from chatd.parts import Message, Part
from chatd.store.chat_creations import claim_chat_id
from chatd.store.events import Conn

__all__ = ["Fork", "ForkRefused", "ForkStore", "RefusalCode"]

_parts_adapter: TypeAdapter[list[Part]] = TypeAdapter(list[Part])

RefusalCode = Literal[
    "chat_not_found", "message_not_found", "message_compacted", "splits_tool_call"
]
"""Why a fork was refused (the API's error code)."""


class ForkRefused(Exception):
    """The chat can't be forked at that message; `code` says why."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        super().__init__(message)
        self.code: RefusalCode = code
        self.message = message


class Fork(NamedTuple):
    """The forked chat, the digest of the request that made it, and whether this call did."""

    chat_id: uuid.UUID
    request_digest: str
    created: bool


class ForkStore:
    """Forks chats."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def fork(
        self,
        source: uuid.UUID,
        owner: str,
        message_id: int,
        *,
        title: str | None,
        idempotency_key: str | None,
        request_digest: str,
    ) -> Fork:
        """Create a `waiting` chat with `source`'s settings (a root chat, even if `source` is
        a subagent) and a copy of its transcript up to `message_id`; `title` or the source's.

        With an `idempotency_key` the owner used before, the chat that key made (its digest
        may differ: the caller compares). Raises `ForkRefused` for a chat or message that
        isn't there, a compacted message, or a cut between tool calls and their results.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            chat_id = uuid.uuid4()
            if idempotency_key is not None:
                # Claimed in this transaction: a refused fork leaves no claim behind.
                claim = await claim_chat_id(conn, owner, idempotency_key, request_digest)
                made = await conn.fetchval("SELECT true FROM chats WHERE id = $1", claim.chat_id)
                if made or claim.request_digest != request_digest:
                    return Fork(claim.chat_id, claim.request_digest, created=False)
                chat_id = claim.chat_id
            if await conn.fetchval(_LOCK_SOURCE, source, owner) is None:
                raise ForkRefused("chat_not_found", f"chat {source} not found")
            await _check_cut(conn, source, message_id)
            await conn.execute(_COPY_CHAT, chat_id, source, title)
            await conn.execute(_COPY_MESSAGES, chat_id, source, message_id)
            return Fork(chat_id, request_digest, created=True)


async def _check_cut(conn: Conn, source: uuid.UUID, message_id: int) -> None:
    """Refuse a cut that leaves the copy a conversation no provider takes: a tool call
    without its result, or a result without its call."""
    step = await conn.fetch(_STEP_TO_CUT, source, message_id)
    if not step or step[-1]["id"] != message_id:
        raise ForkRefused("message_not_found", f"message {message_id} not found")
    cut = step[-1]
    if cut["compressed"]:
        raise ForkRefused(
            "message_compacted",
            f"message {message_id} was summarised by a compaction: it is no longer in the"
            " conversation the model sees",
        )
    if _unanswered(step) or cut["next_role"] == "tool":
        raise ForkRefused(
            "splits_tool_call",
            f"message {message_id} is between tool calls and their results: fork where the"
            " step's last result is, or before the assistant message that made the calls",
        )


def _unanswered(step: list[asyncpg.Record]) -> bool:
    """Whether the step's assistant message (the first row, if it is one) calls a tool
    whose result isn't in the tool messages after it up to the cut: they are still to come
    (the step runs, or waits for a person or a client), or come after the cut."""
    first, *rest = [
        Message(role=row["role"], parts=_parts_adapter.validate_python(row["parts"]))
        for row in step
    ]
    return bool(unanswered_calls(first, rest))


_LOCK_SOURCE = "SELECT status FROM chats WHERE id = $1 AND owner = $2 FOR SHARE"

# The messages of the step the cut is in: from the last assistant message at or before the
# cut (where the step's calls are) to the cut (its results, in the tool messages right after
# it, one per kind: run, approved, client); and the role of the message after the cut.
_STEP_TO_CUT = """
WITH step AS (
    SELECT coalesce(max(id), $2) AS first FROM messages
    WHERE chat_id = $1 AND id <= $2 AND role = 'assistant'
)
SELECT m.id, m.role, m.parts, m.compressed,
       (SELECT later.role FROM messages later
        WHERE later.chat_id = $1 AND later.id > $2
        ORDER BY later.id LIMIT 1) AS next_role
FROM messages m, step
WHERE m.chat_id = $1 AND m.id BETWEEN step.first AND $2
ORDER BY m.id
"""

# Every setting `ChatStore.create` stores, taken from the source. Status, usage, the turn,
# errors and pending calls keep their defaults: the fork is idle and has used nothing.
_COPY_CHAT = """
INSERT INTO chats (id, owner, title, title_source, model, system_prompt, dynamic_tools,
                   active_tools, max_steps, action_timeout_s, compaction_threshold,
                   tool_policy, mcp_servers, subagents, fallback_models, tool_use)
SELECT $1, owner, coalesce($3, title), CASE WHEN $3::text IS NULL THEN title_source ELSE 'user' END,
       model, system_prompt, dynamic_tools, active_tools, max_steps, action_timeout_s,
       compaction_threshold, tool_policy, mcp_servers, subagents, fallback_models, tool_use
FROM chats WHERE id = $2
"""

# The rows in order, so their new ids keep it. Each source turn gets a fresh id, and its
# messages' step keys (`<turn id>:<step>:<kind>`) the same prefix, so turn ids stay unique
# across chats and step keys within the fork. Usage is not copied: the fork spent no tokens,
# and a copied usage would count again in the owner's daily quota (migration 009's trigger)
# and in the fork's usage, which is summed over its messages.
_COPY_MESSAGES = """
WITH turns AS MATERIALIZED (
    SELECT turn_id, gen_random_uuid()::text AS copy
    FROM (SELECT DISTINCT turn_id FROM messages WHERE chat_id = $2 AND id <= $3) AS source_turns
)
INSERT INTO messages (chat_id, turn_id, step_key, role, parts, visible, compressed,
                      response_id, created_at)
SELECT $1, t.copy,
       CASE WHEN starts_with(m.step_key, m.turn_id || ':')
            THEN t.copy || substr(m.step_key, length(m.turn_id) + 1)
            ELSE m.step_key END,
       m.role, m.parts, m.visible, m.compressed, m.response_id, m.created_at
FROM messages m JOIN turns t ON t.turn_id = m.turn_id
WHERE m.chat_id = $2 AND m.id <= $3
ORDER BY m.id
"""
