"""The `execute` tool: a shell command run in the chat's workspace.

The command runs in the tool's `Sandbox` (`chatd.tools.sandbox`): bubblewrap, which shows it
only the chat's workspace, or, if the operator explicitly allows it, directly on the worker.
Only the owners on the operator's allow-list may use it, and it is off unless enabled (see
`chatd.tools.defaults`). The process gets its own process group and no stdin; the whole group
is killed when the command ends or times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from chatd.tools.base import Tool, ToolContext, ToolOutput
from chatd.tools.sandbox import Sandbox
from chatd.tools.workspace import OUTPUT_CAP_BYTES, truncate_output

__all__ = [
    "DEFAULT_EXECUTE_TIMEOUT_SECONDS",
    "DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS",
    "ExecuteArgs",
    "OwnerAllowList",
    "make_execute_tool",
    "run_command",
]

DEFAULT_EXECUTE_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS = 300.0
_DRAIN_GRACE_SECONDS = 1.0
"""How long to wait for output after the process group is killed (escapees keep pipes open)."""
_TOOL_TIMEOUT_MARGIN = timedelta(seconds=15)


class ExecuteArgs(BaseModel):
    """Arguments of execute."""

    command: str = Field(
        min_length=1,
        description=(
            "The shell command, run with /bin/sh -c in the workspace root, e.g. "
            "'python3 script.py' or 'ls -la && wc -l *.txt'."
        ),
    )
    timeout_seconds: float = Field(
        default=DEFAULT_EXECUTE_TIMEOUT_SECONDS,
        gt=0,
        description="Seconds before the command and everything it started are killed.",
    )


@dataclass
class _CappedBuffer:
    """Keeps the first `cap` bytes of a stream and counts all of it."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        """Take the next chunk of the stream."""
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        """The kept output, with a truncation note if some was dropped."""
        return truncate_output(bytes(self.data), self.total, self.cap)


class _Capture(asyncio.SubprocessProtocol):
    """Collects capped stdout/stderr and signals exit (pipes may stay open after it)."""

    def __init__(self, cap: int) -> None:
        self.streams = {1: _CappedBuffer(cap), 2: _CappedBuffer(cap)}
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        """Keep output up to the cap."""
        self.streams[fd].add(data.encode() if isinstance(data, str) else data)

    def process_exited(self) -> None:
        """The shell has exited; its children may still hold the pipes."""
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        """The process has exited and both pipes are closed."""
        self.closed.set()


@dataclass(frozen=True)
class OwnerAllowList:
    """The chat owners who may run commands: those named, or everyone (`*`)."""

    owners: frozenset[str]
    everyone: bool = False

    @classmethod
    def parse(cls, raw: str) -> OwnerAllowList:
        """A comma-separated list of owners, or `*` for everyone."""
        names = {name.strip() for name in raw.split(",") if name.strip()}
        return cls(frozenset(names - {"*"}), everyone="*" in names)

    def allows(self, owner: str | None) -> bool:
        """Whether a chat of `owner` may run commands."""
        return self.everyone or owner in self.owners


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds`."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def _supervise(
    transport: asyncio.SubprocessTransport, capture: _Capture, seconds: float
) -> bool:
    """Wait for the shell to exit (True if it timed out), then kill its process group."""
    try:
        timed_out = not await _within(capture.exited, seconds)
    finally:  # also on cancellation: nothing the command started outlives it
        _kill_group(transport.get_pid())
    await capture.exited.wait()
    await _within(capture.closed, _DRAIN_GRACE_SECONDS)  # let buffered output arrive
    return timed_out


async def run_command(
    command: str,
    workspace: Path,
    timeout_seconds: float,
    sandbox: Sandbox,
    cap: int = OUTPUT_CAP_BYTES,
) -> dict[str, Any]:
    """Run `command` with /bin/sh -c in `workspace` in `sandbox`; exit code, capped
    stdout/stderr, timed_out."""
    launch = sandbox.launch(command, workspace)
    transport, capture = await asyncio.get_running_loop().subprocess_exec(
        lambda: _Capture(cap),
        *launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        timed_out = await _supervise(transport, capture, timeout_seconds)
    finally:
        transport.close()
    result: dict[str, Any] = {
        "exit_code": transport.get_returncode(),
        "stdout": capture.streams[1].text(),
        "stderr": capture.streams[2].text(),
        "timed_out": timed_out,
    }
    if timed_out:
        result["note"] = f"killed after {timeout_seconds:g} s; output so far is shown"
    return result


def make_execute_tool(
    *,
    sandbox: Sandbox,
    owners: OwnerAllowList,
    max_timeout_seconds: float = DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS,
    output_cap: int = OUTPUT_CAP_BYTES,
) -> Tool[ExecuteArgs]:
    """An `execute` tool running commands in `sandbox` for the chats of `owners`, with timeouts
    capped at `max_timeout_seconds`."""
    if max_timeout_seconds <= 0:
        raise ValueError("max_timeout_seconds must be positive")

    async def run(args: ExecuteArgs, ctx: ToolContext) -> ToolOutput:
        if not owners.allows(ctx.owner):
            raise PermissionError(
                "execute is not available to this chat's owner: the operator allows it only "
                "for the owners on its allow-list"
            )
        timeout = min(args.timeout_seconds, max_timeout_seconds)
        workspace = await asyncio.to_thread(ctx.workspace.resolve)
        return await run_command(args.command, workspace, timeout, sandbox, output_cap)

    return Tool(
        name="execute",
        description=(
            "Run a shell command with /bin/sh -c, in your workspace directory (the same files "
            f"the file tools see). {sandbox.summary} "
            "Returns exit_code, stdout, stderr and timed_out. There is no "
            "stdin, so interactive commands fail; background processes do not outlive the "
            f"command. timeout_seconds defaults to {DEFAULT_EXECUTE_TIMEOUT_SECONDS:g} and is "
            f"capped at {max_timeout_seconds:g}. stdout and stderr are each truncated beyond "
            f"{output_cap} bytes, so redirect large output to a file and read parts of it."
        ),
        args=ExecuteArgs,
        run=run,
        timeout=timedelta(seconds=max_timeout_seconds) + _TOOL_TIMEOUT_MARGIN,
        idempotent=False,
    )
