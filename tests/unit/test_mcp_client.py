"""The worker's MCP client (chatd.mcp) against real MCP servers, over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TextIO

import mcp.types as mcp_types
import psutil
import pytest
from support.mcp_server_tools import START_DELAY_S
from support.mcp_servers import HttpMcpServer, notes_written, stdio_entry

from chatd.devstack.ports import free_port
from chatd.mcp.client import McpClients, McpUnavailable
from chatd.mcp.config import HttpServer, McpConfig, StdioServer
from chatd.mcp.mapping import mcp_result, mcp_tool
from chatd.mcp.tools import McpResult, qualified_name, split_qualified_name
from chatd.tools.base import MediaOutput, ToolOutput

WEDGED = "import time; time.sleep(600)  # an MCP server that never answers"
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return tmp_path / "notes.txt"


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where stdio servers' stderr goes (a file: the child process writes to it)."""
    with (tmp_path / "mcp-stderr.log").open("w") as log:
        yield log


@pytest.fixture
def http_server(tmp_path: Path, notes: Path) -> Iterator[HttpMcpServer]:
    with HttpMcpServer(notes, log=tmp_path / "mcp-http.log") as server:
        yield server


@pytest.fixture
async def clients(
    notes: Path, http_server: HttpMcpServer, errlog: TextIO
) -> AsyncIterator[McpClients]:
    """Clients of a stdio server ("local") and an HTTP one ("remote")."""
    config = McpConfig(
        servers={
            "local": StdioServer.model_validate(stdio_entry(notes)),
            "remote": HttpServer.model_validate(http_server.entry()),
        }
    )
    clients = McpClients(config, errlog=errlog)
    yield clients
    await clients.aclose()


async def server_pid(clients: McpClients, server: str) -> int:
    result = await clients.call_tool(server, "pid", {})
    assert isinstance(result.output, str)
    return int(result.output)


async def test_tools_are_listed_with_qualified_names_and_mcp_annotation_defaults(
    clients: McpClients,
) -> None:
    tools = {tool.name: tool for tool in await clients.list_tools("local")}
    assert set(tools) >= {"add", "echo", "write_note", "image", "structured", "fail", "crash"}
    add = tools["add"]
    assert (add.server, add.qualified_name) == ("local", "local__add")
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert (add.read_only, add.destructive, add.idempotent) == (True, False, True)
    note = tools["write_note"]
    assert (note.read_only, note.destructive, note.idempotent) == (False, True, False)
    assert add.spec().name == "local__add"
    remote = await clients.list_tools("remote")
    assert [t.qualified_name for t in remote] == [f"remote__{t.name}" for t in tools.values()]


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_calls_map_results_onto_tool_outputs(clients: McpClients, server: str) -> None:
    assert await clients.call_tool(server, "add", {"a": 2, "b": 3}) == McpResult(output="5")
    assert await clients.call_tool(server, "echo", {"text": "héllo"}) == McpResult(output="héllo")
    assert await clients.call_tool(server, "structured", {}) == McpResult(
        output={"answer": 42, "items": ["a", "b"]}
    )
    assert await clients.call_tool(server, "image", {}) == McpResult(
        output=MediaOutput(media_type="image/png", data=PNG_1X1)
    )
    assert await clients.call_tool(server, "fail", {}) == McpResult(
        output="it failed on purpose", is_error=True
    )


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_destructive_tool_runs_once_per_call(
    clients: McpClients, server: str, notes: Path
) -> None:
    assert await clients.call_tool(server, "write_note", {"text": "one"}) == McpResult(
        output="noted"
    )
    assert notes_written(notes) == ["one"]


async def test_an_unknown_tool_or_bad_arguments_is_an_error_result(clients: McpClients) -> None:
    unknown = await clients.call_tool("local", "no_such_tool", {})
    assert unknown.is_error and "no_such_tool" in str(unknown.output)
    bad = await clients.call_tool("local", "add", {"a": "x"})
    assert bad.is_error and "validation error" in str(bad.output)


async def test_an_unknown_server_is_unavailable(clients: McpClients) -> None:
    with pytest.raises(McpUnavailable, match="MCP server 'nope' is unavailable: no MCP server"):
        await clients.call_tool("nope", "add", {"a": 1, "b": 2})


async def test_a_stdio_crash_mid_call_is_unavailable_and_the_next_call_starts_a_new_server(
    clients: McpClients,
) -> None:
    before = await server_pid(clients, "local")
    with pytest.raises(McpUnavailable, match="'local' is unavailable: the connection was lost"):
        await clients.call_tool("local", "crash", {})
    assert await clients.call_tool("local", "add", {"a": 1, "b": 1}) == McpResult(output="2")
    assert await server_pid(clients, "local") != before


