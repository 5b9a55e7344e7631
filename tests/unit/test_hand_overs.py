"""When the gateway stops waiting for workers to take its sends, and how it hands them over
in the background."""

from __future__ import annotations

import contextlib
import uuid
from typing import cast

from api.hand_overs import WAITING_AT_ONCE, HandOvers
from chatd.store.transcript import TranscriptStore


async def test_the_gateway_is_behind_while_enough_sends_wait_or_after_one_timed_out() -> None:
    hand_overs = HandOvers()
    assert not hand_overs.behind
    with contextlib.ExitStack() as waits:
        for _ in range(WAITING_AT_ONCE - 1):
            waits.enter_context(hand_overs.waiting())
        assert not hand_overs.behind
        waits.enter_context(hand_overs.waiting())
        assert hand_overs.behind, "a burst's first wave: the next send doesn't wait"
    assert not hand_overs.behind
    hand_overs.fell_behind()
    assert hand_overs.behind


async def test_a_background_hand_over_is_retried_until_it_lands() -> None:
    hand_overs = HandOvers()
    calls: list[int] = []

    async def flaky() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise ConnectionError("Temporal away for a moment")

    hand_overs.in_background("m1", flaky)
    await hand_overs.drain(within_s=30)
    assert calls == [0, 1]


class _Marks:
    """Stands in for the transcript store: keeps each write of marks."""

    def __init__(self) -> None:
        self.writes: list[list[uuid.UUID]] = []

    async def handed_over(self, queued_ids: list[uuid.UUID]) -> None:
        self.writes.append(list(queued_ids))


async def test_marks_made_together_are_written_together() -> None:
    hand_overs = HandOvers()
    marks = _Marks()
    store = cast(TranscriptStore, marks)
    first, second, later = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    hand_overs.mark_soon(store, [first])
    hand_overs.mark_soon(store, [second])
    await hand_overs.drain(within_s=30)
    hand_overs.mark_soon(store, [later])
    await hand_overs.drain(within_s=30)
    assert marks.writes == [[first, second], [later]]
