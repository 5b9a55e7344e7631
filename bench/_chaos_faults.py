"""`chaos.py --faults`: does every turn still end, with nothing lost or stored twice, when the
provider fails, messages are poison and compactions fail, while workers are SIGKILLed?

Run from the repo root: `python bench/chaos.py --faults --turns 150 [--seed 1]`.

Each of N chats gets a plan (`_fault_script.Plan`): no fault; 1-2 retryable provider errors
(529, 500, 429 with retry-after, a mid-stream error, a dropped connection) that then clear;
a retryable error that never clears; a 400, 401 or mid-stream 400; a model that refuses
every request; a message the provider refuses; a compaction whose summary is refused, empty,
overloaded for good, or fine; a prompt over the fake's context window; a turn retrying a 529
whose workflow run is terminated (as an operator would) at its first `retry` event, which
the reconciler must end. Its one turn runs
(SSE client connected first) while the workers are killed as in the plain run, with
`CHATD_RETRY_DEADLINE_S` short (`--deadline`, 20 s) and the reconciler quick
(`--reconcile-interval`, `--reconcile-grace`).

Then kills stop and, faults still on, the run settles for 2 x deadline + grace + 2 x
interval; faults stop; each chat whose turn ended in `error` gets one more message, which
must end `waiting` with its answer. The targets (exit status 1 if one is missed): stuck
chats (still `running`/`requires_action` after the settle) 0, lost messages (a user message
accepted with 202 missing from the transcript) 0, duplicated messages (a message stored
twice: same role, text and tools) 0, unanswered follow-ups 0. The report also counts
turns by final status and `last_error.kind`, per plan, and lists turns that did not end as
their plan says; for a missed target it prints the chat's workflow history.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from _chaos_rig import Rig, killing
from _fault_script import MODELS, FaultScript, Plan, Shape, draw_plan, followup_answer
from _stack import SseListener, say
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from chatd.reconciler import STUCK_TURN_MESSAGE

__all__ = ["run", "worker_env"]

BUSY = ("running", "requires_action")
FOLLOWUP_WAIT_S = 90.0


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    """The workers' settings for a faults run."""
    return {
        "CHATD_RETRY_DEADLINE_S": str(args.deadline),
        "CHATD_RECONCILE_INTERVAL_SECONDS": str(args.reconcile_interval),
        "CHATD_RECONCILE_GRACE_SECONDS": str(args.reconcile_grace),
    }


@dataclass
class FaultTurn:
    """One chat: its plan, what its client saw and how it ended."""

    plan: Plan
    chat_id: str = ""
    accepted: list[str] = field(default_factory=list)
    """User messages the gateway answered 202."""
    events: Counter[str] = field(default_factory=Counter)
    status: str | None = None
    kind: str | None = None
    """`last_error.kind` after the settle."""
    reconciled: bool = False
    """The reconciler ended the turn (its workflow run was gone)."""
    took_s: float | None = None
    """Send -> the first turn's final status at the SSE client."""
    followup_status: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


async def run(args: argparse.Namespace, rng: random.Random, rig: Rig) -> bool:
    """The faults run on `rig`; whether every target was met."""
    turns = [FaultTurn(draw_plan(i, rng)) for i in range(args.turns)]
    script = FaultScript(rig.fake.book, [t.plan for t in turns])
    for model in MODELS:
        rig.fake.script(model, script)
    settle_s = 2 * args.deadline + args.reconcile_grace + 2 * args.reconcile_interval
    turn_wait_s = 3 * args.deadline + 60.0
    say(f"{args.turns} chats, {args.concurrency} at a time, deadline {args.deadline}s")
    started = time.perf_counter()
    client = await Client.connect(rig.temporal_address)
    async with rig.http(args.concurrency) as http:
        async with killing(rig.workers, rng, args.kill_every) as kills:
            first = functools.partial(_first_turn, http, client, within_s=turn_wait_s)
            await _each(turns, args.concurrency, first)
            wall = time.perf_counter() - started
            say(f"turns done in {wall:.0f}s; stopping kills")
        say(f"settling (up to {settle_s:.0f}s, faults still on)")
        settled_in = await _settle(http, turns, settle_s)
        script.stop()
        errored = [t for t in turns if t.status == "error"]
        say(f"faults off; a follow-up to each of {len(errored)} errored chats")
        await _each(errored, args.concurrency, lambda t: _followup(http, t))
        await _each(turns, 20, lambda t: _read_transcript(http, t))
    return await _report(turns, len(kills), wall, settled_in, settle_s, client)