async def test_an_http_server_dying_mid_call_is_unavailable_until_it_is_back(
    clients: McpClients, http_server: HttpMcpServer
) -> None:
    assert await clients.call_tool("remote", "add", {"a": 1, "b": 1}) == McpResult(output="2")
    with pytest.raises(McpUnavailable, match="'remote' is unavailable: the connection was lost"):
        await clients.call_tool("remote", "crash", {})
    with pytest.raises(McpUnavailable, match="'remote' is unavailable: could not connect"):
        await clients.call_tool("remote", "add", {"a": 1, "b": 1})
    await asyncio.to_thread(http_server.restart)
    assert await clients.call_tool("remote", "add", {"a": 1, "b": 1}) == McpResult(output="2")


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_call_past_its_timeout_is_unavailable_and_the_session_lives_on(
    clients: McpClients, server: str
) -> None:
    before = await server_pid(clients, server)
    with pytest.raises(McpUnavailable, match=r"no answer within 0\.5 s"):
        await clients.call_tool(server, "slow", {"seconds": 120}, timeout_s=0.5)
    assert await clients.call_tool(server, "add", {"a": 1, "b": 1}) == McpResult(output="2")
    assert await server_pid(clients, server) == before


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_cancelled_call_leaves_the_shared_session_working(
    clients: McpClients, server: str
) -> None:
    before = await server_pid(clients, server)
    slow = asyncio.create_task(clients.call_tool(server, "slow", {"seconds": 120}))
    others = asyncio.create_task(clients.call_tool(server, "slow", {"seconds": 0.5}))
    await asyncio.sleep(0.2)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert await others == McpResult(output="slept 0.5")
    assert await clients.call_tool(server, "echo", {"text": "still"}) == McpResult(output="still")
    assert await server_pid(clients, server) == before


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_concurrent_calls_share_one_session(clients: McpClients, server: str) -> None:
    calls = [clients.call_tool(server, "add", {"a": i, "b": i}) for i in range(8)]
    pids = [clients.call_tool(server, "pid", {}) for _ in range(4)]
    results = await asyncio.gather(*calls, *pids)
    assert [r.output for r in results[:8]] == [str(2 * i) for i in range(8)]
    assert len({r.output for r in results[8:]}) == 1


async def test_configured_headers_reach_an_http_server(
    http_server: HttpMcpServer, errlog: TextIO
) -> None:
    entry = http_server.entry(Authorization="Bearer t0ken")
    clients = McpClients(McpConfig(servers={"r": HttpServer.model_validate(entry)}), errlog=errlog)
    try:
        sent = await clients.call_tool("r", "header", {"name": "Authorization"})
        assert sent == McpResult(output="Bearer t0ken")
    finally:
        await clients.aclose()


async def test_a_server_that_never_answers_is_unavailable_and_left_behind_by_no_one(
    errlog: TextIO,
) -> None:
    wedged = StdioServer(
        command=sys.executable, args=["-c", WEDGED], timeout_s=1, connect_timeout_s=1
    )
    clients = McpClients(McpConfig(servers={"wedged": wedged}), errlog=errlog)
    try:
        with pytest.raises(
            McpUnavailable, match=r"'wedged' is unavailable: it did not start within 1 s"
        ):
            await clients.list_tools("wedged")
        with pytest.raises(McpUnavailable, match=r"did not start within 1 s"):
            await clients.call_tool("wedged", "add", {}, timeout_s=0.5)
    finally:
        await clients.aclose()
    assert not [p for p in psutil.Process().children(recursive=True) if WEDGED in p.cmdline()]


async def test_a_slow_start_does_not_eat_the_call_s_own_timeout(
    notes: Path, errlog: TextIO
) -> None:
    """A server that takes longer to start than a call may take: the call still gets its
    whole `timeout_s` once the session is open (start-up has `connect_timeout_s`)."""
    entry = stdio_entry(notes, timeout_s=START_DELAY_S / 2)
    entry["args"].append("slow-start")
    slow = StdioServer.model_validate({**entry, "connect_timeout_s": START_DELAY_S * 10})
    clients = McpClients(McpConfig(servers={"slow": slow}), errlog=errlog)
    try:
        assert (await clients.call_tool("slow", "add", {"a": 2, "b": 3})).output == "5"
    finally:
        await clients.aclose()


async def test_an_unreachable_url_is_unavailable(errlog: TextIO) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    clients = McpClients(McpConfig(servers={"gone": HttpServer(url=url)}), errlog=errlog)
    try:
        with pytest.raises(McpUnavailable, match="'gone' is unavailable: could not connect"):
            await clients.list_tools("gone")
    finally:
        await clients.aclose()


