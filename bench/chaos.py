"""Do turns survive workers being SIGKILLed at random? Run from the repo root:

    python bench/chaos.py [--turns 200] [--concurrency 10] [--seed 1] [--kill-every 3-8]
    python bench/chaos.py --faults [--deadline 20] ...   # and provider faults: _chaos_faults.py

N turns run through the in-process gateway, `--concurrency` at a time, on TWO `chatd worker`
processes, while a chaos loop SIGKILLs one of them every 3-8 s (at random) and starts it
again at once. Each turn: step 1 = a short text and a `current_time` call, step 2 = ~30
text deltas 20 ms apart. An SSE client, connected before the message is sent, timestamps
every event of its chat.

At the end every turn must be `waiting` and every transcript must equal the scripted
conversation (roles, texts, tool calls and results once). The report gives lost and
duplicate messages (both must be 0) and the recovery time of each turn that was streaming
on a killed worker: kill -> first delta of the retried attempt at the SSE client (the
attempt announces itself with a `reset` event), and kill -> that reset. Exit status 1 if
anything was lost or duplicated, a turn did not finish, or the mid-stream recovery p50 is over
`--max-recovery` (5 s; not with `--ignore-speed-targets`, for a smoke run on a busy machine).

`--faults` runs the same kills with provider errors, poison messages and failing
compactions besides; see `_chaos_faults.py` for what it injects and checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import _chaos_faults
import httpx
from _chaos_rig import Kill, Rig, chaos_rig, killing
from _fault_script import Shape
from _stack import SseEvent, SseListener, percentile, say
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from activities.compaction import TITLE_INSTRUCTIONS
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall

MODEL = "chaos-model"
INTRO = "Let me check the time."
ANSWER = "".join(f"w{i:04d} " for i in range(30))
"""30 deltas of 6 characters."""
DELTA_DELAY_S = 0.02
TURN_TIMEOUT_S = 300.0
STALL_S = 8.0
"""A gap between two events of a turn this long is reported (a retry or a sticky timeout)."""


def respond(request: FakeRequest) -> FakeResponse:
    """The fake model: titles get a title; step 1 calls a tool, step 2 streams the answer."""
    if TITLE_INSTRUCTIONS in json.dumps(request.body.get("system", "")):
        return FakeResponse.of_text("Chaos turn")
    step = sum(1 for m in request.body.get("messages", []) if m.get("role") == "assistant")
    if step == 0:
        return FakeResponse(parts=[FakeText(text=INTRO), FakeToolCall(name="current_time")])
    return FakeResponse(parts=[FakeText(text=ANSWER, chunk_size=6)], delta_delay_s=DELTA_DELAY_S)


def expected(index: int) -> list[Shape]:
    """The transcript of turn `index`, as signatures."""
    return [
        ("user", _content(index), ()),
        ("assistant", INTRO, ("call:current_time",)),
        ("tool", "", ("result:current_time",)),
        ("assistant", ANSWER, ()),
    ]


def _content(index: int) -> str:
    return f"turn {index}: what time is it?"


# --- turns -----------------------------------------------------------------------------------


@dataclass
class Turn:
    """One turn and what its SSE client saw."""

    index: int
    chat_id: str = ""
    events: list[SseEvent] = field(default_factory=list)
    sent_at: float = 0.0
    status: str | None = None
    transcript: list[Shape] = field(default_factory=list)
    error: str | None = None

    @property
    def duration(self) -> float:
        """Send -> final status (seconds)."""
        return self.events[-1].at - self.sent_at if self.events else float("nan")

    @property
    def exact(self) -> bool:
        """Finished, and the transcript is the script."""
        return self.status == "waiting" and self.transcript == expected(self.index)


async def run_turn(http: httpx.AsyncClient, turn: Turn) -> None:
    """Create a chat, listen, send the message, read events until the turn ends."""
    response = await http.post("/chats", json={"model": {"provider": "anthropic", "name": MODEL}})
    response.raise_for_status()
    turn.chat_id = str(response.json()["id"])
    async with SseListener(http, turn.chat_id) as listener:
        turn.sent_at = time.perf_counter()
        sent = await http.post(
            f"/chats/{turn.chat_id}/messages", json={"content": _content(turn.index)}
        )
        if sent.status_code != 202:
            turn.error = f"send: {sent.status_code} {sent.text}"
            return
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                while turn.status is None:
                    event = await listener.events.get()
                    turn.events.append(event)
                    if event.event == "status" and event.data["status"] in ("waiting", "error"):
                        turn.status = event.data["status"]
        except TimeoutError:
            turn.error = f"no final status within {TURN_TIMEOUT_S:.0f}s"
    messages = await http.get(f"/chats/{turn.chat_id}/messages", params={"limit": 500})
    messages.raise_for_status()
    turn.transcript = [_chaos_faults.shape(m) for m in messages.json()["messages"]]


# --- analysis --------------------------------------------------------------------------------


@dataclass
class Recovery:
    """A retried model step: which kill broke it, and when the new attempt's first delta came."""

    turn: int
    kill_at: float | None
    mid_stream: bool
    """Deltas of the broken attempt had reached the client before the kill."""
    seconds: float | None
    """Kill -> first delta after the reset (None if no kill explains the reset)."""
    reset_seconds: float | None = None
    """Kill -> the reset: the retried attempt has begun (detection, retry interval, dispatch
    and its reads); the rest of `seconds` is the model's first token and its publishing."""


