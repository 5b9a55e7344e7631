"""What model steps cost, as they happen, and the budgets it is weighed against.

Each attempt of a step that reached a provider is one `step_spend` row: an estimate written
as its request goes out, settled with the provider's reported usage when its stream ends. An
attempt lost with its worker keeps its estimate, marked as one; a retry is an attempt of its
own. So a crash neither loses what the provider billed nor counts it twice.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg
from pydantic import BaseModel

from chatd.budgets import PendingBudget
from chatd.parts import Usage
from chatd.store.events import Conn

__all__ = [
    "CHAT_COST",
    "STEP_COST_JOIN",
    "TURN_COST",
    "AttemptKey",
    "BudgetDecision",
    "DecidedBudget",
    "SettledSpend",
    "SpendStore",
    "budgets_sql",
    "settled_spend_sql",
    "turn_cost_settling_sql",
]


class AttemptKey(BaseModel):
    """One attempt of one model step."""

    chat_id: uuid.UUID
    turn_id: str
    step_key: str
    """The step's assistant message's stored key (`messages.step_key`)."""
    attempt: str
    """`<the workflow's attempt>.<Temporal's attempt>`: unique per try that was sent."""


class DecidedBudget(BaseModel):
    """A decision as the budget audit lists it."""

    turn_id: str
    budget: str
    decision: str
    add_usd: float | None
    key_id: uuid.UUID | None
    """The API key that decided (None: an operator through Temporal)."""
    created_at: datetime


class BudgetDecision(BaseModel):
    """A person's answer to a turn paused on a budget."""

    add_usd: float | None = None
    stop: bool = False
    key_id: uuid.UUID | None = None
    """The API key that decided (None: an operator, or Temporal directly)."""


# The attempt's row, with the chats above it and the turns they run. A settled row (the
# provider's report) is never replaced.
_ANCESTORS = """up (id) AS (
    SELECT parent_chat_id FROM chats WHERE id = {chat} AND parent_chat_id IS NOT NULL
    UNION ALL
    SELECT c.parent_chat_id FROM chats c JOIN up ON c.id = up.id WHERE c.parent_chat_id IS NOT NULL
)"""
"""The CTE `up` of a `WITH RECURSIVE` that writes a spend row: the chats above chat {chat}."""

_UPSERT = """INSERT INTO step_spend AS s (chat_id, step_key, attempt, turn_id, owner, model, usage,
                             cost_usd, estimated, ancestor_chats, ancestor_turns)
SELECT {chat}, {step_key}, {attempt}, {turn}, c.owner, {model}, {usage}, {cost}, {estimated},
       coalesce((SELECT array_agg(id) FROM up), '{{}}'),
       coalesce((SELECT array_agg(a.turn_id) FROM up JOIN chats a ON a.id = up.id
                 WHERE a.turn_id IS NOT NULL), '{{}}')
FROM chats c{commit} WHERE c.id = {chat}
ON CONFLICT (chat_id, step_key, attempt) DO UPDATE
    SET usage = EXCLUDED.usage, cost_usd = EXCLUDED.cost_usd, estimated = EXCLUDED.estimated
    WHERE s.estimated"""
"""An attempt's spend, over `up`: an estimate is replaced, a settled report is kept."""


def _record_sql(commit: str) -> str:
    upsert = _UPSERT.format(
        chat="$1",
        step_key="$2",
        attempt="$3",
        turn="$4",
        model="$5",
        usage="$6",
        cost="$7",
        estimated="$8",
        commit=commit,
    )
    return f"WITH RECURSIVE {_ANCESTORS.format(chat='$1')}\n{upsert}"


_RECORD_FLUSHED = _record_sql("")
# The statement's own transaction commits without waiting for its WAL to reach the disk.
_RECORD_UNFLUSHED = _record_sql(
    ", LATERAL (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed"
)


class SettledSpend(BaseModel):
    """An attempt's settled report, for a statement that writes it beside the step's save
    (`settled_spend_sql`)."""

    key: AttemptKey
    model: str
    cost_usd: float | None


