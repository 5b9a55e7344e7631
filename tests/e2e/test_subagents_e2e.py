"""Subagents through the gateway: spawn, the durable wait, limits and interrupts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from harness import Stack

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

WITHIN_S = 30.0


def _spawn(prompt: str, model: dict[str, str] | None = None) -> FakeToolCall:
    arguments: dict[str, Any] = {"prompt": prompt}
    if model is not None:
        arguments["model"] = model
    return FakeToolCall(name="spawn_agent", arguments=arguments)


def _result(messages: list[dict[str, Any]], name: str) -> list[Any]:
    """The outputs of the tool results for calls of tool `name`, in order."""
    calls = {
        p["id"]
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool_call" and p["name"] == name
    }
    return [
        p.get("output")
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool_result" and p["tool_call_id"] in calls
    ]


async def _children(stack: Stack, chat_id: str) -> list[dict[str, Any]]:
    response = await stack.http.get(f"/chats/{chat_id}/children")
    assert response.status_code == 200, response.text
    children: list[dict[str, Any]] = response.json()["data"]
    return children


async def test_two_children_run_in_parallel_and_the_wait_returns_both_answers(
    stack: Stack,
) -> None:
    child_model = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="child answer")]),
        FakeResponse(parts=[FakeText(text="child answer")]),
    )
    parent_model = stack.scripted_model(
        FakeResponse(
            parts=[_spawn("count the files", child_model), _spawn("read the docs", child_model)]
        ),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})]),
        FakeResponse(parts=[FakeText(text="both are done")]),
    )
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "split the work")
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)

    messages = await stack.messages(chat["id"])
    spawned = _result(messages, "spawn_agent")
    ids = sorted(s["id"] for s in spawned)
    (waited,) = _result(messages, "wait_agent")
    assert sorted(w["id"] for w in waited) == ids
    assert {(w["status"], w["answer"]) for w in waited} == {("finished", "child answer")}
    children = await _children(stack, chat["id"])
    assert sorted(c["id"] for c in children) == ids
    assert {c["parent_chat_id"] for c in children} == {chat["id"]}
    roots = (await stack.http.get("/chats")).json()["chats"]
    assert chat["id"] in {c["id"] for c in roots} and not set(ids) & {c["id"] for c in roots}
    shown = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert shown["usage"]["children"]["output_tokens"] > 0
    family = f'ChatId="{chat["id"]}" OR ChatParent="{chat["id"]}"'
    listed: set[str] = set()
    for _ in range(int(WITHIN_S / 0.2)):  # visibility follows the runs by a moment
        listed = {w.id async for w in stack.temporal.list_workflows(family)}
        if len(listed) == 3:
            break
        await asyncio.sleep(0.2)
    assert listed == {f"chat-{i}" for i in [chat["id"], *ids]}, "one query lists the family"


async def test_a_wait_that_times_out_says_which_children_still_run(stack: Stack) -> None:
    slow_child = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="late")], first_byte_delay_s=20)
    )
    parent_model = stack.scripted_model(
        FakeResponse(parts=[_spawn("take your time", slow_child)]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 1})]),
        FakeResponse(parts=[FakeText(text="moving on")]),
    )
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "go")
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    (waited,) = _result(await stack.messages(chat["id"]), "wait_agent")
    assert [w["status"] for w in waited] == ["running"]
    (child,) = await _children(stack, chat["id"])
    await stack.http.post(f"/chats/{child['id']}/interrupt")


async def test_interrupting_the_parent_interrupts_its_running_children(stack: Stack) -> None:
    slow_child = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="never finished " * 50)], delta_delay_s=0.5)
    )
    parent_model = stack.scripted_model(
        FakeResponse(parts=[_spawn("work slowly", slow_child)]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 600})]),
    )
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "go")
    children: list[dict[str, Any]] = []
    for _ in range(int(WITHIN_S / 0.1)):
        children = await _children(stack, chat["id"])
        if children and children[0]["status"] == "running":
            break
        await asyncio.sleep(0.1)
    (child,) = children
    # Once the child has streamed something, an interrupt has a partial step to keep.
    await stack.events_until(child["id"], lambda e: e.event == "message_part")
    interrupted = await stack.http.post(f"/chats/{chat['id']}/interrupt")
    assert interrupted.status_code == 202, interrupted.text
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    await stack.wait_status(child["id"], "waiting", within_s=WITHIN_S)
    (answer,) = [m for m in await stack.messages(child["id"]) if m["role"] == "assistant"]
    partial = answer["parts"][0]["text"]
    assert partial and ("never finished " * 50).startswith(partial), "the partial step is kept"


async def test_a_child_cannot_spawn_and_a_chat_runs_at_most_its_limit_of_children(
    stack: Stack,
) -> None:
    grandchild = stack.scripted_model(FakeResponse(parts=[FakeText(text="hi")]))
    child_model = stack.scripted_model(
        FakeResponse(parts=[_spawn("deeper", grandchild)]),
        FakeResponse(parts=[FakeText(text="could not")]),
    )
    parent_model = stack.scripted_model(
        FakeResponse(parts=[_spawn("try to nest", child_model)]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})]),
        FakeResponse(parts=[FakeText(text="done")]),
    )
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "go")
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    (child,) = await _children(stack, chat["id"])
    offered = [t["name"] for t in stack.fake.requests(child_model["name"])[0].body.get("tools", [])]
    assert "spawn_agent" not in offered and "wait_agent" not in offered, "depth limit 1"
    (refused,) = _result(await stack.messages(child["id"]), "spawn_agent")
    assert "not" in json.dumps(refused).lower()
    assert await _children(stack, child["id"]) == []


async def test_spawns_past_the_limit_of_running_children_are_refused(stack: Stack) -> None:
    slow = FakeResponse(parts=[FakeText(text="slow")], first_byte_delay_s=3)
    child_model = stack.scripted_model(*[slow] * 5)
    parent_model = stack.scripted_model(
        FakeResponse(parts=[_spawn(f"task {n}", child_model) for n in range(5)]),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})]),
        FakeResponse(parts=[FakeText(text="done")]),
    )
    chat = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(chat["id"], "go")
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    spawned = _result(await stack.messages(chat["id"]), "spawn_agent")
    refused = [s for s in spawned if isinstance(s, str)]
    assert len(refused) == 1 and "the most a chat may have at once" in refused[0]
    assert len(await _children(stack, chat["id"])) == 4
