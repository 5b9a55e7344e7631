"""One live session with one MCP server, held open by a task of its own.

The SDK's transports (`stdio_client`, `streamable_http_client`) and its `Client` are async
context managers built on anyio task groups: they must be entered and exited by the same task,
and a transport failure cancels the task that entered them. So each session lives in a
background task that enters them, waits to be told to stop, and exits them; calls from other
tasks only send requests on the open session, and a failing transport ends the owner task
without touching any caller.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
from contextlib import AsyncExitStack
from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from chatd.mcp.config import HttpServer, McpServer

__all__ = ["McpSession", "SessionEnded", "describe_error"]

log = logging.getLogger(__name__)


def _client_info() -> Implementation:
    try:
        return Implementation(name="chatd", version=version("chatd-temporal"))
    except PackageNotFoundError:
        return Implementation(name="chatd", version="0")


CLIENT_INFO = _client_info()


class SessionEnded(Exception):
    """The session failed to open, or has ended; `cause` says why (None: it was closed)."""

    def __init__(self, cause: BaseException | None) -> None:
        """Keep the cause for the message."""
        super().__init__(describe_error(cause) if cause else "the session was closed")
        self.cause = cause


class McpSession:
    """A session being opened, open, or ended; `client` is usable while it is open."""

    def __init__(self, name: str, server: McpServer, errlog: TextIO | None) -> None:
        """Start opening it at once (in the background)."""
        self.name = name
        self.server = server
        self._errlog = errlog
        self.client: Client | None = None
        self.error: BaseException | None = None
        """Why it ended or never opened (None: still open, or closed on request)."""
        self._settled = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._own(), name=f"mcp-session-{name}")

    @property
    def ended(self) -> bool:
        """It ended (failed, or was closed): a call must open a new one."""
        return self._task.done()

    async def wait_open(self) -> Client:
        """The open client; `SessionEnded` if it failed to open or has ended."""
        await self._settled.wait()
        if self.client is None or self.ended:
            raise SessionEnded(self.error)
        return self.client

    async def close(self) -> None:
        """End it and wait until its transport is gone (a stdio server is stopped)."""
        self._stop.set()
        if not self._settled.is_set():
            # Still opening (a wedged server, say): nothing to close politely.
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _own(self) -> None:
        """Open the session, hold it until told to stop, then close it, all in this task."""
        try:
            async with AsyncExitStack() as stack:
                self.client = await stack.enter_async_context(await self._make_client(stack))
                self._settled.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            if not self._stop.is_set():
                # Only our own close cancels us; anything else is the transport failing.
                self.error = ConnectionError("the session was cancelled")
        except Exception as err:  # an ExceptionGroup from the transport's task group, often
            self.error = err
            log.warning("MCP server %r: session ended: %s", self.name, describe_error(err))
        finally:
            self._settled.set()

    async def _make_client(self, stack: AsyncExitStack) -> Client:
        # cache=None: a tool listing must be fresh, never a cached answer.
        if isinstance(self.server, HttpServer):
            # No read timeout: every call has its own deadline, and the server's event
            # stream may be quiet for long.
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=self.server.headers, timeout=httpx2.Timeout(30.0, read=None)
                )
            )
            transport = streamable_http_client(self.server.url, http_client=http)
            return Client(transport, cache=None, client_info=CLIENT_INFO)
        command, args = dying_with_this_process(self.server.command, self.server.args)
        params = StdioServerParameters(command=command, args=args, env=self.server.env)
        errlog = self._errlog if self._errlog is not None else sys.stderr
        return Client(stdio_client(params, errlog=errlog), cache=None, client_info=CLIENT_INFO)


def dying_with_this_process(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command, started so that it gets SIGKILL when this process dies, however it dies
    (SIGKILL included): through util-linux's `setpriv --pdeathsig`, which arms the signal
    and execs the command. As given where there is no `setpriv` (not Linux)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return command, args
    return setpriv, ["--pdeathsig", "KILL", "--", command, *args]


def describe_error(err: BaseException) -> str:
    """A one-line reason, looking inside exception groups to the first real error."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    text = str(err) or type(err).__name__
    return f"{type(err).__name__}: {text}" if text != type(err).__name__ else text
