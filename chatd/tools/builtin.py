"""Small built-in tools that need no workspace."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from chatd.tools.base import Tool, ToolContext, ToolOutput

__all__ = ["current_time"]


class _NoArgs(BaseModel):
    pass


async def _current_time(args: _NoArgs, ctx: ToolContext) -> ToolOutput:
    return {"utc": datetime.now(UTC).isoformat(timespec="seconds")}


current_time: Tool[_NoArgs] = Tool(
    name="current_time",
    description="The current date and time in UTC.",
    args=_NoArgs,
    run=_current_time,
    inline=True,
)
