"""The approval audit: who approved or denied which tool call, when, and with what arguments.

A step's decisions are recorded in one transaction with what they change: edited arguments
replace the model's in the step's assistant message (the original kept beside them), and a
remembered approval makes the tool `auto` in the chat's policy. The first record of a call's
decision wins; a retried or competing one changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel

from chatd.store.events import Conn, append_events
from chatd.store.step_keys import StepKey
from chatd.store.transcript import StoredMessage, message_event

__all__ = [
    "Decider",
    "NewDecision",
    "ToolDecision",
    "ToolDecisionStore",
    "canonical_sha256",
]

Decision = Literal["approve", "deny"]


class NewDecision(BaseModel):
    """A person's decision on one call waiting for approval."""

    tool_call_id: str
    tool_name: str
    decision: Decision
    arguments: str
    """The JSON text of the arguments as approved: the person's edit, or the model's own (for
    a deny too: what was refused)."""
    edited: bool
    """Whether `arguments` are the person's and not the model's."""
    message: str | None = None
    """For a deny: what the model is told."""
    remember: bool = False
    """For an approval: run this tool without asking from now on."""


class Decider(BaseModel):
    """Who decided: the API key (its `api_keys.id`) and owner of a request to the gateway, or
    the `decided_by` string of an update sent straight to Temporal, recorded as given."""

    key_id: str | None = None
    owner: str | None = None
    decided_by: str | None = None


class ToolDecision(BaseModel):
    """A decision as the audit lists it."""

    tool_call_id: str
    tool_name: str
    turn_id: str
    step: int
    decision: Decision
    arguments_sha256: str
    """`canonical_sha256` of the approved (or denied) arguments."""
    edited: bool
    message: str | None
    remember: bool
    key_id: str | None
    owner: str | None
    decided_by: str | None
    decided_at: datetime


def canonical_sha256(arguments_json: str) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON: sorted keys, no spaces, UTF-8 as is,
    so the same arguments hash alike however they were spaced or ordered. Text that isn't
    JSON (a model can produce that) is hashed as given."""
    try:
        text = json.dumps(
            json.loads(arguments_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except ValueError:
        text = arguments_json
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _AlreadyDecided(Exception):
    """A call of the record has a decision: roll the whole record back."""


_INSERT = """
INSERT INTO tool_decisions (chat_id, turn_id, step, tool_call_id, tool_name, decision,
                            arguments_sha256, edited, message, remember,
                            key_id, owner, decided_by)
SELECT $1, $2, $3, d.id, d.name, d.decision, d.digest, d.edited, d.message, d.remember,
       $11, $12, $13
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::boolean[], $9::text[],
            $10::boolean[]) AS d(id, name, decision, digest, edited, message, remember)