def _is_delta(event: SseEvent) -> bool:
    return event.event == "message_part" and event.data.get("role") == "assistant"


def recoveries(turn: Turn, kills: list[Kill]) -> list[Recovery]:
    """One entry per `reset` the turn's client saw."""
    found: list[Recovery] = []
    events = turn.events
    for k, reset in enumerate(events):
        if reset.event != "reset":
            continue
        step_start = max((j for j in range(k) if events[j].event == "message"), default=-1)
        broken = [e for e in events[step_start + 1 : k] if _is_delta(e)]
        resumed = next((e for e in events[k + 1 :] if _is_delta(e)), None)
        # The kill that broke a stream came after its last delta was published (the client
        # may see that delta a few ms after the kill): the first kill from then on.
        since = broken[-1].at - 0.5 if broken else turn.sent_at
        candidates = [x.at for x in kills if since <= x.at <= reset.at]
        kill_at = min(candidates) if candidates else None
        seconds = resumed.at - kill_at if resumed is not None and kill_at is not None else None
        began = reset.at - kill_at if kill_at is not None else None
        found.append(Recovery(turn.index, kill_at, bool(broken and candidates), seconds, began))
    return found


def stalls(turn: Turn) -> list[tuple[float, str, str]]:
    """Silences of `STALL_S` or more in the turn: (seconds, event before, event after)."""
    found: list[tuple[float, str, str]] = []
    last, before = turn.sent_at, "send"
    for event in turn.events:
        if event.at - last >= STALL_S:
            found.append((event.at - last, before, event.event))
        last, before = event.at, event.event
    return found


async def history_findings(
    client: Client, turns: list[Turn], retried_at: list[float]
) -> dict[int, Counter[str]]:
    """Per turn: workflow task timeouts and activity retries, read from its run's history;
    adds to `retried_at` when each retried model step's last attempt started (`time.time()`)."""
    findings: dict[int, Counter[str]] = {}
    for turn in turns:
        if not turn.chat_id:
            continue
        history = await client.get_workflow_handle(f"chat-{turn.chat_id}").fetch_history()
        found: Counter[str] = Counter()
        activity_types: dict[int, str] = {}
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                kind = event.workflow_task_timed_out_event_attributes.timeout_type
                found[f"workflow task {TimeoutType.Name(kind)[13:].lower()}"] += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                activity_types[event.event_id] = attrs.activity_type.name
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                if started.attempt > 1:
                    name = activity_types.get(started.scheduled_event_id, "?")
                    found[f"{name} retries"] += started.attempt - 1
                    if name == "stream_model_step":
                        retried_at.append(event.event_time.ToNanoseconds() / 1e9)
        findings[turn.index] = found
    return findings


def _since_kill(times: list[float], kills: list[Kill]) -> list[float]:
    """Seconds from the last kill before each of `times` (wall clock)."""
    found: list[float] = []
    for at in times:
        before = [k.wall for k in kills if k.wall <= at]
        if before:
            found.append(at - max(before))
    return found


def _stats(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"p50 {statistics.median(values):5.2f}s  p90 {percentile(values, 90):5.2f}s  "
        f"max {max(values):5.2f}s  (min {min(values):.2f}s, n={len(values)})"
    )


