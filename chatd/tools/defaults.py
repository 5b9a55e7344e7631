"""The tool set a worker offers unless told otherwise."""

from __future__ import annotations

from chatd.tools.base import ToolRegistry
from chatd.tools.builtin import current_time

__all__ = ["default_registry"]


def default_registry() -> ToolRegistry:
    """The default built-in tools."""
    return ToolRegistry.of([current_time])
