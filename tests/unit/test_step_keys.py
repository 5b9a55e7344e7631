"""Step keys: the one spelling of where a transcript message belongs in its turn."""

from __future__ import annotations

import pytest

from chatd.store.step_keys import StepKey, stored_key, user_message_key


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (StepKey.assistant(0), "0:assistant"),
        (StepKey.tool_results(2, "tools"), "2:tools"),
        (StepKey.tool_results(2, "client-tools"), "2:client-tools"),
        (StepKey.summary(3, 1), "3:summary:1"),
    ],
)
def test_keys_are_stored_under_their_turn_and_read_back(key: StepKey, text: str) -> None:
    assert str(key) == text
    assert key.stored("turn-a") == stored_key("turn-a", text) == f"turn-a:{text}"
    assert StepKey.parse("turn-a", key.stored("turn-a")) == key


def test_the_user_message_of_a_turn_belongs_to_no_step() -> None:
    assert user_message_key("turn-a") == "turn-a:user"
