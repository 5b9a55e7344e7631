"""What operators and clients rely on: CLI visibility, on_busy, the queue, gateway restarts."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from harness import Stack, StackFactory, sse_events
from support.names import model_name

from chatd.devstack.temporal import TemporalDevServer, temporal_binary
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

ASK = {"name": "ask", "description": "ask the user", "input_schema": {"type": "object"}}


async def _temporal(server: TemporalDevServer, *args: str, output: str = "json") -> str:
    command = [str(temporal_binary()), *args, "--address", server.address, "-o", output]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_temporal_cli_lists_chats_by_status_and_queries_their_state(
    stack: Stack, temporal_server: TemporalDevServer
) -> None:
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeToolCall(name="ask", arguments={})])])
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK]
    )
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "requires_action")
    query = f'ChatStatus="requires_action" AND ChatId="{chat["id"]}"'
    listed: list[dict[str, Any]] = []
    for _ in range(50):  # the visibility store is eventually consistent
        listed = [
            json.loads(line)
            for line in (
                await _temporal(temporal_server, "workflow", "list", "-q", query, output="jsonl")
            )
            .strip()
            .splitlines()
            if line.strip()
        ]
        if listed:
            break
        await asyncio.sleep(0.2)
    assert [w["execution"]["workflowId"] for w in listed] == [f"chat-{chat['id']}"]
    state = json.loads(
        await _temporal(
            temporal_server,
            "workflow",
            "query",
            "--workflow-id",
            f"chat-{chat['id']}",
            "--name",
            "state",
        )
    )
    result = state["queryResult"][0]
    assert result["status"] == "requires_action"
    assert [c["name"] for c in result["pending_tool_calls"]] == ["ask"]


async def test_on_busy_reject_is_409_and_interrupt_stops_the_turn_then_runs_the_message(
    stack: Stack,
) -> None:
    name = model_name()
    slow = FakeResponse(parts=[FakeText(text="x " * 200, chunk_size=2)], delta_delay_s=0.05)
    stack.fake.script(name, [slow, FakeResponse(parts=[FakeText(text="second")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "first")
    await stack.events_until(chat["id"], lambda e: e.event == "message_part")
    path = f"/chats/{chat['id']}/messages"
    rejected = await stack.http.post(path, json={"content": "nope", "on_busy": "reject"})
    assert rejected.status_code == 409 and rejected.json()["error"]["code"] == "chat_busy"
    taken = await stack.http.post(path, json={"content": "now", "on_busy": "interrupt"})
    # Queued behind the interrupted turn, or starting a run of its own if that turn had
    # ended already (an announced interrupt takes milliseconds): either way it runs next.
    assert taken.status_code == 202, taken.text
    await stack.events_until(
        chat["id"], lambda e: e.event == "message" and e.data["parts"][0].get("text") == "second"
    )
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1]["parts"][0]["text"] != "x " * 200, "the first turn was cut short"
    assert all(m["parts"][0].get("text") != "nope" for m in messages)
    assert messages[2]["turn_id"] == taken.json()["message_id"]


async def test_a_queued_message_can_be_dropped_before_its_turn(stack: Stack) -> None:
    name = model_name()
    slow = FakeResponse(parts=[FakeText(text="y " * 100, chunk_size=2)], delta_delay_s=0.05)
    stack.fake.script(name, [slow, FakeResponse(parts=[FakeText(text="kept")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "first")
    dropped = await stack.send(chat["id"], "drop me")
    kept = await stack.send(chat["id"], "keep me")
    assert dropped["queued"] and kept["queued"], "both were sent while the first turn ran"
    path = f"/chats/{chat['id']}/queue/{dropped['message_id']}"
    assert (await stack.http.delete(path)).status_code == 204
    assert (await stack.http.delete(path)).status_code == 404
    queue = (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"]
    assert [q["id"] for q in queue] == [kept["message_id"]]
    await stack.events_until(
        chat["id"], lambda e: e.event == "message" and e.data["parts"][0].get("text") == "kept"
    )
    texts = [m["parts"][0]["text"] for m in await stack.messages(chat["id"])]
    assert "drop me" not in texts and texts[-2:] == ["keep me", "kept"]
    promoted = f"/chats/{chat['id']}/queue/{kept['message_id']}"
    assert (await stack.http.delete(promoted)).status_code == 404


async def test_a_client_resumes_across_a_gateway_restart_without_gap_or_duplicate(
    make_stack: StackFactory,
) -> None:
    name = model_name()
    text = " ".join(f"w{i}" for i in range(80))
    async with make_stack() as first:
        stream = FakeResponse(parts=[FakeText(text=text, chunk_size=4)], delta_delay_s=0.05)
        first.fake.script(name, [stream, stream])  # the step may be retried on the new worker
        chat = await first.create_chat(model={"provider": "anthropic", "name": name})
        await first.send(chat["id"], "go")
        seen = await first.events_until(
            chat["id"],
            lambda e: (
                e.event == "message_part"
                and len(e.data["part"].get("text", "")) > 0
                and e.id is not None
                and e.id > 8
            ),
        )
    # The gateway (and its worker) are gone; a new pair serves the same database and queue.
    async with make_stack(task_queue=first.task_queue) as second:
        second.http.headers["Authorization"] = f"Bearer {first.key}"
        rest: list[Any] = []

        async def resume() -> None:
            async for event in sse_events(
                second.http, chat["id"], headers={"Last-Event-ID": str(seen[-1].id)}
            ):
                rest.append(event)
                if event.event == "status" and event.data["status"] == "waiting":
                    return

        await asyncio.wait_for(resume(), 60)
    ids = [e.id for e in seen + rest]
    assert ids == list(range(1, len(ids) + 1)), "every event once, in order, no gap"
    events = seen + rest
    resets = [i for i, e in enumerate(events) if e.event == "reset"]
    shown = events[resets[-1] + 1 :] if resets else events
    streamed = "".join(e.data["part"].get("text", "") for e in shown if e.event == "message_part")
    assert streamed == text, "what the client shows after the last reset is the whole answer"
    final = next(e for e in reversed(rest) if e.event == "message")
    assert final.data["parts"][0]["text"] == text
