"""A small MCP server for chatd: notes kept as files, over stdio.

chatd's workers start it as a child process (see `mcp.json` beside it) and offer its tools
to chats created with `"mcp_servers": ["notes"]`, as `notes__save_note` and
`notes__read_note`. Built with the official `mcp` SDK; any MCP server works the same way.

    python examples/mcp/notes_server.py        # speaks MCP on stdin/stdout

Environment (set through the config's `env`, resolved from the worker's environment):
NOTES_DIR, where notes go; NOTES_LOG, if set, a file that gets a line each time a client
lists the tools (so `use_mcp.py` can see that a chatd worker really started this server).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

NOTES_DIR = Path(os.environ.get("NOTES_DIR") or "/tmp/chatd-example-notes")


def _record_listing() -> None:
    """Append a line to NOTES_LOG, if set (a tiny local write: fine to do inline)."""
    log = os.environ.get("NOTES_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"list_tools pid={os.getpid()} ppid={os.getppid()}\n")


class NotesServer(MCPServer[Any]):
    """An MCPServer that records each tool listing in NOTES_LOG."""

    async def list_tools(self) -> Any:
        _record_listing()
        return await super().list_tools()


server = NotesServer("notes", log_level="WARNING")


def _path(title: str) -> Path:
    """The note's file; titles are reduced to safe file names."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", title).strip("-") or "untitled"
    return NOTES_DIR / f"{name}.txt"


# Annotations tell chatd how to treat a tool. `idempotent_hint`: saving the same note twice
# leaves the same file, so chatd may retry a call whose worker crashed. `destructive_hint`
# False: MCP counts a tool destructive unless it says otherwise, and chatd's default policy
# asks a person before running a destructive tool.
@server.tool(
    annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    structured_output=False,
)
def save_note(title: str, text: str) -> str:
    """Save a note under a title (replacing any note with that title)."""
    NOTES_DIR.mkdir(parents=True, exist_ok=True)
    _path(title).write_text(text, encoding="utf-8")
    return f"saved note {title!r}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def read_note(title: str) -> str:
    """Read the note with this title."""
    path = _path(title)
    return path.read_text(encoding="utf-8") if path.exists() else f"no note titled {title!r}"


if __name__ == "__main__":
    server.run("stdio")
