"""The worker's MCP client: list and call the tools of the configured servers.

One `McpClients` per worker process. It keeps one live session per server, opened on first
use and shared by concurrent calls; a session that fails is dropped and the next call opens a
new one (a new process, for a stdio server). Every call is bounded by a deadline, and a caller
that is cancelled (its activity was) leaves the shared session as it was.

What can go wrong, and how it surfaces:
- the server can't be used (unknown name, can't be started or reached, dies mid-call, doesn't
  answer in time): `McpUnavailable`, whose message is written for the model to read;
- the tool failed (the server's `isError`), or the server refused the call at the protocol
  level (no such tool, bad arguments) or answered with something malformed: an `McpResult`
  with `is_error=True`, whose output says what went wrong, so the model can correct itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

import anyio
from mcp import Client, MCPError
from mcp.types import CONNECTION_CLOSED, INVALID_REQUEST
from pydantic import ValidationError

from chatd.mcp.config import McpConfig
from chatd.mcp.mapping import mcp_result, mcp_tool
from chatd.mcp.session import McpSession, SessionEnded, describe_error
from chatd.mcp.tools import McpResult, McpTool

__all__ = ["McpClients", "McpUnavailable"]

T = TypeVar("T")

MAX_LIST_PAGES = 100
"""A server whose tool list never ends can't hold a turn forever."""

_CONNECTION_ERRORS = (
    ConnectionError,
    OSError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
)


class McpUnavailable(Exception):
    """An MCP server can't be used right now; the message says why, for a model to read."""

    def __init__(self, server: str, reason: str) -> None:
        """`MCP server 'x' is unavailable: <reason>`."""
        super().__init__(f"MCP server {server!r} is unavailable: {reason}")
        self.server = server
        self.reason = reason


class McpClients:
    """The MCP sessions of one worker process, one per configured server."""

    def __init__(self, config: McpConfig, *, errlog: TextIO | None = None) -> None:
        """`errlog` receives stdio servers' stderr (None: the worker's own stderr, read when a
        server starts); it must be a real file (it is handed to the child process)."""
        self.config = config
        self._errlog = errlog
        self._sessions: dict[str, McpSession] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def list_tools(self, server: str) -> list[McpTool]:
        """Every tool `server` offers (all pages), minus those whose names can't reach a
        model (skipped with a warning); `McpUnavailable` if the server can't say."""

        async def list_all(client: Client) -> list[McpTool]:
            tools: list[McpTool] = []
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(t for t in (mcp_tool(server, tool) for tool in page.tools) if t)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        try:
            return await self._run(server, list_all, None)
        except (MCPError, ValidationError, RuntimeError) as err:
            raise McpUnavailable(
                server, f"it can't list its tools ({describe_error(err)})"
            ) from None

    async def call_tool(
        self,
        server: str,
        tool_name: str,
        arguments: dict[str, Any],
        timeout_s: float | None = None,
    ) -> McpResult:
        """Call `tool_name` (its name on the server, not the qualified one) with `arguments`,
        within `timeout_s` (None: the server's configured `timeout_s`), opening the session
        first if needed (within `connect_timeout_s`)."""

        async def call(client: Client) -> McpResult:
            return mcp_result(await client.call_tool(tool_name, arguments))

        try:
            return await self._run(server, call, timeout_s)
        except MCPError as err:
            return McpResult(output=f"MCP error {err.code}: {err.message}", is_error=True)
        except (ValidationError, RuntimeError) as err:
            # RuntimeError: the SDK's check of structured content against the output schema.
            reason = describe_error(err)
            return McpResult(
                output=f"{tool_name} returned an invalid result: {reason}", is_error=True
            )

    async def aclose(self) -> None:
        """Close every session (stopping stdio servers); later calls are `McpUnavailable`."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(session.close() for session in sessions), *self._closing)

    async def _run(
        self, server: str, op: Callable[[Client], Awaitable[T]], timeout_s: float | None
    ) -> T:
        """`op` on the server's session within the deadline, once the session is open
        (opening has a deadline of its own: `connect_timeout_s`)."""
        session = await self._opened(self._session(server))
        deadline = timeout_s if timeout_s is not None else session.server.timeout_s
        try:
            return await self._within(deadline, session, op, first=True)
        except _StaleSession:
            # The server refused the request unread: safe to send again, once.
            fresh = await self._opened(self._session(server))
            return await self._within(deadline, fresh, op, first=False)

    async def _opened(self, session: McpSession) -> McpSession:
        """The session once open; `McpUnavailable` if it can't be within its deadline."""
        deadline = session.server.connect_timeout_s
        try:
            async with asyncio.timeout(deadline):
                await session.wait_open()
        except TimeoutError:
            self._drop(session)  # a wedged start must not block the next call
            raise McpUnavailable(
                session.name, f"it did not start within {deadline:g} s (connect_timeout_s)"
            ) from None
        except SessionEnded as err:
            raise self._lost(session, err.cause) from None
        return session

    async def _within(
        self,
        deadline: float,
        session: McpSession,
        op: Callable[[Client], Awaitable[T]],
        *,
        first: bool,
    ) -> T:
        try:
            async with asyncio.timeout(deadline):
                return await self._attempt(session, op, first=first)
        except TimeoutError:
            raise McpUnavailable(session.name, f"no answer within {deadline:g} s") from None

    async def _attempt(
        self, session: McpSession, op: Callable[[Client], Awaitable[T]], *, first: bool
    ) -> T:
        """`op` on this session; a session found broken is dropped, and MCPErrors that are not
        about the connection are left to the caller."""
        try:
            return await op(await session.wait_open())
        except SessionEnded as err:
            raise self._lost(session, err.cause) from None
        except Exception as err:
            if first and _stale_session(err) and not session.ended:
                self._drop(session)
                raise _StaleSession from err
            if session.ended or _transport_failed(err):
                raise self._lost(session, err) from None
            raise

    def _session(self, server: str) -> McpSession:
        """The live session with `server`, or a new one being opened."""
        if self._closed:
            raise McpUnavailable(server, "the worker is shutting down")
        config = self.config.servers.get(server)
        if config is None:
            raise McpUnavailable(server, "no MCP server of that name is configured")
        session = self._sessions.get(server)
        if session is None or session.ended:
            session = McpSession(server, config, self._errlog)
            self._sessions[server] = session
        return session

    def _lost(self, session: McpSession, err: BaseException | None) -> McpUnavailable:
        """Drop a broken session; the error to raise, with the best reason known."""
        self._drop(session)
        cause = session.error or err
        reason = describe_error(cause) if cause else "the session was closed"
        if session.client is None:
            return McpUnavailable(session.name, f"could not connect ({reason})")
        return McpUnavailable(session.name, f"the connection was lost ({reason})")

    def _drop(self, session: McpSession) -> None:
        """Forget the session and close it in the background (a stdio stop takes seconds)."""
        if self._sessions.get(session.name) is session:
            del self._sessions[session.name]
        task = asyncio.create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


class _StaleSession(Exception):
    """The server doesn't know our session; a new one will do."""


def _stale_session(err: Exception) -> bool:
    """What a legacy HTTP server answers a session id it no longer knows (it restarted): our
    requests are well formed, so an invalid-request answer means the session is stale."""
    return isinstance(err, MCPError) and err.code == INVALID_REQUEST


def _transport_failed(err: Exception) -> bool:
    """The error is about the connection, not this one request."""
    if isinstance(err, MCPError):
        return err.code == CONNECTION_CLOSED
    # An ExceptionGroup is one of the SDK's task groups re-raising a transport error.
    return isinstance(err, _CONNECTION_ERRORS | ExceptionGroup)
