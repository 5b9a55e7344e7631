"""Tools for tests that kill workers mid-call (loaded with CHATD_TOOLS)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from chatd.tools.base import Tool, ToolContext, ToolOutput


class _Marker(BaseModel):
    marker: str
    """A file (absolute path) the tool touches when it starts: tests wait for it."""
    seconds: float = 3.0


async def _slow(args: _Marker, ctx: ToolContext) -> ToolOutput:
    path = Path(args.marker)
    await asyncio.to_thread(path.write_text, "started")
    await asyncio.sleep(args.seconds)
    return "slow work done"


TOOLS = [
    Tool(
        name="slow_idempotent",
        description="A slow idempotent tool.",
        args=_Marker,
        run=_slow,
        timeout=timedelta(seconds=60),
    ),
    Tool(
        name="slow_once",
        description="A slow tool that must not run twice.",
        args=_Marker,
        run=_slow,
        timeout=timedelta(seconds=60),
        idempotent=False,
    ),
]
