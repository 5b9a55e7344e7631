"""MCP tools in chats, end to end: real MCP servers (stdio and streamable HTTP) behind the
gateway, a worker, Temporal and Postgres, with the fake provider scripting the model's calls."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.mcp_server_tools import PNG_1X1
from support.mcp_servers import HttpMcpServer, notes_written, stdio_entry, write_mcp_config

from chatd.devstack.ports import free_port
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.mcp.config import load_mcp_config
from workflows.tool_batch import POLICY_DENIED

DONE = FakeResponse(parts=[FakeText(text="done")])


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """The file the servers' `write_note` appends to."""
    return tmp_path / "notes"


@pytest.fixture
def http_server(notes: Path, tmp_path: Path) -> Iterator[HttpMcpServer]:
    """The test server over streamable HTTP, for this test only."""
    with HttpMcpServer(notes, log=tmp_path / "mcp-http.log") as server:
        yield server


@pytest.fixture
async def mcp_stack(
    make_stack: StackFactory, http_server: HttpMcpServer, notes: Path, tmp_path: Path
) -> AsyncIterator[Stack]:
    """A stack whose worker and gateway know `local` (stdio), `remote` (HTTP), `slow` (the
    same HTTP server with a 1 s timeout) and `down` (a URL nothing listens on)."""
    path = write_mcp_config(
        tmp_path / "mcp.json",
        {
            "local": stdio_entry(notes),
            "remote": http_server.entry(),
            "slow": http_server.entry(timeout_s=1),
            "down": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5},
        },
    )
    async with make_stack(mcp=load_mcp_config(str(path))) as stack:
        yield stack


async def _chat(stack: Stack, responses: list[FakeResponse], **settings: Any) -> tuple[str, str]:
    """A chat of a scripted model of its own; its id and the model's name."""
    model = stack.scripted_model(*responses)
    chat = await stack.create_chat(model=model, **settings)
    return chat["id"], model["name"]


async def _turn(stack: Stack, chat_id: str, *, after: int = 0, status: str = "waiting") -> int:
    """Send a message and wait until the chat reaches `status`; the last event id seen."""
    await stack.send(chat_id, "go")
    events = await stack.wait_status(chat_id, status, after=after)
    return max(e.id for e in events if e.id is not None)


def _results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for m in messages if m["role"] == "tool" for p in m["parts"]]


def _offered(stack: Stack, model: str, request: int = 0) -> list[str]:
    """The tool names the model was offered in its `request`th request."""
    return [t["name"] for t in stack.fake.requests(model)[request].body.get("tools", [])]


def _sent_results(stack: Stack, model: str, request: int) -> dict[str, dict[str, Any]]:
    """The tool_result blocks the model received in its `request`th request, by call id."""
    messages = stack.fake.requests(model)[request].body["messages"]
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    return {b["tool_use_id"]: b for b in blocks if b.get("type") == "tool_result"}


async def _listings(stack: Stack, chat_id: str) -> list[list[str]]:
    """The tool names of each turn's stored MCP listing, oldest first."""
    rows = await stack.pool.fetch(
        "SELECT tools FROM turn_mcp_tools WHERE chat_id = $1 ORDER BY listed_at",
        uuid.UUID(chat_id),
    )
    return [[t["qualified_name"] for t in row["tools"]] for row in rows]


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_read_only_mcp_tool_runs_and_its_result_reaches_the_model(
    mcp_stack: Stack, server: str
) -> None:
    call = FakeToolCall(name=f"{server}__add", arguments={"a": 2, "b": 3})
    chat_id, model = await _chat(
        mcp_stack, [FakeResponse(parts=[call]), DONE], mcp_servers=[server]
    )
    await _turn(mcp_stack, chat_id)

    offered = _offered(mcp_stack, model)
    assert {f"{server}__add", f"{server}__write_note", f"{server}__image"} <= set(offered)
    messages = await mcp_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    [result] = _results(messages)
    assert (result["name"], result["output"], result["is_error"]) == (f"{server}__add", "5", False)
    sent = _sent_results(mcp_stack, model, 1)[result["tool_call_id"]]
    assert sent["content"] == [{"type": "text", "text": "5"}] and "is_error" not in sent


async def test_a_destructive_mcp_tool_waits_for_approval_and_runs_once_approved(
    mcp_stack: Stack, notes: Path
) -> None:
    call = FakeToolCall(name="local__write_note", arguments={"text": "approved note"})
    chat_id, _ = await _chat(mcp_stack, [FakeResponse(parts=[call]), DONE], mcp_servers=["local"])
    after = await _turn(mcp_stack, chat_id, status="requires_action")

    chat = (await mcp_stack.http.get(f"/chats/{chat_id}")).json()
    [pending] = chat["pending_tool_calls"]
    assert (pending["name"], pending["action"], pending["arguments"]) == (
        "local__write_note",
        "approval",
        {"text": "approved note"},
    )
    assert notes_written(notes) == [], "nothing runs before the decision"
    decision = {"tool_call_id": pending["id"], "decision": "approve"}
    response = await mcp_stack.http.post(
        f"/chats/{chat_id}/tool-approvals", json={"decisions": [decision]}
    )
    assert response.status_code == 202, response.text
    await mcp_stack.wait_status(chat_id, "waiting", after=after)

    assert notes_written(notes) == ["approved note"]
    [result] = _results(await mcp_stack.messages(chat_id))
    assert (result["output"], result["is_error"]) == ("noted", False)