ON CONFLICT (chat_id, turn_id, step, tool_call_id) DO NOTHING
"""

_COLUMNS = """tool_call_id, tool_name, turn_id, step, decision, arguments_sha256, edited,
message, remember, key_id, owner, decided_by, decided_at"""


class ToolDecisionStore:
    """Records and lists approval decisions."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        step: int,
        decisions: list[NewDecision],
        decider: Decider,
    ) -> bool:
        """Record the decisions on calls of step `step` of the turn, and apply them, in one
        transaction: edited approvals rewrite their `tool_call` part in the step's assistant
        message (`arguments` the approved text, `original_arguments` the model's, kept from
        the first edit), remembered approvals set their tool `auto` in the chat's policy
        (published as a `chat` event). A remembered deny changes no policy.

        True if this call wrote them; False, changing nothing, if any of the calls has a
        decision already (a retry, or a competing submission: the first wins) or the chat is
        gone. Duplicate call ids in `decisions` are a ValueError.
        """
        ids = [d.tool_call_id for d in decisions]
        if len(set(ids)) != len(ids):
            raise ValueError("each tool call gets one decision")
        if not decisions:
            return False
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                await _insert(conn, chat_id, turn_id, step, decisions, decider)
                await _apply_edits(conn, chat_id, turn_id, step, decisions)
                await _remember(conn, chat_id, decisions)
        except (_AlreadyDecided, asyncpg.ForeignKeyViolationError):
            return False
        return True

    async def list(
        self, chat_id: uuid.UUID, *, offset: int = 0, limit: int = 100
    ) -> list[ToolDecision]:
        """The chat's decisions in the order they were made (by `decided_at`; one record's
        by call id), from the `offset`th, at most `limit`. Decisions are only ever added
        after the others, so offsets are stable pages. Fetch `limit + 1` to learn whether
        another page follows."""
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM tool_decisions
                WHERE chat_id = $1
                ORDER BY decided_at, turn_id, step, tool_call_id
                OFFSET $2 LIMIT $3""",
            chat_id,
            offset,
            limit,
        )
        return [ToolDecision.model_validate(dict(r)) for r in rows]


async def _insert(
    conn: Conn,
    chat_id: uuid.UUID,
    turn_id: str,
    step: int,
    decisions: list[NewDecision],
    decider: Decider,
) -> None:
    """Insert every decision, or raise `_AlreadyDecided` if one call has one: a competing
    record's insert waits for this one's commit on the shared keys, then skips them."""
    status = await conn.execute(
        _INSERT,
        chat_id,
        turn_id,
        step,
        [d.tool_call_id for d in decisions],
        [d.tool_name for d in decisions],
        [d.decision for d in decisions],
        [canonical_sha256(d.arguments) for d in decisions],
        [d.edited for d in decisions],
        [d.message for d in decisions],
        [d.remember for d in decisions],
        decider.key_id,
        decider.owner,
        decider.decided_by,
    )
    if int(status.split()[-1]) != len(decisions):
        raise _AlreadyDecided


async def _apply_edits(
    conn: Conn, chat_id: uuid.UUID, turn_id: str, step: int, decisions: list[NewDecision]
) -> None:
    """Put the approved arguments of edited approvals into the step's assistant message, and
    publish it again (a `message` event): the model and clients see what ran. The message
    no longer matches the response the provider stored, so it stops being a chain link
    (`response_id`): the next step sends the transcript itself."""
    edits = {d.tool_call_id: d.arguments for d in decisions if d.edited and d.decision == "approve"}
    if not edits:
        return
    row = await conn.fetchrow(
        "SELECT * FROM messages WHERE chat_id = $1 AND step_key = $2 FOR UPDATE",
        chat_id,
        StepKey.assistant(step).stored(turn_id),
    )
    if row is None:  # no call to rewrite: the decisions still stand in the audit
        return
    parts: list[dict[str, Any]] = row["parts"]
    for part in parts:
        if part.get("type") == "tool_call" and part.get("id") in edits:
            if part.get("original_arguments") is None:
                part["original_arguments"] = part.get("arguments", "")
            part["arguments"] = edits[part["id"]]
    await conn.execute(
        "UPDATE messages SET parts = $2, response_id = NULL WHERE id = $1", row["id"], parts
    )
    edited = StoredMessage.model_validate({**dict(row), "parts": parts})
    await append_events(conn, chat_id, [message_event(edited)])


async def _remember(conn: Conn, chat_id: uuid.UUID, decisions: list[NewDecision]) -> None:
    """Make the tools of remembered approvals `auto` in the chat's policy."""
    remembered = {d.tool_name: "auto" for d in decisions if d.remember and d.decision == "approve"}
    if not remembered:
        return
    policy = await conn.fetchval(
        "UPDATE chats SET tool_policy = tool_policy || $2::jsonb, updated_at = now()"
        " WHERE id = $1 RETURNING tool_policy",
        chat_id,
        remembered,
    )
    await append_events(conn, chat_id, [("chat", {"tool_policy": policy})])