def settled_spend_sql(
    *, chat: str, step_key: str, attempt: str, turn: str, model: str, usage: str, cost: str
) -> str:
    """The CTEs `up` and `settled` of a `WITH RECURSIVE` (SQL expressions: parameters): the
    attempt's settled report replaces its estimate; `settled` has its cost, or no row if it
    was settled before."""
    upsert = _UPSERT.format(
        chat=chat,
        step_key=step_key,
        attempt=attempt,
        turn=turn,
        model=model,
        usage=usage,
        cost=cost,
        estimated="false",
        commit="",
    )
    return f"{_ANCESTORS.format(chat=chat)}, settled AS (\n{upsert}\nRETURNING s.cost_usd)"


def turn_cost_settling_sql(*, turn: str, chat: str, step_key: str, attempt: str) -> str:
    """SQL: `TURN_COST`'s in a statement with `settled_spend_sql`'s CTEs, the attempt at its
    settled cost: the statement's snapshot still has its estimate."""
    attempt_row = f"s.chat_id = {chat} AND s.step_key = {step_key} AND s.attempt = {attempt}"
    return f"""(SELECT sum(t.cost_usd) FROM (
        SELECT s.cost_usd FROM step_spend s
        WHERE (s.turn_id = {turn} OR s.ancestor_turns @> ARRAY[{turn}]) AND NOT ({attempt_row})
        UNION ALL
        SELECT cost_usd FROM settled
        UNION ALL
        SELECT s.cost_usd FROM step_spend s WHERE {attempt_row} AND NOT EXISTS (SELECT FROM settled)
    ) AS t)"""


_TURN_ID_AS_UUID = (
    "CASE WHEN {t} ~ '^[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$'"
    " THEN {t}::uuid END"
)

CHAT_COST = """(SELECT coalesce(sum(s.cost_usd), 0) FROM step_spend s
    WHERE s.chat_id = {chat} OR s.ancestor_chats @> ARRAY[{chat}])"""
"""SQL: what a chat and its subagents cost (`.format(chat=<its id>)`)."""

STEP_COST_JOIN = """LEFT JOIN LATERAL (
    SELECT sum(cost_usd) AS cost_usd, bool_or(estimated) AS cost_estimated FROM step_spend
    WHERE step_spend.chat_id = m.chat_id AND step_spend.step_key = m.step_key
    HAVING count(*) > 0
) s ON m.role = 'assistant'"""
"""SQL: the `cost_usd` and `cost_estimated` of `messages` row `m`, a model step (its
attempts' spend summed; NULL for any other message)."""

TURN_COST = """(SELECT sum(s.cost_usd) FROM step_spend s
    WHERE s.turn_id = {turn} OR s.ancestor_turns @> ARRAY[{turn}])"""
"""SQL: what a turn cost, its subagents' steps included; NULL when nothing was priced
(`.format(turn=<its id, as text>)`)."""


def budgets_sql(chat: str, turn: str) -> str:
    """Every budget over chat `chat`'s step in turn `turn` (SQL expressions: parameters),
    a row each, as `BudgetState`: the turn's and the chat's, those of the chats above it (a
    subagent's spend counts toward them), and the owner's day and month."""
    return f"""
WITH RECURSIVE chain (id, parent_chat_id, budget_usd, turn_id) AS (
    SELECT id, parent_chat_id, budget_usd, {turn}::text FROM chats WHERE id = {chat}
    UNION ALL
    SELECT c.id, c.parent_chat_id, c.budget_usd, c.turn_id
    FROM chats c JOIN chain ON c.id = chain.parent_chat_id
), me AS (
    SELECT owner FROM chats WHERE id = {chat}
), limits AS (
    SELECT coalesce(own.usd_per_day, dflt.usd_per_day) AS per_day,
           coalesce(own.usd_per_month, dflt.usd_per_month) AS per_month
    FROM me
    LEFT JOIN owner_limits own ON own.owner = me.owner
    LEFT JOIN owner_limits dflt ON dflt.owner = '*'
), today AS (
    SELECT (now() AT TIME ZONE 'UTC')::date AS day
)
SELECT 'turn' AS budget, q.max_cost_usd AS limit_usd, chain.id::text AS holder,
       chain.turn_id, coalesce({TURN_COST.format(turn="chain.turn_id")}, 0) AS spent_usd
FROM chain JOIN queued_messages q ON q.id = {_TURN_ID_AS_UUID.format(t="chain.turn_id")}
WHERE q.max_cost_usd IS NOT NULL
UNION ALL
SELECT 'chat', chain.budget_usd, chain.id::text, NULL, {CHAT_COST.format(chat="chain.id")}
FROM chain WHERE chain.budget_usd IS NOT NULL
UNION ALL
SELECT 'owner_day', limits.per_day, me.owner, NULL,
       coalesce((SELECT u.cost_usd FROM owner_daily_usage u, today
                  WHERE u.owner = me.owner AND u.day = today.day), 0)
FROM limits, me WHERE limits.per_day IS NOT NULL
UNION ALL
SELECT 'owner_month', limits.per_month, me.owner, NULL,
       coalesce((SELECT sum(u.cost_usd) FROM owner_daily_usage u, today
                  WHERE u.owner = me.owner AND u.day >= date_trunc('month', today.day)::date), 0)
FROM limits, me WHERE limits.per_month IS NOT NULL
"""