async def test_a_server_that_cannot_start_is_unavailable(errlog: TextIO, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    clients = McpClients(McpConfig(servers={"bad": StdioServer(command=missing)}), errlog=errlog)
    try:
        with pytest.raises(McpUnavailable, match="'bad' is unavailable: could not connect"):
            await clients.call_tool("bad", "add", {})
    finally:
        await clients.aclose()


async def test_closing_stops_stdio_servers_and_refuses_later_calls(clients: McpClients) -> None:
    pid = await server_pid(clients, "local")
    await clients.aclose()
    assert not psutil.pid_exists(pid)
    with pytest.raises(McpUnavailable, match="shutting down"):
        await clients.call_tool("local", "add", {"a": 1, "b": 1})


async def test_a_legacy_http_server_restarted_between_calls_gets_a_new_session(
    tmp_path: Path, notes: Path, errlog: TextIO
) -> None:
    """A pre-2026 server forgets its HTTP sessions when it restarts; the refused request is
    sent again on a new session."""
    with HttpMcpServer(notes, log=tmp_path / "legacy.log", legacy=True) as legacy:
        config = McpConfig(servers={"old": HttpServer.model_validate(legacy.entry())})
        clients = McpClients(config, errlog=errlog)
        try:
            before = await server_pid(clients, "old")
            await asyncio.to_thread(legacy.restart)
            assert await server_pid(clients, "old") != before
        finally:
            await clients.aclose()


def tool(name: str, annotations: mcp_types.ToolAnnotations | None = None) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "read_only", "destructive", "idempotent"),
    [
        (None, False, True, False),
        (mcp_types.ToolAnnotations(read_only_hint=True), True, False, True),
        (mcp_types.ToolAnnotations(destructive_hint=False), False, False, False),
        (mcp_types.ToolAnnotations(idempotent_hint=True), False, True, True),
        (
            mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
            False,
            True,
            False,
        ),
    ],
)
def test_tool_annotations_follow_mcp_defaults(
    hints: mcp_types.ToolAnnotations | None, read_only: bool, destructive: bool, idempotent: bool
) -> None:
    mapped = mcp_tool("srv", tool("t", hints))
    assert mapped is not None
    assert (mapped.read_only, mapped.destructive, mapped.idempotent) == (
        read_only,
        destructive,
        idempotent,
    )
    assert mapped.description == ""


@pytest.mark.parametrize("name", ["x" * 60, "has space", "dotted.name", ""])
def test_a_tool_whose_qualified_name_cant_reach_a_model_is_skipped(name: str) -> None:
    assert mcp_tool("srv", tool(name)) is None


def test_qualified_names_split_at_the_first_separator() -> None:
    assert split_qualified_name(qualified_name("srv-1", "get__thing")) == ("srv-1", "get__thing")
    assert split_qualified_name("current_time") is None
    assert split_qualified_name("__x") is None


def text(value: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(text=value)


IMAGE = mcp_types.ImageContent(data=PNG_1X1, mime_type="image/png")


@pytest.mark.parametrize(
    ("result", "output"),
    [
        (mcp_types.CallToolResult(content=[]), ""),
        (mcp_types.CallToolResult(content=[text("a"), text("b")]), "a\nb"),
        (mcp_types.CallToolResult(content=[text('{"k": 1}')]), '{"k": 1}'),
        (
            mcp_types.CallToolResult(content=[text("see"), IMAGE]),
            "see\n[image (image/png) left out]",
        ),
        (
            mcp_types.CallToolResult(content=[IMAGE, IMAGE.model_copy(update={"data": "AA=="})]),
            MediaOutput(media_type="image/png", data=PNG_1X1),
        ),
        (
            mcp_types.CallToolResult(
                content=[mcp_types.ResourceLink(uri="file:///a.txt", name="a")]
            ),
            "[resource link: file:///a.txt]",
        ),
        (
            mcp_types.CallToolResult(
                content=[
                    mcp_types.EmbeddedResource(
                        resource=mcp_types.TextResourceContents(uri="file:///a", text="inside")
                    )
                ]
            ),
            "inside",
        ),
        (mcp_types.CallToolResult(content=[], structured_content=[1, 2]), [1, 2]),
        (mcp_types.CallToolResult(content=[], structured_content=7), "7"),
        (mcp_types.CallToolResult(content=[text("7")], structured_content=7), "7"),
    ],
)
def test_results_map_onto_tool_outputs(
    result: mcp_types.CallToolResult, output: ToolOutput
) -> None:
    assert mcp_result(result) == McpResult(output=output)


def test_a_failed_call_reads_as_its_text_even_with_structured_content() -> None:
    result = mcp_types.CallToolResult(
        content=[text("quota exceeded")], structured_content={"code": 429}, is_error=True
    )
    assert mcp_result(result) == McpResult(output="quota exceeded", is_error=True)
