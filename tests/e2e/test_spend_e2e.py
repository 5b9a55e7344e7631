"""Spend through the gateway: each step's cost recorded from the provider's usage, and
budgets (a turn's, a chat's, an owner's day, a parent's) that pause a runaway tool loop in
requires_action until a person raises the budget or ends the turn."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from harness import Cluster, Stack, StackFactory

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.prices import Prices, TokenPrice
from chatd.store.quotas import LimitOverrides, QuotaStore

WITHIN_S = 30.0
# Every test model (`m-…`) at $2 per million input tokens and $10 per million output; each
# scripted step reports 1,000 input and 100 output tokens: $0.003 a step. A step needs at
# least its estimated input and 256 output tokens (over $0.0026) left in the budget.
PRICES = Prices({"anthropic/m-": TokenPrice(input=2, output=10)})
STEP_USAGE = FakeUsage(input_tokens=1000, output_tokens=100)
STEP_USD = 0.003


@pytest.fixture
async def stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    async with make_stack(prices=PRICES) as running:
        yield running


def _tool_step(n: int) -> FakeResponse:
    call = FakeToolCall(name="write_file", arguments={"path": f"f{n}.txt", "content": "x"})
    return FakeResponse(parts=[FakeText(text=f"step {n}"), call], usage=STEP_USAGE)


DONE = FakeResponse(parts=[FakeText(text="Done.")], usage=STEP_USAGE)


def _looping(stack: Stack, tool_steps: int) -> dict[str, str]:
    """A model that writes a file at each of `tool_steps` steps, then says it is done."""
    return stack.stepped_model(*[_tool_step(n) for n in range(tool_steps)], DONE)


async def _chat(stack: Stack, chat_id: str) -> dict[str, Any]:
    response = await stack.http.get(f"/chats/{chat_id}")
    assert response.status_code == 200, response.text
    chat: dict[str, Any] = response.json()
    return chat


async def _paused(stack: Stack, chat_id: str, after: int = 0) -> tuple[dict[str, Any], int]:
    """The chat once its turn paused on a budget (after event `after`), and that event's id."""
    events = await stack.wait_status(chat_id, "requires_action", after=after, within_s=WITHIN_S)
    assert "pending_budget" in events[-1].data, "the status event names the budget"
    return await _chat(stack, chat_id), events[-1].id or 0


async def _steps(stack: Stack, chat_id: str) -> list[dict[str, Any]]:
    return [m for m in await stack.messages(chat_id) if m["role"] == "assistant"]


async def _decide(stack: Stack, chat_id: str, body: dict[str, Any]) -> None:
    response = await stack.http.post(f"/chats/{chat_id}/budget", json=body)
    assert response.status_code == 202, response.text


async def test_a_tool_loop_pauses_at_its_turn_budget_and_finishes_when_raised(
    stack: Stack,
) -> None:
    model = _looping(stack, 4)
    # The provider counts each step's input at 1,000 tokens: a step needs $0.002 for it and
    # $0.00256 for the least output, so after two steps ($0.006) the third can't be paid.
    stack.fake.script_token_count(model["name"], 1000)
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "write files", max_cost_usd=0.01)
    paused, _ = await _paused(stack, chat["id"])

    pending = paused["pending_budget"]
    assert pending["budget"] == "turn" and pending["limit_usd"] == 0.01
    assert pending["next_step_usd"] == pytest.approx(0.002 + 256 * 10 / 1e6)
    assert pending["spent_usd"] == pytest.approx(2 * STEP_USD)
    assert paused["pending_tool_calls"] is None
    counts = stack.fake.count_requests(model["name"])
    assert len(counts) == 3, "each step's input counted before it was sent, the paused one too"
    steps = await _steps(stack, chat["id"])
    assert len(steps) == 2, "stopped within a step of the limit"
    assert [s["cost_usd"] for s in steps] == pytest.approx([STEP_USD] * len(steps))
    assert not any(s["cost_estimated"] for s in steps)
    assert paused["cost_usd"] == pytest.approx(len(steps) * STEP_USD) == pending["spent_usd"]
    early = await stack.http.post(f"/chats/{chat['id']}/budget", json={})
    assert early.status_code == 400, "a raise or a stop, one of them"

    await _decide(stack, chat["id"], {"add_usd": 0.02})
    events = await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    assert events[-1].data["cost_usd"] == pytest.approx(5 * STEP_USD), "the turn's cost"
    ended = await _chat(stack, chat["id"])
    assert ended["pending_budget"] is None and ended["last_error"] is None
    steps = await _steps(stack, chat["id"])
    assert steps[-1]["parts"][0]["text"] == "Done."
    assert ended["cost_usd"] == pytest.approx(5 * STEP_USD)

    late = await stack.http.post(f"/chats/{chat['id']}/budget", json={"add_usd": 1})
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_paused_on_budget"
    audit = await stack.http.get(f"/chats/{chat['id']}/budget-decisions")
    assert audit.status_code == 200, audit.text
    decisions = audit.json()["data"]
    assert [(d["budget"], d["add_usd"], d["decision"]) for d in decisions] == [
        ("turn", 0.02, "raise")
    ]
    assert decisions[0]["key_id"] is not None, "who raised it is recorded"
    hidden = await stack.other_owner.get(f"/chats/{chat['id']}/budget-decisions")
    assert hidden.status_code == 404, "another owner's chat"


