"""Step keys: where a transcript message belongs in its turn, the key of its idempotent write.

A message is stored under `<turn id>:<step key>`, unique per chat, so a retried write of the
same message is a no-op. This module is the one place that spells those keys out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["StepKey", "stored_key", "user_message_key"]


@dataclass(frozen=True)
class StepKey:
    """A message of step `step` of a turn: its assistant message, tool results or a summary."""

    step: int
    kind: str
    """`assistant`, `tools` (worker results), `approved` (calls decided on), `client-tools`,
    `format-note` or `summary:<n>`."""

    @classmethod
    def assistant(cls, step: int) -> StepKey:
        """The model's message of the step."""
        return cls(step, "assistant")

    @classmethod
    def tool_results(cls, step: int, part: Literal["tools", "approved", "client-tools"]) -> StepKey:
        """A tool message of the step: results of calls run without asking, of calls a person
        decided on, or the client's."""
        return cls(step, part)

    @classmethod
    def format_note(cls, step: int) -> StepKey:
        """The message after the step asking the model to answer again in the chat's
        output format."""
        return cls(step, "format-note")

    @classmethod
    def summary(cls, step: int, index: int) -> StepKey:
        """The `index`th compaction summary after the step."""
        return cls(step, f"summary:{index}")

    @classmethod
    def parse(cls, turn_id: str, stored: str) -> StepKey:
        """The step key of a message stored under `stored` in turn `turn_id`."""
        step, kind = stored.removeprefix(f"{turn_id}:").split(":", 1)
        return cls(int(step), kind)

    def __str__(self) -> str:
        return f"{self.step}:{self.kind}"

    def stored(self, turn_id: str) -> str:
        """The key the message is stored under (unique per chat)."""
        return stored_key(turn_id, self)


def stored_key(turn_id: str, key: StepKey | str) -> str:
    """The stored key of a message of turn `turn_id` (a `StepKey`, or a key of another form)."""
    return f"{turn_id}:{key}"


def user_message_key(turn_id: str) -> str:
    """The stored key of the user message that began the turn (it belongs to no step)."""
    return stored_key(turn_id, "user")