async def test_an_approval_edits_an_mcp_calls_arguments_within_the_servers_schema(
    mcp_stack: Stack, notes: Path
) -> None:
    call = FakeToolCall(name="remote__write_note", arguments={"text": "as the model wrote"})
    chat_id, model = await _chat(
        mcp_stack, [FakeResponse(parts=[call]), DONE], mcp_servers=["remote"]
    )
    after = await _turn(mcp_stack, chat_id, status="requires_action")
    [pending] = (await mcp_stack.http.get(f"/chats/{chat_id}")).json()["pending_tool_calls"]
    path = f"/chats/{chat_id}/tool-approvals"

    def approve(arguments: dict[str, Any]) -> dict[str, Any]:
        decision = {"tool_call_id": pending["id"], "decision": "approve", "arguments": arguments}
        return {"decisions": [decision]}

    refused = await mcp_stack.http.post(path, json=approve({"text": 5}))
    assert refused.status_code == 400, refused.text
    assert "text" in refused.json()["error"]["message"]
    accepted = await mcp_stack.http.post(path, json=approve({"text": "as a person edited"}))
    assert accepted.status_code == 202, accepted.text
    await mcp_stack.wait_status(chat_id, "waiting", after=after)

    assert notes_written(notes) == ["as a person edited"]
    [ran] = [p for p in (await mcp_stack.messages(chat_id))[1]["parts"] if p["type"] == "tool_call"]
    assert json.loads(ran["arguments"]) == {"text": "as a person edited"}
    assert json.loads(ran["original_arguments"]) == {"text": "as the model wrote"}
    [decision] = (await mcp_stack.http.get(f"/chats/{chat_id}/tool-decisions")).json()["decisions"]
    assert (decision["tool_name"], decision["edited"]) == ("remote__write_note", True)
    sent = mcp_stack.fake.requests(model)[1].body["messages"]
    uses = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    assert [b["input"] for b in uses if b["type"] == "tool_use"] == [{"text": "as a person edited"}]


@pytest.mark.parametrize(
    ("policy", "written", "output"),
    [
        ({"local__*": "auto"}, ["by policy"], "noted"),
        ({"local__write_note": "deny"}, [], POLICY_DENIED),
    ],
)
async def test_the_chats_policy_decides_for_a_destructive_mcp_tool_without_asking(
    mcp_stack: Stack, notes: Path, policy: dict[str, str], written: list[str], output: str
) -> None:
    call = FakeToolCall(name="local__write_note", arguments={"text": "by policy"})
    chat_id, _ = await _chat(
        mcp_stack, [FakeResponse(parts=[call]), DONE], mcp_servers=["local"], tool_policy=policy
    )
    await mcp_stack.send(chat_id, "go")
    events = await mcp_stack.wait_status(chat_id, "waiting")

    statuses = [e.data["status"] for e in events if e.event == "status"]
    assert "requires_action" not in statuses
    assert notes_written(notes) == written
    [result] = _results(await mcp_stack.messages(chat_id))
    assert (result["output"], result["is_error"]) == (output, output == POLICY_DENIED)


async def test_image_structured_and_failed_results_map_onto_our_parts(mcp_stack: Stack) -> None:
    calls = [FakeToolCall(name=f"remote__{tool}") for tool in ("image", "structured", "fail")]
    chat_id, model = await _chat(
        mcp_stack, [FakeResponse(parts=calls), DONE], mcp_servers=["remote"]
    )
    await _turn(mcp_stack, chat_id)

    image, structured, failed = _results(await mcp_stack.messages(chat_id))
    assert (image["media_type"], image["data"], image["is_error"]) == ("image/png", PNG_1X1, False)
    assert structured["output"] == {"answer": 42, "items": ["a", "b"]}
    assert failed["is_error"] and "it failed on purpose" in failed["output"]
    sent = _sent_results(mcp_stack, model, 1)
    assert sent[image["tool_call_id"]]["content"][-1]["source"]["data"] == PNG_1X1
    assert json.loads(sent[structured["tool_call_id"]]["content"][0]["text"])["answer"] == 42
    assert sent[failed["tool_call_id"]]["is_error"] is True


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_server_that_dies_mid_call_is_an_error_result_and_a_later_turn_uses_a_new_one(
    mcp_stack: Stack, http_server: HttpMcpServer, server: str
) -> None:
    step = [FakeResponse(parts=[FakeToolCall(name=f"{server}__pid")])]
    crash = FakeResponse(parts=[FakeToolCall(name=f"{server}__crash")])
    chat_id, model = await _chat(mcp_stack, [*step, crash, DONE, *step, DONE], mcp_servers=[server])
    after = await _turn(mcp_stack, chat_id)

    first_pid, crashed = _results(await mcp_stack.messages(chat_id))
    assert not first_pid["is_error"]
    assert crashed["is_error"] and f"MCP server '{server}' is unavailable" in crashed["output"]
    assert len(mcp_stack.fake.requests(model)) == 3, "the model saw the error and answered"

    if server == "remote":
        # The worker starts a stdio server itself; an HTTP one, we do (off the stack's loop).
        await asyncio.to_thread(http_server.restart)
    await _turn(mcp_stack, chat_id, after=after)
    second_pid = _results(await mcp_stack.messages(chat_id))[-1]
    assert not second_pid["is_error"], second_pid["output"]
    assert second_pid["output"] != first_pid["output"], "a new server process answered"