_DECIDED = """
INSERT INTO budget_decisions (chat_id, turn_id, pause, budget, add_usd, decision, key_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (turn_id, pause) DO NOTHING RETURNING id
"""


class SpendStore:
    """Records what each step attempt cost; reads the budgets over a step."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(
        self,
        key: AttemptKey,
        *,
        model: str,
        usage: Usage,
        cost_usd: float | None,
        estimated: bool,
        flushed: bool = True,
    ) -> None:
        """The attempt's spend: an estimate (kept unless settled), or the provider's report.

        Not `flushed`, the call returns before the record is on disk: for a record a
        durable write follows at once, whose commit flushes it too (the WAL is flushed in
        order). A crash in between loses this record alone."""
        await self._pool.execute(
            _RECORD_FLUSHED if flushed else _RECORD_UNFLUSHED,
            key.chat_id,
            key.step_key,
            key.attempt,
            key.turn_id,
            model,
            usage.model_dump(),
            cost_usd,
            estimated,
        )

    async def chat_cost(self, chat_id: uuid.UUID) -> float:
        """What the chat and its subagents cost."""
        return float(await self._pool.fetchval(f"SELECT {CHAT_COST.format(chat='$1')}", chat_id))

    async def decisions(self, chat_id: uuid.UUID) -> list[DecidedBudget]:
        """The chat's budget decisions, oldest first: who raised what, or ended a turn."""
        rows = await self._pool.fetch(
            "SELECT turn_id, budget, decision, add_usd, key_id, created_at"
            " FROM budget_decisions WHERE chat_id = $1 ORDER BY id",
            chat_id,
        )
        return [DecidedBudget.model_validate(dict(r)) for r in rows]

    async def decide(
        self, chat_id: uuid.UUID, turn_id: str, pending: PendingBudget, decision: BudgetDecision
    ) -> bool:
        """Record the decision on this pause and, for a raise, raise the budget it names, in
        one transaction; False if the pause was decided already (nothing changed)."""
        pause = f"{pending.step}:{pending.budget}:{pending.limit_usd!r}:{pending.spent_usd!r}"
        add = decision.add_usd or 0.0
        async with self._pool.acquire() as conn, conn.transaction():
            decided = await conn.fetchval(
                _DECIDED,
                chat_id,
                turn_id,
                pause,
                pending.budget,
                decision.add_usd,
                "stop" if decision.stop else "raise",
                decision.key_id,
            )
            if decided is None:
                return False
            if not decision.stop:
                await _raise(conn, pending, add)
        return True


async def _raise(conn: Conn, pending: PendingBudget, add: float) -> None:
    """Raise the budget `pending` names by `add` USD."""
    match pending.budget:
        case "turn":
            await conn.execute(
                "UPDATE queued_messages SET max_cost_usd = max_cost_usd + $2 WHERE id = $1",
                uuid.UUID(pending.turn_id or ""),
                add,
            )
        case "chat":
            await conn.execute(
                "UPDATE chats SET budget_usd = budget_usd + $2 WHERE id = $1",
                uuid.UUID(pending.holder),
                add,
            )
        case "owner_day" | "owner_month":
            column = "usd_per_day" if pending.budget == "owner_day" else "usd_per_month"
            await conn.execute(
                f"INSERT INTO owner_limits (owner, {column}) VALUES ($1, $2)"
                f" ON CONFLICT (owner) DO UPDATE SET {column} = EXCLUDED.{column},"
                " updated_at = now()",
                pending.holder,
                pending.limit_usd + add,
            )
