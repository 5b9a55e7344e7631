"""Quota limits, the usage they are checked against, and stream leases, in Postgres: so every
gateway enforces the same numbers."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
from pydantic import BaseModel, Field

from chatd.chat_status import busy_sql

__all__ = [
    "BUILT_IN_LIMITS",
    "DEFAULTS_OWNER",
    "DailyUsage",
    "LimitOverrides",
    "Limits",
    "QuotaStore",
    "StreamLease",
]

DEFAULTS_OWNER = "*"
"""The `owner_limits` row whose values apply to every owner without a value of their own."""


class Limits(BaseModel):
    """The limits one owner (and each of its keys) runs under."""

    requests_per_s: float = Field(gt=0)
    """Requests per second per key, refilling a bucket of `request_burst`."""
    request_burst: int = Field(gt=0)
    running_turns: int = Field(ge=0)
    """Turns running (or waiting for tool results or approvals) at once, per owner."""
    streams: int = Field(ge=0)
    """Open SSE streams per key."""
    streams_per_chat: int = Field(ge=0)
    """Open SSE streams per key on one chat."""
    queued_messages: int = Field(ge=0)
    """Messages waiting behind a chat's running turn, per chat."""
    input_tokens_per_day: int | None = Field(default=None, ge=0)
    """Input tokens per owner and UTC day; None: no budget."""
    output_tokens_per_day: int | None = Field(default=None, ge=0)
    usd_per_day: float | None = Field(default=None, ge=0)
    """What the owner's model steps may cost per UTC day: a turn pauses rather than go
    over (`chatd.budgets`); None: no budget."""
    usd_per_month: float | None = Field(default=None, ge=0)


BUILT_IN_LIMITS = Limits(
    requests_per_s=50,
    request_burst=100,
    running_turns=100,
    streams=100,
    streams_per_chat=10,
    queued_messages=20,
)
"""What applies where neither the owner's row nor the defaults row sets a value."""


class LimitOverrides(BaseModel):
    """An `owner_limits` row: None leaves the value to the default."""

    requests_per_s: float | None = Field(default=None, gt=0)
    request_burst: int | None = Field(default=None, gt=0)
    running_turns: int | None = Field(default=None, ge=0)
    streams: int | None = Field(default=None, ge=0)
    streams_per_chat: int | None = Field(default=None, ge=0)
    queued_messages: int | None = Field(default=None, ge=0)
    input_tokens_per_day: int | None = Field(default=None, ge=0)
    output_tokens_per_day: int | None = Field(default=None, ge=0)
    usd_per_day: float | None = Field(default=None, ge=0)
    usd_per_month: float | None = Field(default=None, ge=0)


class StreamLease(BaseModel):
    """A stream slot taken (`lease_id`), or not; and the key's streams before it."""

    lease_id: uuid.UUID | None
    all_chats: int
    this_chat: int


class DailyUsage(BaseModel):
    """Tokens one owner used today (UTC) and the seconds until the day rolls over."""

    input_tokens: int
    output_tokens: int
    seconds_to_next_day: float
    cost_usd: float = 0.0


_LIMIT_COLUMNS = list(LimitOverrides.model_fields)

# Serialises the stream leases of one key across gateways, so two opens can't both take its
# last slot.
_LEASE_LOCK = (
    "SELECT set_config('synchronous_commit', 'off', true),"
    " pg_advisory_xact_lock(hashtextextended('stream_leases:' || $1, 0))"
)
"""The lock, for a transaction that takes a lease: committed without waiting for the flush.
A lease is the gateway's count of a key's open streams, read by no client; one lost to a
database crash only lets that key open a stream more until its streams end. Not waiting
keeps the flush off the path of every stream's opening."""


