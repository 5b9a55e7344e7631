"""How the streaming step's heartbeat timeout, its beats and the worker's throttle fit
together (the numbers are free to change; these relations are not)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio.testing import ActivityEnvironment

from activities.heartbeat import LIVENESS_EVERY_S, first_liveness_beat
from workers.worker import HEARTBEAT_THROTTLE
from workflows.generation import _STREAM_HEARTBEAT_TIMEOUT

BEAT = timedelta(seconds=LIVENESS_EVERY_S)


def test_two_beats_in_a_row_may_be_late_before_a_live_step_is_given_up() -> None:
    assert _STREAM_HEARTBEAT_TIMEOUT >= 3 * BEAT


def test_each_beat_is_sent_as_it_comes_not_merged_by_the_sdk() -> None:
    """The SDK sends at most one beat per throttle interval (min of ours and 0.8 x the
    timeout); a slower cadence than that is the cadence on the wire."""
    assert min(HEARTBEAT_THROTTLE, _STREAM_HEARTBEAT_TIMEOUT * 0.8) <= BEAT


def _started(ago_s: float) -> tuple[ActivityEnvironment, datetime]:
    """An activity environment whose attempt the server started `ago_s` seconds before now."""
    now = datetime.now(UTC)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, started_time=now - timedelta(seconds=ago_s))
    return env, now


def test_a_step_begun_on_time_beats_a_beat_in() -> None:
    env, now = _started(0.2)
    assert env.run(first_liveness_beat, now) == LIVENESS_EVERY_S


def test_a_step_begun_a_beat_late_beats_at_once() -> None:
    """Its heartbeat timeout has been running since the server handed the task over."""
    env, now = _started(LIVENESS_EVERY_S)
    assert env.run(first_liveness_beat, now) == 0.0
    env, now = _started(3.5)
    assert env.run(first_liveness_beat, now) == 0.0
