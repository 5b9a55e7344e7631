"""Usage reports: `GET /usage` sums the key owner's model-step attempts per day, model or
chat, from turns the fake provider answered at known prices; `chatd usage` does the same
for an operator, for every owner."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from harness import Stack, StackFactory, sse_events

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.prices import Prices, TokenPrice

WITHIN_S = 30.0
# Every test model (`anthropic/m-…`) at $2 per million input tokens, $10 per million output,
# $0.2 per million read from the cache and $2.5 per million written to it; `openai/m-…` has
# no price.
PRICES = Prices({"anthropic/m-": TokenPrice(input=2, output=10, cache_read=0.2, cache_write=2.5)})
STEP_USAGE = FakeUsage(input_tokens=1000, output_tokens=100)
STEP_USD = (1000 * 2 + 100 * 10) / 1e6
CACHED_USAGE = FakeUsage(
    input_tokens=2000, output_tokens=50, cache_read_tokens=500, cache_write_tokens=100
)
CACHED_USD = (2000 * 2 + 50 * 10 + 500 * 0.2 + 100 * 2.5) / 1e6
DONE = FakeResponse(parts=[FakeText(text="Done.")], usage=STEP_USAGE)
ZERO = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "reasoning_tokens": 0,
    "cost_usd": 0.0,
    "estimated_usd": 0.0,
    "unpriced_steps": 0,
    "steps": 0,
}


@pytest.fixture
async def stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    async with make_stack(prices=PRICES) as running:
        yield running


def _figures(steps: int, usage: FakeUsage, usd: float | None, **more: Any) -> dict[str, Any]:
    """What `steps` attempts of `usage` add to a report (`usd` each; None: no price)."""
    return {
        **ZERO,
        "input_tokens": steps * usage.input_tokens,
        "output_tokens": steps * (usage.output_tokens or 0),
        "cache_read_tokens": steps * usage.cache_read_tokens,
        "cache_write_tokens": steps * usage.cache_write_tokens,
        "cost_usd": steps * (usd or 0.0),
        "unpriced_steps": steps if usd is None else 0,
        "steps": steps,
        **more,
    }


def _sum(*figures: dict[str, Any]) -> dict[str, Any]:
    return {name: sum(f[name] for f in figures) for name in ZERO}


def _approx(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures, costs compared as floats (sums of doubles) and tokens exactly."""
    return {
        name: pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value
        for name, value in figures.items()
    }


async def _turn(client: httpx.AsyncClient, model: dict[str, str]) -> str:
    """A chat of `client`'s owner, its one turn done; its id."""
    created = await client.post("/chats", json={"model": model})
    assert created.status_code == 201, created.text
    chat_id: str = created.json()["id"]
    sent = await client.post(f"/chats/{chat_id}/messages", json={"content": "go"})
    assert sent.status_code == 202, sent.text

    async def done() -> None:
        async for event in sse_events(client, chat_id):
            if event.event == "status" and event.data["status"] == "waiting":
                return

    await asyncio.wait_for(done(), WITHIN_S)
    return chat_id


def _tool_step(n: int) -> FakeResponse:
    call = FakeToolCall(name="write_file", arguments={"path": f"f{n}.txt", "content": "x"})
    return FakeResponse(parts=[FakeText(text=f"step {n}"), call], usage=STEP_USAGE)


@dataclass
class Spent:
    """Alice's chats: `today` three steps at STEP_USD; `unpriced` one step today on a model
    with no price; `days_ago_3` one step at CACHED_USD, an estimate; `days_ago_40` one step
    at STEP_USD. Bob's `bobs` one step today at CACHED_USD."""

    today: str
    unpriced: str
    days_ago_3: str
    days_ago_40: str
    bobs: str
    models: dict[str, str]
    """Chat id -> its model, `provider/name`."""
    day: date


