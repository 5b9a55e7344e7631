"""Sends in flight per chat: a gateway hands Temporal no more than it accepts for a workflow."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from api.errors import ApiError
from api.quotas import SENDS_IN_FLIGHT_PER_CHAT, ChatSends


def test_a_chat_s_sends_beyond_the_bound_are_refused_and_a_finished_one_frees_a_slot() -> None:
    sends = ChatSends()
    busy, other = uuid.uuid4(), uuid.uuid4()
    with contextlib.ExitStack() as held:
        for _ in range(SENDS_IN_FLIGHT_PER_CHAT):
            held.enter_context(sends.slot(busy))
        with pytest.raises(ApiError) as refused:
            held.enter_context(sends.slot(busy))
        assert (refused.value.status, refused.value.code) == (429, "rate_limited")
        with sends.slot(other):
            pass  # another chat's sends are not counted against this one
    with sends.slot(busy):
        pass


def test_a_send_that_fails_frees_its_slot() -> None:
    sends = ChatSends()
    chat = uuid.uuid4()
    for _ in range(SENDS_IN_FLIGHT_PER_CHAT + 1):
        with pytest.raises(RuntimeError), sends.slot(chat):
            raise RuntimeError("the send failed")
