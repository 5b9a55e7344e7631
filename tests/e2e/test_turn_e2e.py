"""A chat turn end to end: gateway -> Temporal -> worker -> real SDK -> fake provider -> SSE."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.names import model_name
from support.spend import unpriced_attempt
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import api.sending
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.models import ModelError
from chatd.parts import Message, Part, ReasoningPart, TextPart, Usage
from chatd.store.chats import ChatStore
from chatd.store.step_inputs import read_step_inputs
from chatd.store.step_keys import StepKey
from chatd.store.transcript import (
    NewMessage,
    TranscriptStore,
    TurnContext,
    message_event,
    user_message_event_sql,
)
from chatd.store.turns import INTERRUPT_CHANNEL, TurnStore
from chatd.webhooks.store import WebhookStore
from workflows.chat_turn import ChatTurn
from workflows.constants import WORKFLOW_TASK_TIMEOUT, workflow_id

MODES: list[dict[str, Any]] = [
    {"provider": "anthropic"},
    {"provider": "openai", "openai_api": "chat"},
    {"provider": "openai", "openai_api": "responses"},
]


def _model(**config: Any) -> dict[str, Any]:
    return {"name": model_name(), **config}


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(m.values()))
async def test_a_text_turn_streams_deltas_and_persists_the_answer(
    stack: Stack, mode: dict[str, Any]
) -> None:
    model = _model(**mode)
    answer = "Durable turns survive anything short of losing the cluster."
    stack.fake.script(
        model["name"],
        [
            FakeResponse(
                parts=[FakeText(text=answer, chunk_size=6)],
                usage=FakeUsage(input_tokens=42, output_tokens=12),
            )
        ],
    )
    chat = await stack.create_chat(model=model)
    sent = await stack.send(chat["id"], "Why Temporal?")
    assert sent["queued"] is False

    events = await stack.wait_status(chat["id"], "waiting")

    deltas = [e.data["part"]["text"] for e in events if e.event == "message_part"]
    assert len(deltas) > 1, "the answer must arrive as several deltas"
    assert "".join(deltas) == answer
    running = next(
        i for i, e in enumerate(events) if e.event == "status" and e.data["status"] == "running"
    )
    kinds = [e.event for e in events[running:]]
    assert kinds == ["status", *["message_part"] * len(deltas), "message", "status"], (
        "the deltas stream while the turn runs, before the answer is persisted"
    )
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert _texts(messages[0]) == "Why Temporal?"
    assert _texts(messages[1]) == answer
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert detail["status"] == "waiting"
    assert detail["usage"]["input_tokens"] == 42
    assert detail["usage"]["output_tokens"] == 12


async def test_a_two_step_turn_runs_a_built_in_tool_and_answers(stack: Stack) -> None:
    model = _model(provider="anthropic")
    stack.fake.script(
        model["name"],
        [
            FakeResponse(parts=[FakeText(text="Let me check."), FakeToolCall(name="current_time")]),
            FakeResponse(parts=[FakeText(text="It is now.")]),
        ],
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "What time is it?")
    events = await stack.wait_status(chat["id"], "waiting")

    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = next(p for p in messages[1]["parts"] if p["type"] == "tool_call")
    result = messages[2]["parts"][0]
    assert result["tool_call_id"] == call["id"]
    assert result["is_error"] is False
    assert "utc" in result["output"]
    assert any(e.event == "message_part" and e.data["role"] == "tool" for e in events)
    second_request = stack.fake.requests(model["name"])[1].body
    sent_results = [
        block
        for message in second_request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert [b["tool_use_id"] for b in sent_results] == [call["id"]]


async def test_the_suites_workers_run_workflows_in_the_sandbox(stack: Stack) -> None:
    assert stack.worker is not None
    assert isinstance(stack.worker.config()["workflow_runner"], SandboxedWorkflowRunner)


async def test_a_deployed_worker_runs_a_tool_turn_outside_the_sandbox(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The production default (`CHATD_WORKFLOW_SANDBOX` unset): every move of a tool turn,
    and its continuation into a queued message, on the unsandboxed runner."""
    monkeypatch.delenv("CHATD_WORKFLOW_SANDBOX")
    model = _model(provider="anthropic")
    responses = [
        FakeResponse(parts=[FakeToolCall(name="current_time")]),
        FakeResponse(parts=[FakeText(text="It is now.")]),
        FakeResponse(parts=[FakeText(text="Still now.")]),
    ]
    async with make_stack() as stack:
        assert stack.worker is not None
        assert isinstance(stack.worker.config()["workflow_runner"], UnsandboxedWorkflowRunner)
        stack.fake.script(model["name"], responses)
        chat = await stack.create_chat(model=model)
        await stack.send(chat["id"], "What time is it?")
        await stack.send(chat["id"], "And now?")
        await stack.events_until(
            chat["id"], lambda e: e.event == "message" and _texts(e.data) == "Still now."
        )
        await stack.wait_status(chat["id"], "waiting", after=0)
        messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"
    ]  # fmt: skip
    assert messages[2]["parts"][0]["is_error"] is False
    assert [_texts(m) for m in messages if m["role"] == "assistant"][1:] == [
        "It is now.",
        "Still now.",
    ]


