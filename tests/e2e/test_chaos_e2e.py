"""Killing workers mid-stream and mid-tool: the turn moves to another worker, nothing lost."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from harness import Cluster, SseEvent, Stack
from support.names import model_name

from activities.tools import CRASHED_NON_IDEMPOTENT
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


async def _chat(stack: Stack, responses: list[FakeResponse]) -> tuple[str, str]:
    name = model_name()
    stack.fake.script(name, responses)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "work")
    return chat["id"], name


def _statuses(events: list[SseEvent]) -> list[str]:
    return [e.data["status"] for e in events if e.event == "status"]


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_worker_stopped_mid_stream_hands_the_step_to_another(
    cluster: Cluster, sig: signal.Signals
) -> None:
    stack = cluster.stack
    streaming = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1)
    again = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=60)])
    first = await cluster.polling_worker()
    chat_id, name = await _chat(stack, [streaming, again])
    seen = await stack.events_until(chat_id, lambda e: e.event == "message_part", within_s=60)
    cluster.start_worker()
    await asyncio.to_thread(first.signal, sig)
    events = seen + await stack.wait_status(chat_id, "waiting", after=seen[-1].id or 0, within_s=60)

    assert _statuses(events) == ["running", "waiting"], "never waiting/error because of a stop"
    kinds = [e.event for e in events]
    reset_at = kinds.index("reset")
    resumed = "".join(
        e.data["part"]["text"] for e in events[reset_at:] if e.event == "message_part"
    )
    assert resumed == LONG_TEXT, "after the reset, the new attempt's parts arrive whole"
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [("user", "work"), ("assistant", LONG_TEXT)]
    assert len(stack.fake.requests(name)) == 2
    if sig == signal.SIGTERM:
        await asyncio.to_thread(first.wait)
        log = first.log.read_text()
        assert "step attempt abandoned" in log, log
        assert "Traceback" not in log, "a retried attempt is one line, not a crash's traceback"


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("slow_idempotent", "slow work done"), ("slow_once", CRASHED_NON_IDEMPOTENT)],
)
async def test_a_worker_killed_mid_tool(cluster: Cluster, tool: str, expected: str) -> None:
    stack = cluster.stack
    marker = cluster.tmp / f"{tool}.started"
    model = stack.stepped_model(
        FakeResponse(parts=[FakeToolCall(name=tool, arguments={"marker": str(marker)})]),
        FakeResponse(parts=[FakeText(text="all done")]),
    )
    first = await cluster.polling_worker()
    chat = await stack.create_chat(model=model)
    chat_id = chat["id"]
    await stack.send(chat_id, "work")
    for _ in range(600):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists(), "the tool never started"
    marker.unlink()
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    await stack.wait_status(chat_id, "waiting", within_s=90)
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    result = messages[2]["parts"][0]
    assert result["output"] == expected
    assert marker.exists() == (tool == "slow_idempotent"), "only the idempotent tool re-ran"


@pytest.mark.parametrize("where", ["later step", "compaction"])
@pytest.mark.slow
async def test_a_worker_killed_later_in_a_turn_hands_the_turn_to_another(
    cluster: Cluster, where: str
) -> None:
    """SIGKILL while a later step streams, or while the summary is being written: the turn
    goes on on another worker and ends `waiting` (the fault matrix's fifth fault)."""
    stack = cluster.stack
    slow = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1)
    again = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=60)])
    after = FakeResponse(parts=[FakeText(text="after the summary")])
    if where == "later step":
        script = [FakeResponse(parts=[FakeToolCall(name="current_time")]), slow, again]
        running = _text_delta
    else:
        long = FakeResponse(parts=[FakeText(text="long")], usage=FakeUsage(input_tokens=700))
        script = [long, slow, again, after]
        running = _summary_running
    name = model_name()
    stack.fake.script(name, script)
    first = await cluster.polling_worker()
    model = {"provider": "anthropic", "name": name, "context_limit": 1000}
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "work")
    seen = await stack.events_until(chat["id"], running, within_s=60)
    # The summary's `running` is published before its request goes out: the kill must land
    # while the slow answer streams, or the retry takes it and the script runs one behind.
    for _ in range(600):
        if len(stack.fake.requests(name)) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(stack.fake.requests(name)) == 2, "the slow answer was never asked for"
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    events = await stack.wait_status(chat["id"], "waiting", after=seen[-1].id or 0, within_s=120)

    assert "error" not in _statuses(seen + events)
    messages = await stack.messages(chat["id"])
    if where == "later step":
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert _text(messages[-1]) == LONG_TEXT
    else:
        summaries = [m for m in messages if m["role"] == "user" and LONG_TEXT in _text(m)]
        assert len(summaries) == 1, "one summary, written by the attempt that finished"
        assert _text(messages[-1]) == "after the summary"


def _text_delta(event: SseEvent) -> bool:
    return event.event == "message_part" and event.data["part"].get("type") == "text"


def _summary_running(event: SseEvent) -> bool:
    part = event.data.get("part", {}) if event.event == "message_part" else {}
    return part.get("name") == "chat_summarized" and part.get("status") == "running"
