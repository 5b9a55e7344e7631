"""How the model may call tools: Open Responses' `tool_choice` and `parallel_tool_calls`,
kept with the chat (migration 025) and applied by every provider adapter.

A forced choice (`required`) binds the first model step after the client's input only: the
turn's first, or the first after the client answered its calls or approvals. Later steps of
the same response fall back to `auto`, so tools the workers run can't keep a forced model
calling them until the turn's step limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

__all__ = ["ToolMode", "ToolUse"]

ToolMode = Literal["auto", "required", "none"]
"""`auto`: the model decides; `required`: it must call a tool; `none`: it may call none."""


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_Tool = TypeVar("_Tool", bound=_Named)


class ToolUse(BaseModel):
    """How the model may call the chat's tools (the default: any of them, as it likes)."""

    mode: ToolMode = "auto"
    only: list[str] | None = Field(default=None, max_length=128)
    """The tools the model is offered, by name (None: all of the chat's). A tool left out is
    not shown to the model at all, so it can't be called."""
    parallel: bool = True
    """False: the provider is asked for at most one tool call a step."""

    def for_step(self, opens_response: bool) -> ToolUse:
        """What binds one model step: a forced mode only on a response's first step."""
        if self.mode == "required" and not opens_response:
            return self.model_copy(update={"mode": "auto"})
        return self

    def offers(self, name: str) -> bool:
        """Whether the model is shown the tool `name` (a provider's own, `web_search`, too)."""
        return self.only is None or name in self.only

    def offered(self, tools: Sequence[_Tool]) -> list[_Tool]:
        """The tools the model may see, in the chat's order."""
        return [tool for tool in tools if self.offers(tool.name)]