class QuotaStore:
    """Reads and writes limits; counts running turns, today's usage and stream leases."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def limits(self, owner: str) -> Limits:
        """The owner's limits: its own values, else the defaults row's, else the built-in."""
        rows = await self._pool.fetch(
            f"SELECT owner, {', '.join(_LIMIT_COLUMNS)} FROM owner_limits"
            " WHERE owner = $1 OR owner = $2",
            owner,
            DEFAULTS_OWNER,
        )
        merged = BUILT_IN_LIMITS.model_dump()
        # The defaults row first, so the owner's own values win.
        for row in sorted(rows, key=lambda r: r["owner"] != DEFAULTS_OWNER):
            merged.update({k: row[k] for k in _LIMIT_COLUMNS if row[k] is not None})
        return Limits.model_validate(merged)

    async def overrides(self, owner: str) -> LimitOverrides:
        """The owner's own row (`DEFAULTS_OWNER`: the defaults row); all None if it has none."""
        row = await self._pool.fetchrow(
            f"SELECT {', '.join(_LIMIT_COLUMNS)} FROM owner_limits WHERE owner = $1", owner
        )
        return LimitOverrides.model_validate(dict(row) if row else {})

    async def set_limits(self, owner: str, overrides: LimitOverrides) -> None:
        """Replace the owner's row (`DEFAULTS_OWNER`: the defaults); applies within a cache
        lifetime on every gateway."""
        values = overrides.model_dump()
        await self._pool.execute(
            f"""INSERT INTO owner_limits (owner, {", ".join(_LIMIT_COLUMNS)})
                VALUES ($1, {", ".join(f"${i + 2}" for i in range(len(_LIMIT_COLUMNS)))})
                ON CONFLICT (owner) DO UPDATE SET
                {", ".join(f"{c} = EXCLUDED.{c}" for c in _LIMIT_COLUMNS)}, updated_at = now()""",
            owner,
            *(values[c] for c in _LIMIT_COLUMNS),
        )

    async def running_turns(self, owner: str) -> int:
        """The owner's chats in a turn now."""
        value = await self._pool.fetchval(_RUNNING_TURNS, owner)
        return int(value)

    async def turns_in_flight(self, owner: str) -> int:
        """The owner's chats in a turn now, or about to begin one (a message waits for a
        chat that is not in a turn yet): what a subagent's spawn is weighed against, as its
        siblings spawned a moment earlier may not have begun."""
        value = await self._pool.fetchval(_TURNS_IN_FLIGHT, owner)
        return int(value)

    async def queued_messages(self, chat_id: uuid.UUID) -> int:
        """The chat's messages waiting for a turn."""
        value = await self._pool.fetchval(
            "SELECT count(*) FROM queued_messages WHERE chat_id = $1 AND promoted_at IS NULL",
            chat_id,
        )
        return int(value)

    async def usage_today(self, owner: str) -> DailyUsage:
        """Tokens the owner's recorded model steps used today (UTC)."""
        row = await self._pool.fetchrow(
            """SELECT coalesce(u.input_tokens, 0) AS input_tokens,
                      coalesce(u.output_tokens, 0) AS output_tokens,
                      coalesce(u.cost_usd, 0) AS cost_usd,
                      extract(epoch FROM (d.today + 1) - (now() AT TIME ZONE 'UTC'))
                          AS seconds_to_next_day
               FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS today) d
               LEFT JOIN owner_daily_usage u ON u.owner = $1 AND u.day = d.today""",
            owner,
        )
        assert row is not None
        return DailyUsage.model_validate(dict(row))

    async def take_stream_lease(
        self, key_hash: str, chat_id: uuid.UUID, limits: Limits, lasts: timedelta
    ) -> StreamLease:
        """A lease on one of the key's stream slots, if it holds fewer than its limits (all
        its streams, and those on this chat)."""
        lease_id = uuid.uuid4()
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LEASE_LOCK, key_hash)
            row = await conn.fetchrow(
                """WITH lapsed AS (
                       DELETE FROM stream_leases WHERE key_hash = $1 AND expires_at <= now()
                   ), held AS (
                       SELECT count(*) AS all_chats,
                              count(*) FILTER (WHERE chat_id = $3) AS this_chat
                       FROM stream_leases WHERE key_hash = $1 AND expires_at > now()
                   ), taken AS (
                       INSERT INTO stream_leases (id, key_hash, chat_id, expires_at)
                       SELECT $2, $1, $3, now() + $6::interval FROM held
                       WHERE held.all_chats < $4 AND held.this_chat < $5
                       RETURNING id
                   )
                   SELECT (SELECT id FROM taken) AS lease_id, all_chats, this_chat FROM held""",
                key_hash,
                lease_id,
                chat_id,
                limits.streams,
                limits.streams_per_chat,
                lasts,
            )
        assert row is not None
        return StreamLease.model_validate(dict(row))

    async def extend_stream_leases(
        self, leases: dict[uuid.UUID, str], lasts: timedelta
    ) -> set[uuid.UUID]:
        """Extend these leases (lease id: key hash) of streams still open; those whose key is
        gone or revoked are not extended, and returned: their streams must end."""
        ids, hashes = list(leases), list(leases.values())
        async with self._pool.acquire() as conn:
            valid = {
                r["key_hash"]
                for r in await conn.fetch(
                    "SELECT key_hash FROM api_keys"
                    " WHERE key_hash = ANY($1::text[]) AND revoked_at IS NULL",
                    sorted(set(hashes)),
                )
            }
            live = [(i, h) for i, h in zip(ids, hashes, strict=True) if h in valid]
            # An upsert: a lease that lapsed (the database was out of reach) is taken again.
            await conn.execute(
                """INSERT INTO stream_leases (id, key_hash, expires_at)
                   SELECT id, key_hash, now() + $3::interval
                   FROM unnest($1::uuid[], $2::text[]) AS t(id, key_hash)
                   ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at""",
                [i for i, _ in live],
                [h for _, h in live],
                lasts,
            )
        return {i for i, h in zip(ids, hashes, strict=True) if h not in valid}

    async def release_stream_lease(self, lease_id: uuid.UUID) -> None:
        """Free the slot of a stream that ended."""
        await self._pool.execute("DELETE FROM stream_leases WHERE id = $1", lease_id)


_RUNNING_TURNS = f"SELECT count(*) FROM chats WHERE owner = $1 AND {busy_sql()}"
_TURNS_IN_FLIGHT = f"""SELECT count(*) FROM chats c
WHERE c.owner = $1
  AND ({busy_sql("c.status")}
       OR EXISTS (SELECT 1 FROM queued_messages q
                   WHERE q.chat_id = c.id AND q.promoted_at IS NULL))"""