async def _each(
    turns: list[FaultTurn], concurrency: int, work: Callable[[FaultTurn], Awaitable[None]]
) -> None:
    """`work` on every turn, `concurrency` at a time; a failure is the turn's `error`."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(turn: FaultTurn) -> None:
        nonlocal done
        async with gate:
            try:
                await work(turn)
            except Exception as err:  # reported per chat; the run goes on
                turn.error = f"{type(err).__name__}: {err}"
        done += 1
        if done % 25 == 0:
            say(f"  {done}/{len(turns)}")

    await asyncio.gather(*(one(t) for t in turns))


async def _first_turn(
    http: httpx.AsyncClient, client: Client, turn: FaultTurn, *, within_s: float
) -> None:
    response = await http.post("/chats", json=turn.plan.chat_body())
    response.raise_for_status()
    turn.chat_id = str(response.json()["id"])
    terminate: Callable[[], Awaitable[None]] | None = None
    if turn.plan.kind == "terminated":
        handle = client.get_workflow_handle(f"chat-{turn.chat_id}")
        terminate = functools.partial(handle.terminate, reason="chaos: terminated by an operator")
    sent_at = time.perf_counter()
    if await _send_and_wait(http, turn, turn.plan.content(), within_s, terminate) is not None:
        turn.took_s = time.perf_counter() - sent_at


async def _followup(http: httpx.AsyncClient, turn: FaultTurn) -> None:
    turn.followup_status = await _send_and_wait(http, turn, turn.plan.followup(), FOLLOWUP_WAIT_S)


async def _send_and_wait(
    http: httpx.AsyncClient,
    turn: FaultTurn,
    content: str,
    within_s: float,
    on_retry: Callable[[], Awaitable[None]] | None = None,
) -> str | None:
    """Send `content` with an SSE client listening; the status the turn ended with, if it
    did within `within_s`. `on_retry` runs at the turn's first `retry` event."""
    async with SseListener(http, turn.chat_id) as listener:
        sent = await http.post(f"/chats/{turn.chat_id}/messages", json={"content": content})
        if sent.status_code != 202:
            turn.error = f"send: {sent.status_code} {sent.text}"
            return None
        turn.accepted.append(content)
        try:
            async with asyncio.timeout(within_s):
                while True:
                    event = await listener.events.get()
                    turn.events[event.event] += 1
                    if event.event == "retry" and on_retry is not None:
                        await on_retry()
                        on_retry = None
                    if event.event == "status" and event.data["status"] in ("waiting", "error"):
                        return str(event.data["status"])
        except TimeoutError:
            return None


async def _settle(http: httpx.AsyncClient, turns: list[FaultTurn], within_s: float) -> float:
    """Poll the chats until none is busy or `within_s` passed; seconds it took."""
    started = time.perf_counter()
    created = [t for t in turns if t.chat_id]
    while True:
        await _each(created, 20, lambda t: _read_status(http, t))
        busy = [t for t in created if t.status in BUSY]
        elapsed = time.perf_counter() - started
        if not busy or elapsed >= within_s:
            say(f"settled in {elapsed:.0f}s: {len(busy)} chats still busy")
            return elapsed
        await asyncio.sleep(2.0)


async def _read_status(http: httpx.AsyncClient, turn: FaultTurn) -> None:
    response = await http.get(f"/chats/{turn.chat_id}")
    response.raise_for_status()
    chat = response.json()
    turn.status = chat["status"]
    error = chat.get("last_error") or {}
    turn.kind = error.get("kind")
    turn.reconciled = error.get("message") == STUCK_TURN_MESSAGE


async def _read_transcript(http: httpx.AsyncClient, turn: FaultTurn) -> None:
    if not turn.chat_id:
        return
    response = await http.get(f"/chats/{turn.chat_id}/messages", params={"limit": 500})
    response.raise_for_status()
    turn.messages = response.json()["messages"]


# --- checks ----------------------------------------------------------------------------------


def shape(message: dict[str, Any]) -> Shape:
    """A stored message as a plan spells it (a failed tool result shows as `error:`).

    Every message a chat's script makes has a shape of its own (texts carry the chat and
    step; one tool call per chat), so a repeated shape is a message stored twice, even by
    two attempts whose tool calls got different ids.
    """
    text = "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")
    tools: list[str] = []
    for part in message["parts"]:
        if part["type"] == "tool_call":
            tools.append(f"call:{part['name']}")
        elif part["type"] == "tool_result":
            tools.append(f"{'error' if part.get('is_error') else 'result'}:{part['name']}")
    return (message["role"], text, tuple(tools))


def lost(turn: FaultTurn) -> list[str]:
    """Accepted user messages that are not in the transcript."""
    users = {shape(m)[1] for m in turn.messages if m["role"] == "user"}
    return [content for content in turn.accepted if content not in users]


def duplicated(turn: FaultTurn) -> int:
    """Messages stored more than once (each extra copy counts)."""
    counts = Counter(shape(m) for m in turn.messages)
    return sum(n - 1 for n in counts.values() if n > 1)


def unanswered(turn: FaultTurn) -> bool:
    """An errored chat whose follow-up did not end `waiting` with its answer."""
    answers = {shape(m)[1] for m in turn.messages if m["role"] == "assistant"}
    return turn.followup_status != "waiting" or followup_answer(turn.plan.index) not in answers


