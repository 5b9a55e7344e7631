"""Client-executed (dynamic) tools: requires_action, validated submissions, expiry, interrupt."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from harness import Stack, StackFactory
from support.names import model_name

from chatd.devstack.temporal import TemporalDevServer, temporal_binary
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}


async def _requires_action(stack: Stack, calls: list[FakeToolCall], **chat: Any) -> dict[str, Any]:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeText(text="Let me ask."), *calls]),
            FakeResponse(parts=[FakeText(text="Thanks!")]),
        ],
    )
    created = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER], **chat
    )
    await stack.send(created["id"], "help me")
    await stack.wait_status(created["id"], "requires_action")
    chat_now = (await stack.http.get(f"/chats/{created['id']}")).json()
    chat_now["model_name"] = name
    return chat_now


async def test_mixed_step_runs_built_ins_first_then_waits_for_the_client(stack: Stack) -> None:
    chat = await _requires_action(
        stack,
        [
            FakeToolCall(name="current_time"),
            FakeToolCall(name="ask_user", arguments={"question": "Which colour?"}),
        ],
    )
    pending = chat["pending_tool_calls"]
    assert [(p["name"], p["arguments"]) for p in pending] == [
        ("ask_user", {"question": "Which colour?"})
    ]
    assert chat["status"] == "requires_action" and chat["action_expires_at"]
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[2]["parts"][0]["name"] == "current_time", "built-ins ran and persisted first"

    path = f"/chats/{chat['id']}/tool-results"
    call_id = pending[0]["id"]
    missing = await stack.http.post(path, json={"results": []})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_tool_results"
    assert missing.json()["error"]["detail"] == {"expected": [call_id], "received": []}
    extra = await stack.http.post(
        path,
        json={
            "results": [
                {"tool_call_id": call_id, "output": "blue"},
                {"tool_call_id": "toolu_unknown", "output": "x"},
            ]
        },
    )
    assert extra.status_code == 400
    duplicate = await stack.http.post(
        path, json={"results": [{"tool_call_id": call_id, "output": "blue"}] * 2}
    )
    assert duplicate.status_code == 400

    first = await stack.http.post(
        path, json={"results": [{"tool_call_id": call_id, "output": "blue-first"}]}
    )
    assert first.status_code == 202, first.text
    second = await stack.http.post(
        path, json={"results": [{"tool_call_id": call_id, "output": "red-second"}]}
    )
    assert second.status_code == 409
    assert second.headers["x-should-retry"] == "false"

    await stack.wait_status(chat["id"], "waiting")
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[3]["parts"][0]["output"] == "blue-first", "the first submission won"
    sent = json.dumps(stack.fake.requests(chat["model_name"])[1].body)
    assert "blue-first" in sent and "red-second" not in sent
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["pending_tool_calls"] is None


async def test_tool_results_when_nothing_waits_are_a_409(stack: Stack) -> None:
    chat = await stack.create_chat(dynamic_tools=[ASK_USER])
    response = await stack.http.post(f"/chats/{chat['id']}/tool-results", json={"results": []})
    assert response.status_code == 409
    assert response.json()["error"]["detail"]["status"] == "waiting"


async def test_an_unanswered_wait_expires_into_a_timeout_error_and_the_chat_recovers(
    stack: Stack,
) -> None:
    chat = await _requires_action(
        stack, [FakeToolCall(name="ask_user", arguments={"question": "?"})], action_timeout_s=1
    )
    await stack.wait_status(chat["id"], "error")
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert detail["last_error"]["kind"] == "timeout"
    results = (await stack.messages(chat["id"]))[-1]["parts"]
    assert results[0]["is_error"] and "expired" in results[0]["output"]

    stack.fake.script(chat["model_name"], [FakeResponse(parts=[FakeText(text="back")])])
    await stack.send(chat["id"], "still there?")
    await stack.wait_status(chat["id"], "waiting")
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert detail["last_error"] is None


async def test_an_interrupt_during_the_wait_answers_the_calls_and_leaves_the_chat_waiting(
    stack: Stack,
) -> None:
    chat = await _requires_action(stack, [FakeToolCall(name="ask_user", arguments={})])
    response = await stack.http.post(f"/chats/{chat['id']}/interrupt")
    assert response.status_code == 202
    await stack.wait_status(chat["id"], "waiting")
    results = (await stack.messages(chat["id"]))[-1]["parts"]
    assert results[0]["output"] == "tool call was interrupted before it produced a result"
    assert (await stack.http.post(f"/chats/{chat['id']}/interrupt")).status_code == 409


async def test_results_can_be_submitted_with_the_temporal_cli(
    stack: Stack, temporal_server: TemporalDevServer
) -> None:
    chat = await _requires_action(stack, [FakeToolCall(name="ask_user", arguments={})])
    call_id = chat["pending_tool_calls"][0]["id"]
    payload = json.dumps({"results": [{"tool_call_id": call_id, "output": "from the CLI"}]})
    command = [
        str(temporal_binary()),
        "workflow",
        "update",
        "execute",
        "--address",
        temporal_server.address,
        "--workflow-id",
        f"chat-{chat['id']}",
        "--name",
        "submit_tool_results",
        "--input",
        payload,
    ]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    await stack.wait_status(chat["id"], "waiting")
    results = (await stack.messages(chat["id"]))[-2]["parts"]
    assert results[0]["output"] == "from the CLI"


async def test_the_wait_survives_a_worker_and_gateway_restart(make_stack: StackFactory) -> None:
    name = model_name()
    async with make_stack() as first:
        first.fake.script(
            name,
            [
                FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={"question": "?"})]),
                FakeResponse(parts=[FakeText(text="Thanks!")]),
            ],
        )
        chat = await first.create_chat(
            model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER]
        )
        await first.send(chat["id"], "help me")
        await first.wait_status(chat["id"], "requires_action")
    # Nothing runs now; a new worker and gateway take over the same queue and database.
    async with make_stack(task_queue=first.task_queue) as second:
        second.http.headers["Authorization"] = f"Bearer {first.key}"
        waiting = (await second.http.get(f"/chats/{chat['id']}")).json()
        assert waiting["status"] == "requires_action"
        call_id = waiting["pending_tool_calls"][0]["id"]
        response = await second.http.post(
            f"/chats/{chat['id']}/tool-results",
            json={"results": [{"tool_call_id": call_id, "output": "after the restart"}]},
        )
        assert response.status_code == 202, response.text
        await second.wait_status(chat["id"], "waiting")
        messages = await second.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["parts"][0]["output"] == "after the restart"


async def test_a_client_tool_named_like_a_worker_s_tool_is_refused(stack: Stack) -> None:
    """It would shadow the built-in, advisor, subagent or MCP tool the model means to call."""
    root = stack.base_url.removesuffix("/api/v1")
    for name, taken in [
        ("read_file", "the worker's tool 'read_file'"),
        ("advisor", "the worker's tool 'advisor'"),
        ("spawn_agent", "the worker's tool 'spawn_agent'"),
        ("github__search", "the MCP tools' names"),
    ]:
        tool = {**ASK_USER, "name": name}
        native = await stack.http.post("/chats", json={"dynamic_tools": [tool]})
        assert native.status_code == 400, native.text
        assert taken in native.json()["error"]["message"]
        function = {"type": "function", "name": name, "parameters": {"type": "object"}}
        body = {"model": "demo/demo", "input": "hi", "tools": [function]}
        v1 = await stack.http.post(f"{root}/v1/responses", json=body)
        assert v1.status_code == 400, v1.text
        assert taken in v1.json()["error"]["message"]
    assert (await stack.http.get("/chats")).json()["chats"] == [], "nothing was created"
