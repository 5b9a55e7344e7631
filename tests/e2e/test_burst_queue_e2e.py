"""A send no worker takes in time is queued durably (a signal-with-start), and every message
starts exactly one turn however many ways it was handed over."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.names import model_name
from temporalio.api.command.v1 import Command, ScheduleActivityTaskCommandAttributes
from temporalio.api.enums.v1 import CommandType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollWorkflowTaskQueueRequest,
    RespondWorkflowTaskCompletedRequest,
)
from temporalio.service import RPCError

import api.hand_overs
import api.sending
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText
from chatd.parts import TextPart
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.transcript import TranscriptStore
from chatd.turn_starts import hand_over_message, queue_message
from workflows.constants import workflow_id


def _reply(text: str) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text)])


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (m["role"], "".join(p["text"] for p in m["parts"] if p["type"] == "text")) for m in messages
    ]


async def _event_seq(stack: Stack, chat_id: str) -> int:
    seq = await stack.pool.fetchval(
        "SELECT last_event_seq FROM chats WHERE id = $1", uuid.UUID(chat_id)
    )
    return int(seq)


async def _stored(stack: Stack, chat_id: str, text: str) -> tuple[ChatRecord, str]:
    """The chat and a message stored in its queue, as a gateway stores a send."""
    queued, _ = await TranscriptStore(stack.pool).enqueue(
        uuid.UUID(chat_id), [TextPart(text=text)], None
    )
    chat = await ChatStore(stack.pool).get(uuid.UUID(chat_id))
    assert chat is not None
    return chat, str(queued.id)


async def _resets_until_ended(stack: Stack, chat_id: str, turn_id: str) -> int:
    """The chat's `reset` events (a step's abandoned attempt, which sent a request of its
    own) up to the end of turn `turn_id`."""
    events = await stack.events_until(
        chat_id,
        lambda e: (
            e.event == "status"
            and e.data["status"] == "waiting"
            and e.data.get("turn_id") == turn_id
        ),
    )
    return sum(1 for e in events if e.event == "reset")


async def _until_transcript(stack: Stack, chat_id: str, count: int) -> list[dict[str, Any]]:
    for _ in range(600):
        messages = await stack.messages(chat_id)
        chat = (await stack.http.get(f"/chats/{chat_id}")).json()
        if len(messages) >= count and chat["status"] == "waiting":
            return messages
        await asyncio.sleep(0.05)
    raise AssertionError(f"the chat never had {count} messages: {_texts(messages)}")


async def test_sends_no_worker_takes_are_queued_and_each_runs_once_in_order(
    make_stack: StackFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 0.5)
    async with make_stack(with_worker=False) as stack:
        # Answered by the message it answers: a step retried on a loaded machine (its
        # attempt abandoned) gets its own answer again, not the next message's.
        name = model_name()
        stack.fake.script(name, _answer_by_message)
        model = {"provider": "anthropic", "name": name}
        chat = await stack.create_chat(model=model)
        sent = [await stack.send(chat["id"], text) for text in ("m1", "m2", "m3")]
        for answer in sent:
            assert answer["queued"] is True and answer["turn_id"] is None, answer
        waiting = (await stack.http.get(f"/chats/{chat['id']}")).json()
        assert waiting["status"] == "waiting", "nothing began: no worker ran the workflow"
        assert [q["id"] for q in waiting["queued_messages"]] == [a["message_id"] for a in sent]
        async with stack.late_worker(tmp_path):
            messages = await _until_transcript(stack, chat["id"], 6)
        assert _texts(messages) == [
            ("user", "m1"),
            ("assistant", "a1"),
            ("user", "m2"),
            ("assistant", "a2"),
            ("user", "m3"),
            ("assistant", "a3"),
        ]
        assert [m["turn_id"] for m in messages[::2]] == [a["message_id"] for a in sent]
        resets = await _resets_until_ended(stack, chat["id"], sent[-1]["message_id"])
        # One model request a turn; an abandoned attempt (announced by a reset) may add one.
        assert 3 <= len(stack.fake.requests(name)) <= 3 + resets


def _answer_by_message(request: FakeRequest) -> FakeResponse:
    """`aN` for the turn of the user message `mN`."""
    last = str(request.body["messages"][-1])
    (number,) = [n for n in "123" if f"m{n}" in last]
    return _reply(f"a{number}")


async def test_once_a_hand_over_timed_out_the_next_sends_queue_without_waiting(
    make_stack: StackFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway learns the workers are behind from one send that waited in vain; the
    sends after it don't wait (the long wait they would otherwise sit out would time this
    test out), and their messages still run once each, in order."""
    monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 0.5)
    monkeypatch.setattr(api.hand_overs, "BEHIND_FOR_S", 600.0)  # however slow this machine is
    async with make_stack(with_worker=False) as stack:
        # Answered by the message it answers, as above: a retried step gets its own answer.
        name = model_name()
        stack.fake.script(name, _answer_by_message)
        chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
        first = await stack.send(chat["id"], "m1")
        monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 3600.0)
        second = await asyncio.wait_for(stack.send(chat["id"], "m2"), 60)
        for answer in (first, second):
            assert answer["queued"] is True and answer["turn_id"] is None, answer
        async with stack.late_worker(tmp_path):
            messages = await _until_transcript(stack, chat["id"], 4)
        assert _texts(messages) == [
            ("user", "m1"),
            ("assistant", "a1"),
            ("user", "m2"),
            ("assistant", "a2"),
        ]
        resets = await _resets_until_ended(stack, chat["id"], second["message_id"])
        assert 2 <= len(stack.fake.requests(name)) <= 2 + resets