async def test_a_paused_turn_ended_keeps_its_work(stack: Stack) -> None:
    chat = await stack.create_chat(model=_looping(stack, 10), budget_usd=0.01)
    await stack.send(chat["id"], "write files")
    paused, _ = await _paused(stack, chat["id"])
    assert paused["pending_budget"]["budget"] == "chat"
    assert paused["pending_budget"]["holder"] == chat["id"]

    await _decide(stack, chat["id"], {"decision": "stop"})
    await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    ended = await _chat(stack, chat["id"])
    assert ended["last_error"] is None and ended["pending_budget"] is None
    steps = await _steps(stack, chat["id"])
    assert [s["parts"][0]["text"] for s in steps] == [f"step {n}" for n in range(len(steps))]
    assert ended["cost_usd"] == pytest.approx(len(steps) * STEP_USD)
    assert ended["cost_usd"] <= 0.01
    results = [m for m in await stack.messages(chat["id"]) if m["role"] == "tool"]
    assert len(results) == len(steps), "every step's calls have their results"

    # The chat's budget holds across turns: the next one pauses before its first step.
    _, last = await _paused(stack, chat["id"])
    await stack.send(chat["id"], "more")
    again, _ = await _paused(stack, chat["id"], after=last)
    assert again["pending_budget"]["spent_usd"] == pytest.approx(ended["cost_usd"])
    assert len(await _steps(stack, chat["id"])) == len(steps)


async def test_an_owners_daily_budget_spans_its_chats(stack: Stack) -> None:
    await QuotaStore(stack.pool).set_limits("alice", LimitOverrides(usd_per_day=0.005))
    first = await stack.create_chat(model=stack.stepped_model(DONE))
    await stack.send(first["id"], "hello")
    await stack.wait_status(first["id"], "waiting", within_s=WITHIN_S)

    second = await stack.create_chat(model=stack.stepped_model(DONE))
    await stack.send(second["id"], "hello")
    paused, _ = await _paused(stack, second["id"])
    pending = paused["pending_budget"]
    assert (pending["budget"], pending["holder"]) == ("owner_day", "alice")
    assert pending["spent_usd"] == pytest.approx(STEP_USD), "the first chat's step"

    await _decide(stack, second["id"], {"add_usd": 0.01})
    await stack.wait_status(second["id"], "waiting", within_s=WITHIN_S)
    limits = await QuotaStore(stack.pool).limits("alice")
    assert limits.usd_per_day == pytest.approx(0.015), "the raise is the owner's new limit"


