"""Killing workers while a turn waits for approval and while an approved call runs: the wait
outlives its worker, and an approved call keeps its tool's guarantee (idempotent tools run
to completion, others at most once)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster, Stack
from support.names import model_name

from activities.tools import CRASHED_NON_IDEMPOTENT
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

SLOW_S = 10.0
"""How long the slow tools run: long enough that the kill lands while one runs."""


async def _waiting_for_approval(cluster: Cluster, tool: str, marker: Path) -> tuple[str, str]:
    """A chat whose model called `tool`, waiting for its approval; (chat id, call id)."""
    stack = cluster.stack
    name = model_name()
    arguments = {"marker": str(marker), "seconds": SLOW_S}
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name=tool, arguments=arguments)]),
            FakeResponse(parts=[FakeText(text="all done")]),
        ],
    )
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, tool_policy={"slow_*": "ask"}
    )
    await stack.send(chat["id"], "work")
    await stack.wait_status(chat["id"], "requires_action", within_s=60)
    pending = (await stack.http.get(f"/chats/{chat['id']}")).json()["pending_tool_calls"]
    [call] = pending
    assert call["action"] == "approval" and call["name"] == tool
    return chat["id"], call["id"]


async def _approve(stack: Stack, chat_id: str, call_id: str) -> None:
    response = await stack.http.post(
        f"/chats/{chat_id}/tool-approvals",
        json={"decisions": [{"tool_call_id": call_id, "decision": "approve"}]},
    )
    assert response.status_code == 202, response.text


async def _result(stack: Stack, chat_id: str) -> dict[str, Any]:
    """The one tool result of the chat's finished turn."""
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    result: dict[str, Any] = messages[2]["parts"][0]
    return result


@pytest.mark.slow
async def test_a_wait_for_approval_outlives_a_killed_worker(cluster: Cluster) -> None:
    stack = cluster.stack
    marker = cluster.tmp / "slow_once.started"
    first = await cluster.polling_worker()
    chat_id, call_id = await _waiting_for_approval(cluster, "slow_once", marker)
    await asyncio.to_thread(first.kill)
    cluster.start_worker()

    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "requires_action"
    await _approve(stack, chat_id, call_id)
    await stack.wait_status(chat_id, "waiting", within_s=90)
    assert (await _result(stack, chat_id))["output"] == "slow work done"
    assert marker.exists(), "the approved call ran on the new worker"


async def _wait_for(marker: Path) -> None:
    """Until the tool touched `marker` (it started)."""
    for _ in range(1200):
        if await asyncio.to_thread(marker.exists):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the tool never started: {marker} is missing")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool", "expected"),
    [("slow_idempotent", "slow work done"), ("slow_once", CRASHED_NON_IDEMPOTENT)],
)
async def test_a_worker_killed_during_an_approved_call(
    cluster: Cluster, tool: str, expected: str
) -> None:
    stack = cluster.stack
    marker = cluster.tmp / f"{tool}.started"
    first = await cluster.polling_worker()
    chat_id, call_id = await _waiting_for_approval(cluster, tool, marker)
    await _approve(stack, chat_id, call_id)
    await _wait_for(marker)
    marker.unlink()
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    await stack.wait_status(chat_id, "waiting", within_s=120)

    result = await _result(stack, chat_id)
    assert result["output"] == expected
    assert result.get("is_error", False) is (tool == "slow_once")
    assert marker.exists() == (tool == "slow_idempotent"), "only the idempotent tool re-ran"
    [decision] = (await stack.http.get(f"/chats/{chat_id}/tool-decisions")).json()["decisions"]
    assert decision["decision"] == "approve" and decision["tool_call_id"] == call_id