async def test_a_message_handed_over_both_ways_in_the_same_run_turns_once(stack: Stack) -> None:
    """The update and its signal fallback both land while one run is open."""
    model = stack.scripted_model(_reply("a1"), _reply("a2"))
    created = await stack.create_chat(model=model)
    chat, first = await _stored(stack, created["id"], "m1")
    _, second = await _stored(stack, created["id"], "m2")
    queue = stack.task_queue
    for queued_id in (first, second):
        await asyncio.gather(
            hand_over_message(
                stack.temporal, queue, chat, queued_id, f"msg-{queued_id}", name_chat=False
            ),
            queue_message(stack.temporal, queue, chat, queued_id, name_chat=False),
        )
    messages = await _until_transcript(stack, created["id"], 4)
    assert _texts(messages) == [
        ("user", "m1"),
        ("assistant", "a1"),
        ("user", "m2"),
        ("assistant", "a2"),
    ]
    assert len(stack.fake.requests(model["name"])) == 2


async def test_a_message_signalled_after_its_turn_ended_starts_no_second_turn(
    stack: Stack,
) -> None:
    """The update took the message and its turn ran to the end; the signal sent for the same
    message (the send had given up waiting) lands after, starting a new run: that run finds
    the message begun by another and ends without a turn, writing nothing."""
    model = stack.scripted_model(_reply("a1"))
    created = await stack.create_chat(model=model)
    chat, queued_id = await _stored(stack, created["id"], "m1")
    queue = stack.task_queue
    await hand_over_message(
        stack.temporal, queue, chat, queued_id, f"msg-{queued_id}", name_chat=False
    )
    handle = stack.temporal.get_workflow_handle(workflow_id(created["id"]))
    await asyncio.wait_for(handle.result(), 30)
    first_run = (await handle.describe()).run_id
    seq = await _event_seq(stack, created["id"])

    await queue_message(stack.temporal, queue, chat, queued_id, name_chat=False)
    await asyncio.wait_for(handle.result(), 30)
    assert (await handle.describe()).run_id != first_run, "the signal started a run of its own"

    assert _texts(await stack.messages(created["id"])) == [("user", "m1"), ("assistant", "a1")]
    assert len(stack.fake.requests(model["name"])) == 1
    assert await _event_seq(stack, created["id"]) == seq, "the second run published nothing"
    taken_by = await stack.pool.fetchval(
        "SELECT promoted_by FROM queued_messages WHERE id = $1", uuid.UUID(queued_id)
    )
    assert taken_by == first_run
    assert (await stack.http.get(f"/chats/{created['id']}")).json()["status"] == "waiting"