async def _spend(stack: Stack) -> Spent:
    looping = stack.stepped_model(_tool_step(0), _tool_step(1), DONE)
    unpriced = {**stack.stepped_model(DONE), "provider": "openai"}
    cached = stack.stepped_model(FakeResponse(parts=[FakeText(text="ok")], usage=CACHED_USAGE))
    plain = stack.stepped_model(DONE)
    bobs = stack.stepped_model(FakeResponse(parts=[FakeText(text="ok")], usage=CACHED_USAGE))
    models = [looping, unpriced, cached, plain]
    chats = await asyncio.gather(
        *(_turn(stack.http, model) for model in models), _turn(stack.other_owner, bobs)
    )
    spent = Spent(
        *chats,
        models={
            chat: f"{model['provider']}/{model['name']}"
            for chat, model in zip(chats, [*models, bobs], strict=True)
        },
        day=datetime.now(UTC).date(),
    )
    attempts = await stack.pool.fetch(
        "SELECT chat_id::text, count(*) AS n, bool_or(estimated) AS estimated"
        " FROM step_spend GROUP BY chat_id"
    )
    assert {(r["chat_id"], r["n"], r["estimated"]) for r in attempts} == {
        (spent.today, 3, False),
        (spent.unpriced, 1, False),
        (spent.days_ago_3, 1, False),
        (spent.days_ago_40, 1, False),
        (spent.bobs, 1, False),
    }, "one settled attempt per step"
    # Spend of earlier days, one of them an attempt lost with its worker (an estimate).
    move = "UPDATE step_spend SET created_at = created_at - $2::interval, estimated = $3"
    await stack.pool.execute(
        f"{move} WHERE chat_id = $1", uuid.UUID(spent.days_ago_3), timedelta(days=3), True
    )
    await stack.pool.execute(
        f"{move} WHERE chat_id = $1", uuid.UUID(spent.days_ago_40), timedelta(days=40), False
    )
    return spent