async def test_a_subagents_spend_counts_toward_its_parents_turn_budget(stack: Stack) -> None:
    child_model = _looping(stack, 10)
    parent_model = stack.stepped_model(
        FakeResponse(
            parts=[
                FakeToolCall(name="spawn_agent", arguments={"prompt": "go", "model": child_model})
            ],
            usage=STEP_USAGE,
        ),
        FakeResponse(
            parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 120})],
            usage=STEP_USAGE,
        ),
        DONE,
    )
    parent = await stack.create_chat(model=parent_model, subagents=True)
    await stack.send(parent["id"], "delegate", max_cost_usd=0.01)
    children: list[dict[str, Any]] = []
    for _ in range(int(WITHIN_S / 0.2)):
        children = (await stack.http.get(f"/chats/{parent['id']}/children")).json()["data"]
        if children and children[0]["status"] == "requires_action":
            break
        await asyncio.sleep(0.2)
    (child,) = children
    paused = await _chat(stack, child["id"])
    pending = paused["pending_budget"]
    assert (pending["budget"], pending["holder"]) == ("turn", parent["id"])
    # The parent's steps and the child's, against the parent's turn's $0.01.
    child_steps = await _steps(stack, child["id"])
    parent_steps = await _steps(stack, parent["id"])
    assert child_steps, "the child spent some of it"
    spent = (len(child_steps) + len(parent_steps)) * STEP_USD
    assert pending["spent_usd"] == pytest.approx(spent)
    shown = await _chat(stack, parent["id"])
    assert shown["cost_usd"] == pytest.approx(spent), "a chat's cost has its children's"

    await _decide(stack, child["id"], {"decision": "stop"})
    paused_parent, _ = await _paused(stack, parent["id"])
    assert paused_parent["pending_budget"]["budget"] == "turn"
    await _decide(stack, parent["id"], {"add_usd": 0.01})
    await stack.wait_status(parent["id"], "waiting", within_s=WITHIN_S)


async def test_a_budget_on_a_model_without_a_price_is_refused_when_set(stack: Stack) -> None:
    unpriced = {"provider": "openai", "name": "no-such-model"}
    response = await stack.http.post("/chats", json={"model": unpriced, "budget_usd": 1})
    assert response.status_code == 400
    assert "budget_usd" in response.json()["error"]["message"]
    chat = await stack.create_chat(model=unpriced)
    sent = await stack.http.post(
        f"/chats/{chat['id']}/messages", json={"content": "hi", "max_cost_usd": 1}
    )
    assert sent.status_code == 400 and "max_cost_usd" in sent.json()["error"]["message"]
    patched = await stack.http.patch(f"/chats/{chat['id']}", json={"budget_usd": 1})
    assert patched.status_code == 400


async def test_v1_ends_incomplete_on_its_budget_and_a_higher_one_resumes_the_turn(
    stack: Stack,
) -> None:
    model = _looping(stack, 4)
    async with stack.responses_client() as client:
        first = await client.responses.create(
            model=f"anthropic/{model['name']}",
            input="write files",
            tools=[],
            extra_body={"chatd:max_cost_usd": 0.01, "chatd:tools": ["write_file"]},
        )
        assert first.status == "incomplete"
        assert first.incomplete_details is not None and first.incomplete_details.reason == "budget"
        cost = first.model_extra["chatd:cost"] if first.model_extra else None
        assert cost is not None and cost["estimated"] is False
        assert STEP_USD * 2 <= cost["usd"] + 1e-9 <= 0.01

        with pytest.raises(openai.BadRequestError, match="chatd:max_cost_usd"):
            await client.responses.create(
                model=f"anthropic/{model['name']}", previous_response_id=first.id, input=[]
            )

        second = await client.responses.create(
            model=f"anthropic/{model['name']}",
            previous_response_id=first.id,
            input=[],
            extra_body={"chatd:max_cost_usd": 0.05},
        )
        assert second.status == "completed"
        assert second.output_text.endswith("Done.")
        assert second.model_extra
        assert cost["usd"] + second.model_extra["chatd:cost"]["usd"] == pytest.approx(5 * STEP_USD)


