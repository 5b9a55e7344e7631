"""An attempt's spend (chatd.store.spend): the settled report replaces the estimate, a report
not `flushed` commits without waiting for the disk, in its own transaction only, and a turn's
last step saved with its settled spend finishes the turn at the settled cost."""

from __future__ import annotations

import uuid

import asyncpg

from chatd.models import ModelConfig
from chatd.parts import TextPart, Usage
from chatd.store.chats import ChatStore
from chatd.store.events import EventLog
from chatd.store.spend import AttemptKey, SettledSpend, SpendStore
from chatd.store.step_keys import StepKey, stored_key
from chatd.store.transcript import NewMessage, TranscriptStore
from chatd.store.turns import TurnStore


async def _attempt(pool: asyncpg.Pool) -> AttemptKey:
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig())
    return AttemptKey(chat_id=chat.id, turn_id=str(uuid.uuid4()), step_key="a0", attempt="1.1")


async def _recorded(pool: asyncpg.Pool, key: AttemptKey) -> tuple[int, float, bool]:
    row = await pool.fetchrow(
        "SELECT (usage->>'output_tokens')::int AS out, cost_usd, estimated FROM step_spend"
        " WHERE chat_id = $1 AND step_key = $2 AND attempt = $3",
        key.chat_id,
        key.step_key,
        key.attempt,
    )
    assert row is not None
    return row["out"], row["cost_usd"], row["estimated"]


async def _commit_setting(pool: asyncpg.Pool, key: AttemptKey, *, flushed: bool) -> str:
    """`synchronous_commit` in a transaction (set `on` first) after a record in it."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL synchronous_commit = on")
        store = SpendStore(conn)  # type: ignore[arg-type]  # a connection, for its transaction
        await store.record(
            key, model="m", usage=Usage(), cost_usd=0.0, estimated=True, flushed=flushed
        )
        setting: str = await conn.fetchval("SHOW synchronous_commit")
    return setting


async def test_a_settled_report_unflushed_replaces_the_estimate_and_is_kept(
    pool: asyncpg.Pool,
) -> None:
    key = await _attempt(pool)
    store = SpendStore(pool)
    await store.record(key, model="m", usage=Usage(input_tokens=10), cost_usd=0.5, estimated=True)
    await store.record(
        key,
        model="m",
        usage=Usage(input_tokens=10, output_tokens=7),
        cost_usd=0.75,
        estimated=False,
        flushed=False,
    )
    assert await _recorded(pool, key) == (7, 0.75, False)
    # A late estimate (a retried write) doesn't undo the report.
    await store.record(key, model="m", usage=Usage(input_tokens=10), cost_usd=0.5, estimated=True)
    assert await _recorded(pool, key) == (7, 0.75, False)


async def test_only_a_record_not_flushed_turns_the_commits_wait_off(pool: asyncpg.Pool) -> None:
    key = await _attempt(pool)
    assert await _commit_setting(pool, key, flushed=False) == "off"
    assert await _commit_setting(pool, key, flushed=True) == "on"
    # The setting was the transaction's own.
    async with pool.acquire() as conn:
        before = await conn.fetchval("SHOW synchronous_commit")
        await SpendStore(conn).record(  # type: ignore[arg-type]
            key, model="m", usage=Usage(), cost_usd=0.0, estimated=True, flushed=False
        )
        assert await conn.fetchval("SHOW synchronous_commit") == before


async def _turn_cost(pool: asyncpg.Pool, chat_id: uuid.UUID) -> object:
    """The `cost_usd` of the chat's last `status` event."""
    events = (await EventLog(pool).read_page(chat_id, 0)).events
    return [e for e in events if e.event == "status"][-1].data["cost_usd"]


async def _begun_turn(pool: asyncpg.Pool) -> tuple[uuid.UUID, str, AttemptKey]:
    """A chat in a turn, and the key of the attempt that streams its first step."""
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig())
    queued, _ = await TranscriptStore(pool).enqueue(chat.id, [TextPart(text="hi")], None)
    turn_id = str(queued.id)
    assert await TurnStore(pool).begin(chat.id, turn_id)
    step_key = stored_key(turn_id, StepKey.assistant(0))
    return (
        chat.id,
        turn_id,
        AttemptKey(chat_id=chat.id, turn_id=turn_id, step_key=step_key, attempt="1.1"),
    )


async def test_a_last_step_saved_with_its_settled_spend_ends_the_turn_at_that_cost(
    pool: asyncpg.Pool,
) -> None:
    chat_id, turn_id, key = await _begun_turn(pool)
    turns, spend = TurnStore(pool), SpendStore(pool)
    # An earlier step of the turn, settled; then the last step's estimate, as it went out.
    earlier = key.model_copy(update={"step_key": "earlier"})
    await spend.record(earlier, model="m", usage=Usage(), cost_usd=0.25, estimated=False)
    await spend.record(key, model="m", usage=Usage(input_tokens=9), cost_usd=0.5, estimated=True)

    usage = Usage(input_tokens=9, output_tokens=3)
    step = NewMessage(StepKey.assistant(0), "assistant", [TextPart(text="done")], usage)
    settled = SettledSpend(key=key, model="m", cost_usd=0.125)
    saved = await turns.save_last_step(chat_id, turn_id, step, settled)

    assert saved is not None and saved[1]  # the turn finished with it
    assert await _recorded(pool, key) == (3, 0.125, False)
    assert await _turn_cost(pool, chat_id) == 0.375  # the settled cost, not the estimate's
    # A lost attempt's save finds the step saved: nothing changes, the report stays.
    again = SettledSpend(key=key, model="m", cost_usd=9.0)
    assert await turns.save_last_step(chat_id, turn_id, step, again) is None
    assert await _recorded(pool, key) == (3, 0.125, False)


async def test_a_last_step_whose_model_has_no_price_ends_the_turn_at_no_cost(
    pool: asyncpg.Pool,
) -> None:
    chat_id, turn_id, key = await _begun_turn(pool)
    step = NewMessage(StepKey.assistant(0), "assistant", [TextPart(text="done")], Usage())
    settled = SettledSpend(key=key, model="m", cost_usd=None)
    assert await TurnStore(pool).save_last_step(chat_id, turn_id, step, settled)
    assert await _turn_cost(pool, chat_id) is None
