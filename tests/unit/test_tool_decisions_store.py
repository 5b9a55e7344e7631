"""The approval audit (chatd.store.tool_decisions): a step's decisions and what they change are
recorded at once, the first record of a call wins, and the audit lists them in order."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import asyncpg
import pytest

from chatd.models import ModelConfig
from chatd.parts import TextPart, ToolCallPart
from chatd.store.chats import ChatStore
from chatd.store.events import EventLog
from chatd.store.step_keys import StepKey
from chatd.store.tool_decisions import (
    Decider,
    NewDecision,
    ToolDecisionStore,
    canonical_sha256,
)
from chatd.store.transcript import TranscriptStore

TURN = "turn-1"
KEY = Decider(key_id=str(uuid.uuid4()), owner="o")
MODEL_ARGS = {"c1": '{"path": "a.txt"}', "c2": '{"cmd": "ls"}', "c3": '{"cmd": "rm -rf /"}'}


async def _waiting_step(pool: asyncpg.Pool, step: int = 0) -> uuid.UUID:
    """A chat whose step `step` called three tools."""
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig(), tool_policy={"x": "ask"})
    await _step(pool, chat.id, step)
    return chat.id


async def _step(pool: asyncpg.Pool, chat_id: uuid.UUID, step: int) -> None:
    calls = [ToolCallPart(id=i, name=f"tool_{i}", arguments=a) for i, a in MODEL_ARGS.items()]
    await TranscriptStore(pool).save(
        chat_id,
        turn_id=TURN,
        step_key=StepKey.assistant(step),
        role="assistant",
        parts=[TextPart(text="calling"), *calls],
        response_id=f"resp_{step}",
    )


def _approve(call: str, arguments: str | None = None, remember: bool = False) -> NewDecision:
    return NewDecision(
        tool_call_id=call,
        tool_name=f"tool_{call}",
        decision="approve",
        arguments=arguments or MODEL_ARGS[call],
        edited=arguments is not None,
        remember=remember,
    )


def _deny(call: str, message: str | None = None, remember: bool = False) -> NewDecision:
    return NewDecision(
        tool_call_id=call,
        tool_name=f"tool_{call}",
        decision="deny",
        arguments=MODEL_ARGS[call],
        edited=False,
        message=message,
        remember=remember,
    )


async def _calls(pool: asyncpg.Pool, chat_id: uuid.UUID, step: int = 0) -> list[ToolCallPart]:
    message = await TranscriptStore(pool).find(chat_id, TURN, StepKey.assistant(step))
    assert message is not None
    return [p for p in message.parts if isinstance(p, ToolCallPart)]


def test_arguments_hash_alike_however_spaced_or_ordered() -> None:
    canonical = '{"a":[1,2],"b":"é"}'
    expected = hashlib.sha256(canonical.encode()).hexdigest()
    assert canonical_sha256('{"b": "é", "a": [1, 2]}') == expected
    assert canonical_sha256('{\n  "a": [1,2],\n  "b": "\\u00e9"\n}') == expected
    assert canonical_sha256('{"a": [2, 1], "b": "é"}') != expected
    assert canonical_sha256('{"a": ') == hashlib.sha256(b'{"a": ').hexdigest()


async def test_an_approve_an_edit_and_a_deny_are_audited_and_the_edit_is_what_the_model_sees(
    pool: asyncpg.Pool,
) -> None:
    chat_id = await _waiting_step(pool)
    store = ToolDecisionStore(pool)
    edit = '{"cmd": "ls -la"}'

    assert await store.record(
        chat_id, TURN, 0, [_deny("c3", "not on my disk"), _approve("c1"), _approve("c2", edit)], KEY
    )

    audit = await store.list(chat_id)
    assert [(d.tool_call_id, d.decision, d.edited) for d in audit] == [
        ("c1", "approve", False),
        ("c2", "approve", True),
        ("c3", "deny", False),
    ]
    assert [d.arguments_sha256 for d in audit] == [
        canonical_sha256(MODEL_ARGS["c1"]),
        canonical_sha256(edit),
        canonical_sha256(MODEL_ARGS["c3"]),
    ]
    assert {(d.key_id, d.owner, d.decided_by, d.turn_id, d.step) for d in audit} == {
        (KEY.key_id, "o", None, TURN, 0)
    }
    assert audit[2].message == "not on my disk" and audit[0].message is None
    assert len({d.decided_at for d in audit}) == 1

    c1, c2, c3 = await _calls(pool, chat_id)
    assert (c2.arguments, c2.original_arguments) == (edit, MODEL_ARGS["c2"])
    assert (c1.arguments, c1.original_arguments) == (MODEL_ARGS["c1"], None)
    assert (c3.arguments, c3.original_arguments) == (MODEL_ARGS["c3"], None)
    step = [m for m in await TranscriptStore(pool).for_model(chat_id) if m.role == "assistant"][-1]
    assert edit in [getattr(p, "arguments", None) for p in step.parts]
    assert step.response_id is None, "an edited step is no link of a response chain"
    event = await pool.fetchrow(
        "SELECT event, data FROM chat_events WHERE chat_id = $1 ORDER BY seq DESC LIMIT 1",
        chat_id,
    )
    assert event["event"] == "message", "clients are shown the arguments that ran"
    shown = [p for p in event["data"]["parts"] if p.get("id") == "c2"]
    assert shown[0]["arguments"] == edit


async def test_a_retried_or_competing_record_changes_nothing(pool: asyncpg.Pool) -> None:
    chat_id = await _waiting_step(pool)
    store = ToolDecisionStore(pool)
    first = [_approve("c1", '{"path": "b.txt"}'), _deny("c2")]
    assert await store.record(chat_id, TURN, 0, first, KEY)
    audit = await store.list(chat_id)

    assert not await store.record(chat_id, TURN, 0, first, KEY)
    other = Decider(decided_by="ops")
    assert not await store.record(
        chat_id, TURN, 0, [_approve("c1", '{"path": "c.txt"}', remember=True)], other
    )
    assert not await store.record(chat_id, TURN, 0, [_approve("c3"), _approve("c2")], other)

    assert await store.list(chat_id) == audit
    c1, _, _ = await _calls(pool, chat_id)
    assert (c1.arguments, c1.original_arguments) == ('{"path": "b.txt"}', MODEL_ARGS["c1"])
    chat = await ChatStore(pool).get(chat_id)
    assert chat is not None and chat.tool_policy == {"x": "ask"}


async def test_of_two_submissions_at_once_exactly_one_is_recorded(pool: asyncpg.Pool) -> None:
    chat_id = await _waiting_step(pool)
    store = ToolDecisionStore(pool)
    edits = [f'{{"path": "{n}.txt"}}' for n in range(8)]

    results = await asyncio.gather(
        *(
            store.record(chat_id, TURN, 0, [_approve("c1", e), _deny("c2")], Decider(owner=e))
            for e in edits
        )
    )

    assert sorted(results) == [False] * 7 + [True]
    winner = edits[results.index(True)]
    audit = await store.list(chat_id)
    assert [(d.tool_call_id, d.owner) for d in audit] == [("c1", winner), ("c2", winner)]
    c1, _, _ = await _calls(pool, chat_id)
    assert (c1.arguments, c1.original_arguments) == (winner, MODEL_ARGS["c1"])


async def test_a_remembered_approval_makes_its_tool_auto_and_a_remembered_deny_does_not(
    pool: asyncpg.Pool,
) -> None:
    chat_id = await _waiting_step(pool)
    store, log = ToolDecisionStore(pool), EventLog(pool)
    before = await log.last_seq(chat_id)

    decisions = [_approve("c1", remember=True), _approve("c2"), _deny("c3", remember=True)]
    assert await store.record(chat_id, TURN, 0, decisions, KEY)

    chat = await ChatStore(pool).get(chat_id)
    assert chat is not None and chat.tool_policy == {"x": "ask", "tool_c1": "auto"}
    events = (await log.read_page(chat_id, before)).events
    assert [(e.event, e.data) for e in events] == [
        ("chat", {"tool_policy": {"x": "ask", "tool_c1": "auto"}})
    ]
    assert [d.remember for d in await store.list(chat_id)] == [True, False, True]


async def test_the_audit_is_paged_in_decision_order(pool: asyncpg.Pool) -> None:
    chat_id = await _waiting_step(pool, step=0)
    await _step(pool, chat_id, 1)
    store = ToolDecisionStore(pool)
    assert await store.record(chat_id, TURN, 1, [_approve("c2"), _approve("c1")], KEY)
    assert await store.record(chat_id, TURN, 0, [_deny("c3"), _approve("c1")], KEY)

    first = await store.list(chat_id, limit=3)
    rest = await store.list(chat_id, offset=len(first), limit=3)

    assert [(d.step, d.tool_call_id) for d in first + rest] == [
        (1, "c1"),
        (1, "c2"),
        (0, "c1"),
        (0, "c3"),
    ]
    assert await store.list(chat_id, offset=len(first) + len(rest)) == []
    assert await store.list(uuid.uuid4()) == []


async def test_a_record_for_no_chat_or_with_a_call_twice_is_refused(pool: asyncpg.Pool) -> None:
    chat_id = await _waiting_step(pool)
    store = ToolDecisionStore(pool)
    assert not await store.record(uuid.uuid4(), TURN, 0, [_approve("c1")], KEY)
    with pytest.raises(ValueError, match="one decision"):
        await store.record(chat_id, TURN, 0, [_approve("c1"), _deny("c1")], KEY)
    assert await store.list(chat_id) == []