def off_plan(turn: FaultTurn) -> str | None:
    """How the turn's end differs from its plan's, if it does."""
    status, kinds = turn.plan.ends()
    want = turn.plan.transcript()
    if turn.followup_status is not None:
        want += turn.plan.followup_transcript()
    got = [shape(m) for m in turn.messages]
    problems = []
    if turn.status != status or turn.kind not in kinds:
        planned = "|".join(sorted(map(str, kinds)))
        problems.append(f"ended {turn.status}/{turn.kind}, planned {status}/{planned}")
    if turn.plan.kind == "terminated" and not turn.reconciled:
        problems.append("not ended by the reconciler")
    if got != want:
        problems.append(f"transcript {[s[:2] for s in got]}")
    return "; ".join(problems) or None


# --- report ----------------------------------------------------------------------------------


def _counts(items: Iterable[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in Counter(items).most_common()) or "none"


def _ending(turn: FaultTurn) -> str:
    return f"{turn.status}/{turn.kind}" if turn.kind else str(turn.status)


async def _report(
    turns: list[FaultTurn],
    kills: int,
    wall_s: float,
    settled_in: float,
    settle_s: float,
    client: Client,
) -> bool:
    """Print the figures (and the histories behind a missed target); whether all were met."""
    stuck = [t for t in turns if t.status in BUSY]
    unsent = [t for t in turns if not t.accepted]
    lost_turns = [t for t in turns if lost(t)]
    dup_turns = [t for t in turns if duplicated(t)]
    errored = [t for t in turns if t.followup_status is not None or t.status == "error"]
    silent = [t for t in errored if unanswered(t)]
    strays = [(t, why) for t in turns if (why := off_plan(t))]
    print()
    print(f"chats              {len(turns)} in {wall_s:.1f}s, {kills} kills")
    print(f"final status       {_counts(str(t.status) for t in turns)}")
    print(f"last_error.kind    {_counts(str(t.kind) for t in turns if t.status == 'error')}")
    print(f"events seen        {_counts(e for t in turns for e in t.events.elements())}")
    for status in ("waiting", "error"):
        took = sorted(t.took_s for t in turns if t.status == status and t.took_s is not None)
        if took:
            print(f"turn time ({status:7s}) p50 {statistics.median(took):5.1f}s  "
                  f"max {took[-1]:5.1f}s  (send -> final status, n={len(took)})")  # fmt: skip
    print("by plan:")
    for kind in dict.fromkeys(t.plan.kind for t in turns):
        mine = [t for t in turns if t.plan.kind == kind]
        print(f"  {kind:15s} {len(mine):3d}: {_counts(_ending(t) for t in mine)}")
    print(f"ended by reconciler {sum(t.reconciled for t in turns)}")
    print(f"stuck chats        {len(stuck)}  (busy {settled_in:.0f}s after the last turn; "
          f"settle limit {settle_s:.0f}s)  target 0")  # fmt: skip
    print(f"lost messages      {sum(len(lost(t)) for t in turns)}  target 0")
    print(f"duplicated         {sum(duplicated(t) for t in turns)}  target 0")
    print(f"follow-ups         {len(errored)} sent, {len(silent)} not answered  target 0")
    print(f"not sent           {len(unsent)}  (the run could not send them) target 0")
    print(f"not as planned     {len(strays)} (not a target: see below)")
    for turn, why in strays[:15]:
        print(f"  chat {turn.plan.index} [{turn.plan.label}] {turn.chat_id}: {why}")
    for turn in unsent[:5]:
        print(f"  chat {turn.plan.index} was never sent: {turn.error}")
    failed = [*unsent, *stuck, *lost_turns, *dup_turns, *silent]
    for turn in list({t.plan.index: t for t in failed}.values())[:5]:
        await _print_history(client, turn)
    passed = not failed
    print(f"\n{'PASS' if passed else 'FAIL'}")
    return passed


async def _print_history(client: Client, turn: FaultTurn) -> None:
    """The chat, its transcript and its workflow's latest run, event by event."""
    print(f"\nchat {turn.plan.index} [{turn.plan.label}] {turn.chat_id}: status {turn.status}, "
          f"follow-up {turn.followup_status}, lost {lost(turn)}, error {turn.error}")  # fmt: skip
    for message in turn.messages:
        print(f"    {shape(message)}")
    if not turn.chat_id:
        return
    handle = client.get_workflow_handle(f"chat-{turn.chat_id}")
    description = await handle.describe()
    print(f"  workflow {description.id} run {description.run_id}: {description.status}")
    names: dict[int, str] = {}
    async for event in handle.fetch_history_events():
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        line = f"    {event.event_id:4d} {kind}"
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            names[event.event_id] = scheduled.activity_type.name
            line += f" {names[event.event_id]}"
        for attrs in (
            event.activity_task_failed_event_attributes,
            event.activity_task_timed_out_event_attributes,
        ):
            if attrs.HasField("failure"):
                line += f" {names.get(attrs.scheduled_event_id, '?')}: {attrs.failure.message}"
        print(line[:300])