async def test_a_message_sent_during_a_turn_is_queued_and_runs_next(stack: Stack) -> None:
    model = _model(provider="anthropic")
    stack.fake.script(
        model["name"],
        [
            # ~3 s of stream: the second send must land while the first turn still runs.
            FakeResponse(parts=[FakeText(text="first answer", chunk_size=2)], delta_delay_s=0.5),
            FakeResponse(parts=[FakeText(text="second answer")]),
        ],
    )
    chat = await stack.create_chat(model=model)
    first = await stack.send(chat["id"], "one")
    second = await stack.send(chat["id"], "two")
    assert (first["queued"], second["queued"]) == (False, True)
    queued = (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"]
    assert [q["id"] for q in queued] == [second["message_id"]]

    await stack.events_until(
        chat["id"],
        lambda e: e.event == "message" and _texts(e.data) == "second answer",
    )
    await stack.wait_status(chat["id"], "waiting", after=0)
    messages = await stack.messages(chat["id"])
    assert [(m["role"], _texts(m)) for m in messages] == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"] == []
    # The queued turn's run was continued-as-new and kept the start's workflow task timeout.
    handle = stack.temporal.get_workflow_handle(workflow_id(chat["id"]))
    started = [
        e.workflow_execution_started_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_execution_started_event_attributes")
    ]
    assert started[0].continued_execution_run_id
    assert started[0].workflow_task_timeout.ToTimedelta() == WORKFLOW_TASK_TIMEOUT


async def test_responses_chain_mode_sends_only_the_new_message_with_the_previous_id(
    stack: Stack,
) -> None:
    model = _model(provider="openai", openai_api="responses", openai_chain=True)
    stack.fake.script(
        model["name"],
        [FakeResponse(parts=[FakeText(text="first")]), FakeResponse(parts=[FakeText(text="2nd")])],
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "one")
    events = await stack.wait_status(chat["id"], "waiting")
    await stack.send(chat["id"], "two")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0)
    first, second = (r.body for r in stack.fake.requests(model["name"]))
    assert first["store"] is True and "previous_response_id" not in first
    assert second["previous_response_id"].startswith("resp")
    assert second["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}]


async def test_a_send_that_starts_a_turn_answers_202_with_the_chat_running(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """A 202 that started a turn comes once the turn has begun, so a client reading the chat
    then sees it run: begun by its first step, or (no worker took that step within 1 s) by
    the gateway.
    """
    model = _model()
    async with make_stack(with_worker=False) as stack:
        # Twice: the late worker runs in this busy process, and a step whose heartbeats came
        # late under load is retried (its abandoned stream saves nothing).
        done = FakeResponse(parts=[FakeText(text="Done.")])
        stack.fake.script(model["name"], [done, done])
        chat = await stack.create_chat(model=model)
        # Workflow tasks run, activities don't: the turn's first step can't begin it.
        async with Worker(stack.temporal, task_queue=stack.task_queue, workflows=[ChatTurn]):
            sent = await stack.send(chat["id"], "hi")
            assert sent["queued"] is False
            detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
            assert detail["status"] == "running"
            assert [m["role"] for m in await stack.messages(chat["id"])] == ["user"]
        async with stack.late_worker(tmp_path):
            events = await stack.wait_status(chat["id"], "waiting")
        statuses = [e.data["status"] for e in events if e.event == "status"]
        assert statuses == ["running", "waiting"], "begun once, by the gateway"
        assert [m["role"] for m in await stack.messages(chat["id"])] == ["user", "assistant"]


async def test_a_turn_begun_by_several_callers_at_once_is_begun_once(stack: Stack) -> None:
    """The gateway and the turn's first step (and its retries) race to begin a turn."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    queued, _ = await transcript.enqueue(chat_id, [TextPart(text="hi")], None)
    began = await asyncio.gather(*(turns.begin(chat_id, str(queued.id)) for _ in range(4)))
    assert sorted(began) == [False, False, False, True]
    assert [m["role"] for m in await stack.messages(chat["id"])] == ["user"]
    events = await stack.pool.fetch(
        "SELECT event, data FROM chat_events WHERE chat_id = $1 ORDER BY seq", chat_id
    )
    statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
    assert statuses == ["running"]
    # A message deleted before its turn began: nothing to begin.
    dropped, _ = await transcript.enqueue(chat_id, [TextPart(text="never mind")], None)
    assert await transcript.drop_queued(chat_id, dropped.id)
    assert await turns.begin(chat_id, str(dropped.id)) is None


async def test_a_first_steps_context_has_its_message_once_before_or_after_the_promotion(
    stack: Stack,
) -> None:
    """The first step reads its context while it begins the turn: the turn's message must be
    in it exactly once, last, whichever of the two commits first."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    earlier, _ = await transcript.enqueue(chat_id, [TextPart(text="earlier")], None)
    await turns.begin(chat_id, str(earlier.id))
    queued, _ = await transcript.enqueue(chat_id, [TextPart(text="now")], None)

    def texts(context: list[Message]) -> list[str]:
        return [p.text for m in context for p in m.parts if isinstance(p, TextPart)]

    async def first_step_context(message: uuid.UUID) -> TurnContext:
        step = StepKey.assistant(0)
        return (await read_step_inputs(stack.pool, chat_id, str(message), step, message)).context

    before = await first_step_context(queued.id)
    assert texts(before.messages) == ["earlier", "now"]
    assert before.messages[-1].role == "user"
    assert before.message_waiting
    assert texts(await transcript.for_model(chat_id)) == ["earlier"]
    await turns.begin(chat_id, str(queued.id))
    after = await first_step_context(queued.id)
    assert texts(after.messages) == ["earlier", "now"]
    assert not after.message_waiting
    raced, _ = await transcript.enqueue(chat_id, [TextPart(text="raced")], None)
    *contexts, began = await asyncio.gather(
        *(first_step_context(raced.id) for _ in range(4)),
        turns.begin(chat_id, str(raced.id)),
    )
    assert began is True
    assert all(texts(c.messages) == ["earlier", "now", "raced"] for c in contexts)
    assert not (await first_step_context(uuid.uuid4())).message_waiting


async def test_a_steps_inputs_are_what_the_chat_and_transcript_hold(stack: Stack) -> None:
    """The step's one read decodes the chat and a saved step from Postgres's JSON: they must
    be what the row readers make of the same rows, budgets included."""
    chat = await stack.create_chat(model=_model(), budget_usd=0.25, title="kept")
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    queued, _ = await transcript.enqueue(chat_id, [TextPart(text="hi")], None)
    turn_id = str(queued.id)
    await turns.begin(chat_id, turn_id)
    step = StepKey.assistant(0)
    saved = await transcript.save(
        chat_id,
        turn_id=turn_id,
        step_key=step,
        role="assistant",
        parts=[TextPart(text="hello"), ReasoningPart(text="why", signature="sig")],
        usage=Usage(input_tokens=3, output_tokens=2),
    )

    inputs = await read_step_inputs(stack.pool, chat_id, turn_id, step, None)

    assert inputs.chat == await ChatStore(stack.pool).get(chat_id)
    assert inputs.saved == saved == await transcript.find(chat_id, turn_id, step)
    assert [m.role for m in inputs.context.messages] == ["user", "assistant"]
    assert [(b.budget, b.limit_usd, b.holder) for b in inputs.budgets] == [
        ("chat", 0.25, str(chat_id))
    ]
    later = await read_step_inputs(stack.pool, chat_id, turn_id, StepKey.assistant(1), None)
    assert later.saved is None
    gone = await read_step_inputs(stack.pool, uuid.uuid4(), turn_id, step, None)
    assert gone.chat is None and gone.saved is None and gone.context.messages == []


async def test_a_turns_first_step_reads_what_its_owners_webhooks_take(stack: Stack) -> None:
    """The begin plans the turn from the step's read: a first step's read carries the events
    the chat owner's endpoints take (as the webhook store reads them), another owner's not."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    owner = (await ChatStore(stack.pool).get(chat_id)).owner  # type: ignore[union-attr]
    webhooks = WebhookStore(stack.pool)
    await webhooks.create_endpoint(owner, "https://a.example/h", ["turn.finished"], "s1")
    await webhooks.create_endpoint(owner, "https://b.example/h", ["turn.failed"], "s2")
    await webhooks.create_endpoint("someone-else", "https://c.example/h", ["turn.started"], "s3")
    queued, _ = await TranscriptStore(stack.pool).enqueue(chat_id, [TextPart(text="hi")], None)
    step = StepKey.assistant(0)

    first = await read_step_inputs(stack.pool, chat_id, str(queued.id), step, queued.id)
    later = await read_step_inputs(stack.pool, chat_id, str(queued.id), step, None)

    assert first.webhook_events == await webhooks.subscribed_events(owner)
    assert first.webhook_events == ["turn.failed", "turn.finished"]
    assert later.webhook_events == []


async def test_a_first_steps_request_goes_out_while_its_turn_begins_and_its_deltas_wait(
    stack: Stack,
) -> None:
    """The begin's commit is not on the way of the provider's request (the request needs
    only reads); no delta of the turn is published before the turn has begun. The begin is
    held here by a trigger on its promotion of the message, which waits on a lock the test
    holds: the delta writes don't touch that row."""
    model = _model()
    answer = "Asked while the turn began."
    stack.fake.script(model["name"], [FakeResponse(parts=[FakeText(text=answer, chunk_size=5)])])
    chat = await stack.create_chat(model=model)
    chat_id = uuid.UUID(chat["id"])
    lock = await stack.pool.fetchval("SELECT hashtext($1::text)", str(chat_id))
    trigger = f"hold_begin_{chat_id.hex}"
    await stack.pool.execute(
        f"""CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_lock_shared({lock});
                  PERFORM pg_advisory_unlock_shared({lock}); RETURN NEW; END $$;
            CREATE TRIGGER {trigger} BEFORE UPDATE OF promoted_at ON queued_messages
            FOR EACH ROW WHEN (NEW.chat_id = '{chat_id}' AND OLD.promoted_at IS NULL)
            EXECUTE FUNCTION {trigger}();"""
    )
    try:
        async with stack.pool.acquire() as holder:
            await holder.execute("SELECT pg_advisory_lock($1)", lock)
            send = asyncio.create_task(stack.send(chat["id"], "Begin while you ask."))
            async with asyncio.timeout(30):
                while not stack.fake.requests(model["name"]):  # noqa: ASYNC110 (another thread)
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # the provider's stream reaches the worker meanwhile
            published = await stack.pool.fetchval(
                "SELECT count(*) FROM chat_events WHERE chat_id = $1 AND event = 'message_part'",
                chat_id,
            )
            assert published == 0, "deltas were published before the turn began"
            assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] != "running"
            await holder.execute("SELECT pg_advisory_unlock($1)", lock)
        assert (await asyncio.wait_for(send, 30))["queued"] is False
        events = await stack.wait_status(chat["id"], "waiting")
    finally:
        await stack.pool.execute(
            f"DROP TRIGGER IF EXISTS {trigger} ON queued_messages; DROP FUNCTION {trigger}()"
        )
    running = next(
        i for i, e in enumerate(events) if e.event == "status" and e.data["status"] == "running"
    )
    assert running < next(i for i, e in enumerate(events) if e.event == "message_part")
    assert "".join(e.data["part"]["text"] for e in events if e.event == "message_part") == answer


async def test_message_events_finished_in_sql_are_the_ones_python_writes(stack: Stack) -> None:
    """Beginning a turn builds the user message's `message` event in SQL, and saving a step
    sets its event's id and time there: each must be what `message_event` makes of the
    stored message, down to the timestamp's text."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    parts: list[Part] = [
        TextPart(text="look"),
        ReasoningPart(text="a thought", signature="sig", provider_data={"x": 1}),
    ]
    queued, _ = await transcript.enqueue(chat_id, parts, None)
    assert await turns.begin(chat_id, str(queued.id))
    [stored] = (await transcript.page(chat_id, after_id=0, limit=10)).rows
    published = await stack.pool.fetchval(
        "SELECT data FROM chat_events WHERE chat_id = $1 AND event = 'message'", chat_id
    )
    assert published == message_event(stored)[1]
    assert "signature" not in json.dumps(published)
    step = await transcript.save(
        chat_id,
        turn_id=str(queued.id),
        step_key="step-0",
        role="assistant",
        parts=[ReasoningPart(text="hmm", signature="sig"), TextPart(text="answer")],
        usage=Usage(input_tokens=3, output_tokens=2),
    )
    again = await transcript.save(
        chat_id, turn_id=str(queued.id), step_key="step-0", role="assistant", parts=[]
    )
    assert again == step  # a retried save returns the first one and publishes nothing
    published_events = await stack.pool.fetch(
        "SELECT data FROM chat_events WHERE chat_id = $1 AND event = 'message' ORDER BY seq",
        chat_id,
    )
    assert [e["data"] for e in published_events] == [
        message_event(stored)[1],
        message_event(step)[1],
    ]
    assert await turns.finish(
        chat_id, str(queued.id), "error", last_error=ModelError(message="boom", kind="generic")
    )
    numbered = await stack.pool.fetch(
        "SELECT seq, event FROM chat_events WHERE chat_id = $1 ORDER BY seq", chat_id
    )
    assert [(r["seq"], r["event"]) for r in numbered] == list(
        enumerate(["message", "queue", "status", "message", "error", "status"], start=1)
    )
    for created_at in (
        datetime(2026, 11, 26, 7, 15, 3, 0, tzinfo=UTC),
        datetime(2026, 11, 26, 7, 15, 3, 120000, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=timezone(timedelta(hours=5))),
    ):
        # As read back: asyncpg gives timestamptz values in UTC.
        row = stored.model_copy(update={"created_at": created_at.astimezone(UTC), "parts": []})
        built = await stack.pool.fetchval(
            f"SELECT {user_message_event_sql('m')} FROM (SELECT $1::bigint AS id,"
            " $2::text AS turn_id, 'user'::text AS role, '[]'::jsonb AS parts,"
            " false AS compressed, $3::timestamptz AS created_at) AS m",
            row.id,
            row.turn_id,
            created_at,
        )
        assert built == message_event(row)[1]


async def test_a_turns_last_step_is_saved_and_finishes_the_turn_at_once(stack: Stack) -> None:
    """`save_last_step` saves the step and finishes the turn in one statement; a repeat does
    nothing, and a late one (the next turn began) saves its step but leaves the chat be."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    first, _ = await transcript.enqueue(chat_id, [TextPart(text="one")], None)
    assert await turns.begin(chat_id, str(first.id))
    await transcript.save(
        chat_id,
        turn_id=str(first.id),
        step_key="step-0",
        role="assistant",
        parts=[TextPart(text="calling")],
        usage=Usage(input_tokens=5, output_tokens=1),
    )
    last = NewMessage("step-1", "assistant", [TextPart(text="done")], Usage(input_tokens=7))
    settled = unpriced_attempt(chat_id, str(first.id), last)
    saved = await turns.save_last_step(chat_id, str(first.id), last, settled)
    assert saved is not None
    message, finished = saved
    assert finished
    assert await turns.save_last_step(chat_id, str(first.id), last, settled) is None  # lost

    async def events() -> list[tuple[str, dict[str, Any]]]:
        rows = await stack.pool.fetch(
            "SELECT event, data FROM chat_events WHERE chat_id = $1 ORDER BY seq", chat_id
        )
        return [(r["event"], r["data"]) for r in rows]

    published = await events()
    assert [name for name, _ in published] == [
        "message", "queue", "status", "message", "message", "status",
    ]  # fmt: skip
    assert published[4][1] == message_event(message)[1]
    assert published[5][1]["status"] == "waiting"
    assert published[5][1]["usage"]["input_tokens"] == 12  # both steps of the turn
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert (detail["status"], detail["usage"]["input_tokens"]) == ("waiting", 12)

    second, _ = await transcript.enqueue(chat_id, [TextPart(text="two")], None)
    assert await turns.begin(chat_id, str(second.id))
    late = NewMessage("step-2", "assistant", [TextPart(text="late")])
    settled = unpriced_attempt(chat_id, str(first.id), late)
    saved = await turns.save_last_step(chat_id, str(first.id), late, settled)
    assert saved is not None and saved[1] is False
    assert [name for name, _ in (await events())[len(published) :]] == [
        "message", "queue", "status", "message",
    ]  # fmt: skip
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["status"] == "running"


async def test_a_late_or_repeated_finish_changes_nothing(stack: Stack) -> None:
    """A step attempt that timed out may commit its finish after its retry did, or after the
    next turn began: the chat must stay as the later write left it."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    first, _ = await transcript.enqueue(chat_id, [TextPart(text="one")], None)
    assert await turns.begin(chat_id, str(first.id))
    assert await turns.finish(chat_id, str(first.id), "waiting") == "running"
    assert await turns.finish(chat_id, str(first.id), "waiting") is None  # the retry's
    second, _ = await transcript.enqueue(chat_id, [TextPart(text="two")], None)
    assert await turns.begin(chat_id, str(second.id))
    assert await turns.finish(chat_id, str(first.id), "waiting") is None  # the late one
    # The guard reads the chat's turn on its newest row (a finish waiting on the lock of a
    # begin that commits meanwhile sees it), not only the queue as of the statement's start.
    await stack.pool.execute(
        "UPDATE queued_messages SET promoted_at = NULL WHERE id = $1", second.id
    )
    assert await turns.finish(chat_id, str(first.id), "waiting") is None
    assert await stack.pool.fetchval("SELECT turn_id FROM chats WHERE id = $1", chat_id) == str(
        second.id
    )
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["status"] == "running"
    events = await stack.pool.fetch(
        "SELECT event, data FROM chat_events WHERE chat_id = $1 ORDER BY seq", chat_id
    )
    statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
    assert statuses == ["running", "waiting", "running"]


async def test_a_turn_begun_by_an_older_release_still_finishes(stack: Stack) -> None:
    """A release before `chats.turn_id` begins a turn without setting it: the chat still
    names the turn before, which must not keep the new turn from finishing."""
    chat = await stack.create_chat(model=_model())
    chat_id = uuid.UUID(chat["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    first, _ = await transcript.enqueue(chat_id, [TextPart(text="one")], None)
    assert await turns.begin(chat_id, str(first.id))
    second, _ = await transcript.enqueue(chat_id, [TextPart(text="two")], None)
    assert await turns.begin(chat_id, str(second.id))
    await stack.pool.execute(  # as the older release left it
        "UPDATE chats SET turn_id = $2 WHERE id = $1", chat_id, str(first.id)
    )
    assert await turns.finish(chat_id, str(first.id), "waiting") is None
    assert await turns.finish(chat_id, str(second.id), "waiting") == "running"
    row = await stack.pool.fetchrow("SELECT status, turn_id FROM chats WHERE id = $1", chat_id)
    assert (row["status"], row["turn_id"]) == ("waiting", None)  # an ended turn is no one's


async def test_an_interrupt_is_announced_only_for_the_turn_still_running(stack: Stack) -> None:
    """Workers key announced interrupts by turn id; a turn that ended (or never began) is
    not announced, so a later turn of the chat is never named by a stale interrupt."""
    chat_id = uuid.UUID((await stack.create_chat(model=_model()))["id"])
    transcript, turns = TranscriptStore(stack.pool), TurnStore(stack.pool)
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def nothing_heard() -> None:
        sentinel = str(uuid.uuid4())  # notifications arrive in order: this one comes next
        await stack.pool.execute("SELECT pg_notify($1, $2)", INTERRUPT_CHANNEL, sentinel)
        assert await asyncio.wait_for(heard.get(), 10) == sentinel

    async with stack.pool.acquire() as conn:

        def on_notify(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            heard.put_nowait(str(payload))

        await conn.add_listener(INTERRUPT_CHANNEL, on_notify)
        try:
            first, _ = await transcript.enqueue(chat_id, [TextPart(text="one")], None)
            await turns.announce_interrupt(chat_id, str(first.id))  # not begun
            await nothing_heard()
            assert await turns.begin(chat_id, str(first.id))
            await turns.announce_interrupt(chat_id, str(first.id))
            assert await asyncio.wait_for(heard.get(), 10) == str(first.id)
            await turns.finish(chat_id, str(first.id), "waiting")
            second, _ = await transcript.enqueue(chat_id, [TextPart(text="two")], None)
            assert await turns.begin(chat_id, str(second.id))
            await turns.announce_interrupt(chat_id, str(first.id))  # stale: the turn ended
            await nothing_heard()
        finally:
            await conn.remove_listener(INTERRUPT_CHANNEL, on_notify)


async def test_a_send_is_answered_once_its_first_step_began_the_turn(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's wait ends on the chat's notification, not on its fallback deadline."""
    monkeypatch.setattr(api.sending, "BEGIN_WAIT_S", 600.0)  # a broken wake-up would hang
    model = _model()
    stack.fake.script(model["name"], [FakeResponse(parts=[FakeText(text="Done.")])])
    chat = await stack.create_chat(model=model)
    sent = await asyncio.wait_for(stack.send(chat["id"], "hi"), 30)
    assert sent["queued"] is False
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert detail["status"] in ("running", "waiting")  # begun: by now maybe finished too
    assert (await stack.messages(chat["id"]))[0]["role"] == "user"
