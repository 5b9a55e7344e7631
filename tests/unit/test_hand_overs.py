"""When the gateway stops waiting for workers to take its sends."""

from __future__ import annotations

import contextlib

from api.hand_overs import WAITING_AT_ONCE, HandOvers


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