async def test_a_call_past_the_servers_timeout_is_an_error_result_and_the_turn_goes_on(
    mcp_stack: Stack,
) -> None:
    call = FakeToolCall(name="slow__slow", arguments={"seconds": 30})
    chat_id, model = await _chat(
        mcp_stack, [FakeResponse(parts=[call]), DONE], mcp_servers=["slow"]
    )
    await _turn(mcp_stack, chat_id)

    [result] = _results(await mcp_stack.messages(chat_id))
    assert result["is_error"]
    assert "MCP server 'slow' is unavailable: no answer within 1 s" in result["output"]
    assert len(mcp_stack.fake.requests(model)) == 2


async def test_a_server_down_at_listing_offers_no_tools_and_the_turn_works(
    mcp_stack: Stack,
) -> None:
    calls = [
        FakeToolCall(name="down__x"),
        FakeToolCall(name="local__echo", arguments={"text": "hi"}),
    ]
    chat_id, model = await _chat(
        mcp_stack, [FakeResponse(parts=calls), DONE], mcp_servers=["down", "local"]
    )
    await _turn(mcp_stack, chat_id)

    offered = _offered(mcp_stack, model)
    assert "local__echo" in offered and not [t for t in offered if t.startswith("down__")]
    down, echo = _results(await mcp_stack.messages(chat_id))
    assert (down["output"], down["is_error"]) == ("Tool not found: down__x", True)
    assert (echo["output"], echo["is_error"]) == ("hi", False)


async def test_an_unknown_server_name_at_creation_is_a_400(mcp_stack: Stack) -> None:
    response = await mcp_stack.http.post("/chats", json={"mcp_servers": ["local", "nowhere"]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and "nowhere" in error["message"]


async def test_each_turn_lists_the_servers_once_and_keeps_that_list(
    mcp_stack: Stack, http_server: HttpMcpServer
) -> None:
    # The server dies in the first turn's first step: its second step still offers the tools
    # listed at the start; the next turn lists again and finds none.
    crash = FakeResponse(parts=[FakeToolCall(name="remote__crash")])
    chat_id, model = await _chat(mcp_stack, [crash, DONE, DONE], mcp_servers=["remote"])
    after = await _turn(mcp_stack, chat_id)
    assert not http_server.running
    [listed] = await _listings(mcp_stack, chat_id)
    assert "remote__add" in listed
    assert "remote__add" in _offered(mcp_stack, model, 0)
    assert _offered(mcp_stack, model, 1) == _offered(mcp_stack, model, 0)

    await _turn(mcp_stack, chat_id, after=after)
    assert await _listings(mcp_stack, chat_id) == [listed, []]
    assert not [t for t in _offered(mcp_stack, model, 2) if t.startswith("remote__")]


async def test_an_approval_wait_on_an_mcp_call_survives_a_worker_and_gateway_restart(
    make_stack: StackFactory, http_server: HttpMcpServer, notes: Path, tmp_path: Path
) -> None:
    mcp = load_mcp_config(
        str(write_mcp_config(tmp_path / "mcp.json", {"remote": http_server.entry()}))
    )
    call = FakeToolCall(name="remote__write_note", arguments={"text": "after the restart"})
    async with make_stack(mcp=mcp) as first:
        chat_id, _ = await _chat(first, [FakeResponse(parts=[call]), DONE], mcp_servers=["remote"])
        after = await _turn(first, chat_id, status="requires_action")
    # A new worker (new MCP sessions) and gateway take over the same queue and database.
    async with make_stack(mcp=mcp, task_queue=first.task_queue) as second:
        second.http.headers["Authorization"] = f"Bearer {first.key}"
        [pending] = (await second.http.get(f"/chats/{chat_id}")).json()["pending_tool_calls"]
        response = await second.http.post(
            f"/chats/{chat_id}/tool-approvals",
            json={"decisions": [{"tool_call_id": pending["id"], "decision": "approve"}]},
        )
        assert response.status_code == 202, response.text
        await second.wait_status(chat_id, "waiting", after=after)
        [result] = _results(await second.messages(chat_id))
    assert (result["output"], result["is_error"]) == ("noted", False)
    assert notes_written(notes) == ["after the restart"]
