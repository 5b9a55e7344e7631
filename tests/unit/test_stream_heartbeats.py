"""How the streaming step's heartbeat timeout, its beats and the worker's throttle fit
together (the numbers are free to change; these relations are not)."""

from __future__ import annotations

from datetime import timedelta

from activities.heartbeat import LIVENESS_EVERY_S
from workers.worker import HEARTBEAT_THROTTLE
from workflows.generation import _STREAM_HEARTBEAT_TIMEOUT

BEAT = timedelta(seconds=LIVENESS_EVERY_S)


def test_two_beats_in_a_row_may_be_late_before_a_live_step_is_given_up() -> None:
    assert _STREAM_HEARTBEAT_TIMEOUT >= 3 * BEAT


def test_each_beat_is_sent_as_it_comes_not_merged_by_the_sdk() -> None:
    """The SDK sends at most one beat per throttle interval (min of ours and 0.8 x the
    timeout); a slower cadence than that is the cadence on the wire."""
    assert min(HEARTBEAT_THROTTLE, _STREAM_HEARTBEAT_TIMEOUT * 0.8) <= BEAT
