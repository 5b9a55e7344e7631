"""An owner's running turns are counted by one query at a time: a burst of sends shares it,
and a send after it counts afresh (a turn that just ended frees its slot at once), unless a
count of a moment ago, with the turns admitted since, is under half the limit."""

from __future__ import annotations

import asyncio
import time

import pytest

import api.quotas
from api.quotas import ESTIMATE_S, _RunningTurns
from chatd.store.quotas import QuotaStore


class _SlowCount(QuotaStore):
    """A count without a database: each query takes until the test releases it."""

    def __init__(self) -> None:
        self.queries = 0
        self.running = 3
        self.release = asyncio.Event()

    async def running_turns(self, owner: str) -> int:
        self.queries += 1
        await self.release.wait()
        return self.running


async def test_sends_that_arrive_while_a_count_runs_share_it() -> None:
    store = _SlowCount()
    running = _RunningTurns(store)
    burst = [asyncio.create_task(running.of("alice")) for _ in range(50)]
    other = asyncio.create_task(running.of("bob"))
    await asyncio.sleep(0)
    store.release.set()
    assert await asyncio.gather(*burst, other) == [3] * 51
    assert store.queries == 2, "one count for alice's 50 sends, one for bob's"


async def test_a_send_after_a_count_counts_again() -> None:
    store = _SlowCount()
    store.release.set()
    running = _RunningTurns(store)
    assert await running.of("alice") == 3
    store.running = 2  # a turn ended
    assert await running.of("alice") == 2
    assert store.queries == 2


async def test_a_waiter_that_goes_away_leaves_the_count_to_the_others() -> None:
    store = _SlowCount()
    running = _RunningTurns(store)
    first = asyncio.create_task(running.of("alice"))
    second = asyncio.create_task(running.of("alice"))
    await asyncio.sleep(0)
    first.cancel()
    store.release.set()
    assert await second == 3
    assert store.queries == 1


def _admit(running: _RunningTurns, owner: str, limit: int) -> bool:
    """Whether the estimate admitted a turn (counted as admitted, as `MessageGate` does)."""
    if not running.surely_below(owner, limit):
        return False
    running.admitted(owner)
    return True


async def test_a_count_admits_sends_without_queries_while_under_half_the_limit() -> None:
    store = _SlowCount()
    store.release.set()
    running = _RunningTurns(store)
    assert not running.surely_below("alice", 10), "no count yet: nothing to estimate from"
    assert await running.of("alice") == 3
    running.admitted("alice")  # the send that counted: 4 now
    assert [_admit(running, "alice", 10) for _ in range(3)] == [True, False, False]
    assert store.queries == 1, "the fifth turn of ten was admitted without a count"
    assert not running.surely_below("bob", 10), "an estimate is the owner's own"


async def test_a_small_limit_is_always_counted() -> None:
    store = _SlowCount()
    store.release.set()
    store.running = 0
    running = _RunningTurns(store)
    await running.of("alice")
    assert not running.surely_below("alice", 1)


async def test_an_estimate_admits_for_a_moment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _SlowCount()
    store.release.set()
    running = _RunningTurns(store)
    await running.of("alice")
    assert running.surely_below("alice", 100)
    later = time.monotonic() + ESTIMATE_S + 0.01
    monkeypatch.setattr(api.quotas.time, "monotonic", lambda: later)
    assert not running.surely_below("alice", 100), "an old count admits nothing"


async def test_turns_admitted_while_a_count_runs_are_in_its_estimate() -> None:
    store = _SlowCount()
    running = _RunningTurns(store)
    counting = asyncio.create_task(running.of("alice"))
    await asyncio.sleep(0)
    running.admitted("alice")  # admitted meanwhile: the count may not see its turn
    running.admitted("alice")
    store.release.set()
    assert await counting == 3
    assert running.surely_below("alice", 12), "3 counted + 2 admitted + this one: 6 of 12"
    assert not running.surely_below("alice", 11)