async def test_a_message_its_gateway_never_handed_over_runs_before_the_next_one_sent(
    stack: Stack,
) -> None:
    """A gateway answered a send once the message was stored and died before handing it
    over; the client's next message, through another gateway, hands the stranded one over
    first: the turns take them in the order sent, with no reconciler."""
    model = stack.scripted_model(_reply("a1"), _reply("a2"))
    created = await stack.create_chat(model=model)
    _, stranded = await _stored(stack, created["id"], "m1")
    answer = await stack.send(created["id"], "m2")
    assert answer["queued"] is True, "m2 waits behind m1's turn"
    messages = await _until_transcript(stack, created["id"], 4)
    assert _texts(messages) == [
        ("user", "m1"),
        ("assistant", "a1"),
        ("user", "m2"),
        ("assistant", "a2"),
    ]
    assert [m["turn_id"] for m in messages[::2]] == [stranded, answer["message_id"]]
    # Marked in the gateway's batch of marks, a moment after each hand-over.
    for _ in range(600):
        unmarked = await stack.pool.fetchval(
            "SELECT count(*) FROM queued_messages WHERE chat_id = $1 AND handed_over_at IS NULL",
            uuid.UUID(created["id"]),
        )
        if unmarked == 0:
            break
        await asyncio.sleep(0.05)
    assert unmarked == 0, "both are recorded as handed over"


async def test_a_send_whose_update_temporal_dropped_is_queued_and_runs_once(
    make_stack: StackFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow task carrying the send's update fails on the server (here a worker's
    command it refuses; in production, a signal landing while the task ends the run):
    Temporal drops the update. The message is stored, so the send is answered 202 and its
    signal hands it over; it is not a 503 asking the client to send it again."""
    monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 3600.0)  # no timeout fallback
    async with make_stack(with_worker=False) as stack:
        # The same answer to a retried step: the late worker, in this loaded process, may
        # miss a heartbeat and have its attempt abandoned.
        model = stack.stepped_model(_reply("a1"))
        chat = await stack.create_chat(model=model)
        sending = asyncio.create_task(
            stack.http.post(f"/chats/{chat['id']}/messages", json={"content": "m1"})
        )
        carried = await _fail_one_workflow_task(stack)
        assert carried, "the failed task carried the send's update"
        sent = await asyncio.wait_for(sending, 60)
        assert sent.status_code == 202, sent.text
        assert sent.json()["queued"] is True
        async with stack.late_worker(tmp_path):
            messages = await _until_transcript(stack, chat["id"], 2)
        assert _texts(messages) == [("user", "m1"), ("assistant", "a1")]
        resets = await _resets_until_ended(stack, chat["id"], sent.json()["message_id"])
        # One model request; an abandoned attempt (announced by a reset) may add one.
        assert 1 <= len(stack.fake.requests(model["name"])) <= 1 + resets


async def _fail_one_workflow_task(stack: Stack) -> int:
    """Poll the stack's task queue as a worker would and answer its first workflow task
    with a command the server refuses (an activity without an id): the server fails the
    task. How many protocol messages (updates) the task carried."""
    service = stack.temporal.workflow_service
    namespace = stack.temporal.namespace
    task = await service.poll_workflow_task_queue(
        PollWorkflowTaskQueueRequest(
            namespace=namespace,
            task_queue=TaskQueue(name=stack.task_queue),
            identity="refusing-worker",
        )
    )
    refused = Command(
        command_type=CommandType.COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK,
        schedule_activity_task_command_attributes=ScheduleActivityTaskCommandAttributes(),
    )
    with contextlib.suppress(RPCError):  # the server may answer the refusal as an error
        await service.respond_workflow_task_completed(
            RespondWorkflowTaskCompletedRequest(
                namespace=namespace,
                task_token=task.task_token,
                identity="refusing-worker",
                commands=[refused],
            )
        )
    return len(task.messages)