@pytest.mark.slow
async def test_a_step_whose_worker_is_killed_mid_stream_is_counted_once_per_attempt(
    cluster: Cluster,
) -> None:
    """SIGKILL mid-stream: the lost attempt keeps its estimate (the provider billed a
    request), the retry its reported usage; neither is lost or counted twice."""
    stack = cluster.stack
    text = " ".join(f"word{i}" for i in range(60))
    slow = FakeResponse(
        parts=[FakeText(text=text, chunk_size=6)], delta_delay_s=0.1, usage=STEP_USAGE
    )
    model = stack.scripted_model(slow, FakeResponse(parts=[FakeText(text=text)], usage=STEP_USAGE))
    first = await cluster.polling_worker()
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "work")
    seen = await stack.events_until(chat["id"], lambda e: e.event == "message_part", within_s=60)
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    await stack.wait_status(chat["id"], "waiting", after=seen[-1].id or 0, within_s=60)

    rows = await stack.pool.fetch(
        "SELECT attempt, estimated, cost_usd, usage FROM step_spend WHERE chat_id = $1"
        " ORDER BY attempt",
        uuid.UUID(chat["id"]),
    )
    assert [(r["attempt"], r["estimated"]) for r in rows] == [("1.1", True), ("1.2", False)]
    lost, retried = rows
    assert lost["cost_usd"] > 0, "the killed attempt's input, estimated"
    assert retried["cost_usd"] == pytest.approx(STEP_USD), "the retry's reported usage"
    (step,) = await _steps(stack, chat["id"])
    assert step["cost_usd"] == pytest.approx(lost["cost_usd"] + STEP_USD)
    assert step["cost_estimated"] is True, "and it says part of it is an estimate"
    day = await stack.pool.fetchval("SELECT cost_usd FROM owner_daily_usage WHERE owner = 'alice'")
    assert day == pytest.approx(step["cost_usd"]), "the owner's day counts both, once each"


async def test_a_compactions_summary_costs_the_turn_too(stack: Stack) -> None:
    over = FakeUsage(input_tokens=700, output_tokens=100)  # 0.7 of the window: compact
    model = stack.scripted_model(
        FakeResponse(parts=[FakeToolCall(name="current_time")], usage=over),
        FakeResponse(parts=[FakeText(text="the summary")], usage=STEP_USAGE),
        FakeResponse(
            parts=[FakeText(text="Done.")], usage=FakeUsage(input_tokens=100, output_tokens=100)
        ),
    )
    chat = await stack.create_chat(model={**model, "context_limit": 1000})
    await stack.send(chat["id"], "hello")
    events = await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    rows = await stack.pool.fetch(
        "SELECT step_key, cost_usd FROM step_spend WHERE chat_id = $1", uuid.UUID(chat["id"])
    )
    summaries = [r for r in rows if ":summary:" in r["step_key"]]
    assert [r["cost_usd"] for r in summaries] == pytest.approx([STEP_USD])
    steps = (700 * 2 + 100 * 10 + 100 * 2 + 100 * 10) / 1e6
    assert events[-1].data["cost_usd"] == pytest.approx(steps + STEP_USD)


async def test_an_interrupt_ends_a_paused_turn_and_a_removed_budget_pauses_no_more(
    stack: Stack,
) -> None:
    chat = await stack.create_chat(model=_looping(stack, 3), budget_usd=0.001)
    await stack.send(chat["id"], "write files")
    paused, _ = await _paused(stack, chat["id"])
    assert paused["pending_budget"]["spent_usd"] == 0, "paused before the first step"
    stopped = await stack.http.post(f"/chats/{chat['id']}/interrupt")
    assert stopped.status_code == 202
    events = await stack.wait_status(chat["id"], "waiting", within_s=WITHIN_S)
    assert events[-1].data["cost_usd"] is None, "nothing was sent, nothing spent"
    assert await _steps(stack, chat["id"]) == []

    patched = await stack.http.patch(f"/chats/{chat['id']}", json={"budget_usd": None})
    assert patched.status_code == 200 and patched.json()["budget_usd"] is None
    await stack.send(chat["id"], "again")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0, within_s=WITHIN_S)
    assert (await _chat(stack, chat["id"]))["cost_usd"] == pytest.approx(4 * STEP_USD)