def report(
    turns: list[Turn],
    kills: list[Kill],
    wall_s: float,
    history: dict[int, Counter[str]],
    max_recovery_s: float,
    retried_at: list[float],
) -> bool:
    """Print the figures; whether the run passed."""
    lost = duplicated = 0
    for turn in turns:
        want, got = Counter(expected(turn.index)), Counter(turn.transcript)
        lost += sum((want - got).values())
        duplicated += sum((got - want).values())
    unfinished = [t for t in turns if t.status != "waiting"]
    inexact = [t for t in turns if not t.exact]
    found = [r for t in turns for r in recoveries(t, kills)]
    mid = [r.seconds for r in found if r.mid_stream and r.seconds is not None]
    mid_reset = [r.reset_seconds for r in found if r.mid_stream and r.reset_seconds is not None]
    other = [r.seconds for r in found if not r.mid_stream and r.seconds is not None]
    unexplained = [r for r in found if r.kill_at is None]
    stalled = {t.index: stalls(t) for t in turns if stalls(t)}
    in_history = sum((history.values()), Counter[str]())
    durations = [t.duration for t in turns if t.status == "waiting"]

    print()
    print(f"turns              {len(turns)} in {wall_s:.1f}s ({len(turns) / wall_s:.1f}/s)")
    print(f"kills              {len(kills)} (SIGKILL, restart -> polling: "
          f"{_stats([k.restarted_in for k in kills])})")  # fmt: skip
    print(f"finished (waiting) {len(turns) - len(unfinished)}/{len(turns)}")
    print(f"exact transcripts  {len(turns) - len(inexact)}/{len(turns)}")
    print(f"lost messages      {lost}")
    print(f"duplicate messages {duplicated}")
    print(f"resets seen        {len(found)} ({len(unexplained)} without a kill to blame)")
    print(f"recovery mid-stream (kill -> first delta of the retried attempt): {_stats(mid)}")
    print(f"  of which kill -> its reset (the retried attempt began):         {_stats(mid_reset)}")
    print(f"  kill -> the retried attempt started (Temporal's record, every retried step): "
          f"{_stats(_since_kill(retried_at, kills))}")  # fmt: skip
    print(f"recovery before the first delta:                                 {_stats(other)}")
    print(f"turn duration      {_stats(durations)}")
    print(f"temporal history   {dict(sorted(in_history.items())) or 'no timeouts or retries'}")
    print(f"stalls >= {STALL_S:.0f}s      {len(stalled)} turns")
    for index, gaps in list(stalled.items())[:12]:
        where = ", ".join(f"{s:.1f}s {a} -> {b}" for s, a, b in gaps)
        print(f"  turn {index:3d}: {where}; history {dict(history.get(index, {}))}")
    for turn in inexact[:10]:
        print(f"  turn {turn.index} ({turn.chat_id}): status {turn.status}, error {turn.error}")
        for message in turn.transcript:
            print(f"    {message}")
    passed = not unfinished and not lost and not duplicated and not inexact
    if mid and statistics.median(mid) > max_recovery_s:
        print(f"recovery p50 over {max_recovery_s:g}s")
        passed = False
    print(f"\n{'PASS' if passed else 'FAIL'}")
    return passed


# --- main ------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> bool:
    """Run the benchmark (the plain run, or `--faults`); whether it passed."""
    rng = random.Random(args.seed)
    if args.faults:
        os.environ["CHATD_RETRY_DEADLINE_S"] = str(args.deadline)  # the in-process gateway's
        async with chaos_rig(_chaos_faults.worker_env(args)) as rig:
            return await _chaos_faults.run(args, rng, rig)
    async with chaos_rig() as rig:
        rig.fake.script(MODEL, respond)
        return await _run(args, rng, rig)


async def _run(args: argparse.Namespace, rng: random.Random, rig: Rig) -> bool:
    say(f"{args.turns} turns, {args.concurrency} at a time")
    turns = [Turn(i) for i in range(args.turns)]
    gate = asyncio.Semaphore(args.concurrency)
    done = 0
    started = time.perf_counter()
    async with (
        rig.http(args.concurrency) as http,
        killing(rig.workers, rng, args.kill_every) as kills,
    ):

        async def one(turn: Turn) -> None:
            nonlocal done
            async with gate:
                try:
                    await run_turn(http, turn)
                except Exception as err:  # reported per turn; the run goes on
                    turn.error = f"{type(err).__name__}: {err}"
            done += 1
            if done % 20 == 0 or done == len(turns):
                resets = sum(1 for t in turns for e in t.events if e.event == "reset")
                say(f"{done}/{len(turns)} turns done, {len(kills)} kills, {resets} resets")

        await asyncio.gather(*(one(t) for t in turns))
        wall = time.perf_counter() - started
    client = await Client.connect(rig.temporal_address)
    retried_at: list[float] = []
    history = await history_findings(client, turns, retried_at)
    max_recovery = math.inf if args.ignore_speed_targets else args.max_recovery
    return report(turns, kills, wall, history, max_recovery, retried_at)


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low), float(high or low)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None, help="random seed (kill timing)")
    parser.add_argument(
        "--kill-every", type=_range, default=(3.0, 8.0), help="seconds between kills, e.g. 3-8"
    )
    parser.add_argument(
        "--max-recovery",
        type=float,
        default=5.0,
        help="fail if the mid-stream recovery p50 is over this many seconds",
    )
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="report the recovery times without failing on --max-recovery (a smoke run on a "
        "busy machine)",
    )
    parser.add_argument(
        "--faults", action="store_true", help="inject provider and compaction faults too"
    )
    parser.add_argument(
        "--deadline", type=int, default=20, help="--faults: CHATD_RETRY_DEADLINE_S (seconds)"
    )
    parser.add_argument(
        "--reconcile-grace", type=float, default=15.0, help="--faults: reconciler grace (s)"
    )
    parser.add_argument(
        "--reconcile-interval", type=float, default=5.0, help="--faults: reconciler sweeps (s)"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(0 if asyncio.run(main(parse_args())) else 1)
