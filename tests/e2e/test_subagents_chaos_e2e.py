"""Killing the worker while a parent waits for its subagent and the subagent's turn runs:
the child's step moves to the next worker, its end still wakes the parent's wait, and the
parent gets the child's answer once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harness import Cluster, Stack

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

ANSWER = "the child's answer " * 12
WITHIN_S = 90.0


async def _waiting_parent(stack: Stack, chat_id: str) -> str:
    """The child's id, once the parent waits for it and the child's turn streams."""
    for _ in range(int(WITHIN_S / 0.1)):
        messages = await stack.messages(chat_id)
        calls = [p["name"] for m in messages for p in m["parts"] if p["type"] == "tool_call"]
        children = (await stack.http.get(f"/chats/{chat_id}/children")).json()["data"]
        if "wait_agent" in calls and children and children[0]["status"] == "running":
            child: str = children[0]["id"]
            return child
        await asyncio.sleep(0.1)
    raise AssertionError("the parent never waited for a running child")


def _outputs(messages: list[dict[str, Any]], tool: str) -> list[Any]:
    ids = {
        p["id"]
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool_call" and p["name"] == tool
    }
    return [
        p["output"]
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool_result" and p["tool_call_id"] in ids
    ]


@pytest.mark.slow
async def test_a_worker_killed_while_a_parent_waits_and_its_child_runs(
    cluster: Cluster,
) -> None:
    stack, start_worker = cluster.stack, cluster.start_worker
    slow = FakeResponse(parts=[FakeText(text=ANSWER)], delta_delay_s=0.2)
    child_model = stack.scripted_model(slow, slow)  # the killed attempt, and its retry
    spawn = {"prompt": "work slowly", "model": child_model}
    parent_model = stack.scripted_model(
        FakeResponse(parts=[FakeToolCall(name="spawn_agent", arguments=spawn)]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 300})]),
        FakeResponse(parts=[FakeText(text="the child is done")]),
    )
    first = await cluster.polling_worker()
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "delegate")
    child_id = await _waiting_parent(stack, chat["id"])

    await asyncio.to_thread(first.kill)
    start_worker()
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)

    messages = await stack.messages(chat["id"])
    (waited,) = _outputs(messages, "wait_agent")
    assert waited == [
        {"id": child_id, "status": "finished", "title": waited[0]["title"], "answer": ANSWER}
    ]
    assert messages[-1]["parts"][0]["text"] == "the child is done"
    child_answers = [m for m in await stack.messages(child_id) if m["role"] == "assistant"]
    assert [m["parts"][0]["text"] for m in child_answers] == [ANSWER], "one answer, once"
    assert len(stack.fake.requests(child_model["name"])) == 2, "the killed step ran again"
