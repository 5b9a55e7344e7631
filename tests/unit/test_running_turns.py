"""An owner's running turns are counted by one query at a time: a burst of sends shares it,
and a send after it counts afresh (a turn that just ended frees its slot at once)."""

from __future__ import annotations

import asyncio

from api.quotas import _RunningTurns
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