async def _report(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await client.get("/usage", params=params)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def _keyed(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(row.pop("key"), row) for row in report["data"]]


async def test_a_report_sums_the_owners_steps_per_day_model_and_chat(stack: Stack) -> None:
    spent = await _spend(stack)
    today = _figures(3, STEP_USAGE, STEP_USD)
    unpriced = _figures(1, STEP_USAGE, None)
    days_ago_3 = _figures(1, CACHED_USAGE, CACHED_USD, estimated_usd=CACHED_USD)
    days_ago_40 = _figures(1, STEP_USAGE, STEP_USD)

    by_day = await _report(stack.http)
    first = spent.day - timedelta(days=29)
    assert (by_day["object"], by_day["group_by"]) == ("list", "day")
    assert (by_day["from"], by_day["to"]) == (first.isoformat(), spent.day.isoformat())
    assert _keyed(by_day) == [
        ((spent.day - timedelta(days=3)).isoformat(), _approx(days_ago_3)),
        (spent.day.isoformat(), _approx(_sum(today, unpriced))),
    ], "the last 30 days, in order; day 40 and bob's spend left out"
    assert by_day["total"] == _approx(_sum(today, unpriced, days_ago_3))
    assert by_day["total"]["cost_usd"] == pytest.approx(3 * STEP_USD + CACHED_USD)

    by_model = await _report(stack.http, group_by="model")
    assert _keyed(by_model) == [
        (spent.models[spent.today], _approx(today)),
        (spent.models[spent.days_ago_3], _approx(days_ago_3)),
        (spent.models[spent.unpriced], _approx(unpriced)),
    ], "the costliest first"
    assert by_model["total"] == by_day["total"]

    wide = {"from": (spent.day - timedelta(days=365)).isoformat(), "to": spent.day.isoformat()}
    by_chat = await _report(stack.http, group_by="chat", **wide)
    assert _keyed(by_chat) == [
        (spent.today, _approx(today)),
        (spent.days_ago_3, _approx(days_ago_3)),
        (spent.days_ago_40, _approx(days_ago_40)),
        (spent.unpriced, _approx(unpriced)),
    ], "366 days, today's included: every chat of alice's"
    assert by_chat["total"] == _approx(_sum(today, unpriced, days_ago_3, days_ago_40))

    day_40 = (spent.day - timedelta(days=40)).isoformat()
    one_day = await _report(stack.http, group_by="chat", **{"from": day_40, "to": day_40})
    assert _keyed(one_day) == [(spent.days_ago_40, _approx(days_ago_40))]
    empty = await _report(stack.http, **{"from": "2020-01-01", "to": "2020-01-31"})
    assert (empty["data"], empty["total"]) == ([], ZERO)

    bobs = await _report(stack.other_owner, group_by="chat", **wide)
    assert _keyed(bobs) == [(spent.bobs, _approx(_figures(1, CACHED_USAGE, CACHED_USD)))]
    assert bobs["total"]["steps"] == 1, "bob sees his spend alone, as alice does hers"


async def test_a_bad_report_request_is_a_400_naming_its_parameter(stack: Stack) -> None:
    today = datetime.now(UTC).date()
    yesterday = (today - timedelta(days=1)).isoformat()
    year_ago = (today - timedelta(days=366)).isoformat()
    bad = [
        ({"group_by": "week"}, "group_by"),
        ({"group_by": "owner"}, "group_by"),  # an operator's grouping, not an owner's
        ({"from": "2026-13-01"}, "from"),
        ({"from": "20261101"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": today.isoformat(), "to": yesterday}, "from"),
        ({"from": year_ago, "to": today.isoformat()}, "to"),  # 367 days
    ]
    for params, param in bad:
        response = await stack.http.get("/usage", params=params)
        assert response.status_code == 400, (params, response.text)
        error = response.json()["error"]
        assert (error["code"], error["detail"]) == ("invalid_request", {"param": param}), params
    unauthenticated = await stack.http.get("/usage", headers={"Authorization": "Bearer nope"})
    assert unauthenticated.status_code == 401


def _chatd_usage(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatd.cli", "usage", *args],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
    )


async def test_the_usage_command_reports_every_owner_as_a_table_or_csv(
    stack: Stack, database_url: str
) -> None:
    alices = await _turn(stack.http, stack.stepped_model(DONE))
    await _turn(stack.http, {**stack.stepped_model(DONE), "provider": "openai"})
    await _turn(stack.other_owner, stack.stepped_model(DONE))

    done = await asyncio.to_thread(_chatd_usage, database_url, "--group-by", "owner")
    assert done.returncode == 0, done.stderr
    header, *rows = [line.split() for line in done.stdout.splitlines()]
    assert header == [
        "owner",
        "input",
        "output",
        "cache_read",
        "cache_write",
        "reasoning",
        "cost_usd",
        "estimated_usd",
        "unpriced_steps",
        "steps",
    ]
    priced = f"{STEP_USD:.6f}"
    assert rows == [
        ["alice", "2000", "200", "0", "0", "0", priced, "0.000000", "1", "2"],
        ["bob", "1000", "100", "0", "0", "0", priced, "0.000000", "0", "1"],
        ["total", "3000", "300", "0", "0", "0", f"{2 * STEP_USD:.6f}", "0.000000", "1", "3"],
    ], "priced alike, the owner with more steps first"

    args = ("--owner", "alice", "--group-by", "chat", "--csv")
    before = ("--from", "2000-01-01", "--to", "2000-12-31")
    done = await asyncio.to_thread(_chatd_usage, database_url, *args, *before)
    assert done.stdout.splitlines() == [
        "chat,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,reasoning_tokens,"
        "cost_usd,estimated_usd,unpriced_steps,steps"
    ], "a period before the turns: the header alone"
    done = await asyncio.to_thread(_chatd_usage, database_url, *args)
    assert done.returncode == 0, done.stderr
    first, second = csv.DictReader(io.StringIO(done.stdout))
    assert first["chat"] == alices, "the priced chat first"
    assert (first["input_tokens"], first["output_tokens"], first["steps"]) == ("1000", "100", "1")
    assert float(first["cost_usd"]) == pytest.approx(STEP_USD)
    assert (float(second["cost_usd"]), second["unpriced_steps"]) == (0.0, "1")

    bad_day = await asyncio.to_thread(_chatd_usage, database_url, "--from", "2026-02-30")
    assert bad_day.returncode == 2 and "YYYY-MM-DD" in bad_day.stderr
    backwards = ("--from", "2026-02-02", "--to", "2026-02-01")
    refused = await asyncio.to_thread(_chatd_usage, database_url, *backwards)
    assert refused.returncode == 1 and "is after" in refused.stderr
