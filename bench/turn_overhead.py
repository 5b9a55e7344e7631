"""How much does a chat turn cost on top of Temporal and the model? Run from the repo root:

    python bench/turn_overhead.py [--turns 50] [--warmup 5] [--durable | --both] [--runs 1]
        [--dynamic-config KEY=JSON ...] [--worker-option KEY=JSON ...] [--gc-freeze]
        [--one-chat] [--untitled] [--sqlite-pragma KEY=VALUE ...]
    python bench/turn_overhead.py --external [--turns 50] [--warmup 5] [--runs 5]

N sequential one-step turns go through the gateway (POST /chats/{id}/messages) while an SSE
client, connected beforehand, timestamps what arrives; the fake provider answers a short text
at once. Each turn is the first of a new (titled) chat, so every turn has the same transcript
size; `--one-chat` sends them all to one chat instead. Interleaved with the turns, in the
same run and on the same servers, two floors:
(a) the same provider adapter streaming directly from the fake server, in-process;
(b) a workflow with one no-op activity (start -> result) on a worker with the turn worker's
settings. Then Temporal history bytes per model step, for chats of 10 and 200 messages.

`--dynamic-config` is merged over chatd's dev-server defaults (e.g.
`history.transferProcessorMaxPollRPS=20` restores the server default), `--worker-option`
overrides a Worker constructor option (e.g. `max_concurrent_workflow_task_polls=10`),
`--gc-freeze` calls `gc.freeze()` after the warm-up (the p99 is otherwise a gen-2 GC pause).

`--durable` runs the servers as `chatd dev` does: Temporal persisted to a SQLite file (with
chatd dev's pragmas, or `--sqlite-pragma`'s), PostgreSQL with fsync on; `--both` alternates
in-memory and durable runs; `--runs N` repeats, each run on a fresh stack, and ends with the
median ratio per mode. `--untitled` leaves the chats untitled, so each turn also names its
chat (what a chat's first message does). Per turn the report also counts history events
(and the floor's) and Postgres write transactions (each one a WAL flush when durable), and
per run what the stores were asked: `--store-runs` turns, then as many floor runs, each batch
alone and read `--store-settle-s` after it (10, 3 s; `--store-runs 0` skips the count).
Exits 1 when the ratio target is missed (not with `--ignore-speed-targets`) or the history
per step grows.

`--external` measures as a user would (`bench/_external.py`): `chatd dev` itself in a child
process (fresh data dir, free ports, fixed API key; durable as always), its worker's model a
fake provider in a child process of the bench (this script with `--serve-fake PORT`), the
clients in the bench process on persistent connections. Two shapes alternate, fresh chats and
one chat, each turn followed by the floor (b) on chatd dev's Temporal server (one chat's
also by a floor whose runs share one workflow id, as a chat's turns do); each of `--runs`
(default 5) runs on a fresh `chatd dev`, then the median ratio per shape. Where the
time goes: each turn's stages and timeline (history events, the fake provider's request and
first delta, the SSE client's first delta and `waiting`) beside the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _stack
from _external import final_report as final_external_report
from _external import run_external
from _history_size import HistorySize, history_per_step
from _noop_floor import NoopFloor, floor_worker
from _persistence import SETTLE_S, PersistenceCounts, count_persistence, print_breakdown
from _stack import BenchStack, SseEvent, say, summary
from _timed_fake import serve_timed_fake
from _timeline import timeline, wft_waits

from chatd.fake_provider.script import FakeResponse
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest
from workflows.constants import workflow_id

REPLY = "Sure. Durable turns are cheap."
"""The fake model's answer: a few short deltas."""
TARGET_RATIO = 1.5
HISTORY_SIZES = (10, 200)
PATH_TRIES = 3
"""Rounds of the history turns at most, until they take the same path (`_history_sizes`)."""
TITLE_ASK = "Write a short title"
"""How chatd's title request begins (the fake answers it like any other)."""


@dataclass
class RunResult:
    """One run's headline figures."""

    mode: str
    turn_p50: float
    floor_p50: float
    ratio: float
    history_flat: bool


@dataclass
class Samples:
    """Milliseconds per measurement, and a per-event timeline of the turns."""

    mode: str

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    timeline: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    slowest: tuple[float, list[tuple[str, float]]] = (0.0, [])
    persistence: dict[str, PersistenceCounts] = field(default_factory=dict)

    def add(self, name: str, ms: float) -> None:
        self.values[name].append(ms)

    def p50(self, name: str) -> float:
        return statistics.median(self.values[name])


def _ms(start: float, end: float) -> float:
    return (end - start) * 1000


def _is_waiting(event: SseEvent) -> bool:
    return event.event == "status" and event.data.get("status") == "waiting"


# --- one measurement of each kind ------------------------------------------------------------


async def one_turn(
    stack: BenchStack, sse: _stack.SseListener, chat_id: str, model: str
) -> dict[str, Any]:
    """POST a message; time the first delta and `waiting` at the client; let the run close."""
    fake = stack.services.fake
    deltas_before = len(fake.deltas(model))
    sse.drain()
    xid_before = await next_xid(stack)
    t0_ns = time.time_ns()
    t0 = time.perf_counter()
    await stack.send(chat_id, "How cheap is a turn?")
    acked = time.perf_counter()
    first = await sse.until(lambda e: e.event == "message_part")
    waiting = await sse.until(_is_waiting)
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    await handle.result()  # the run is closed before the next POST (not timed)
    pg_writes = await next_xid(stack) - xid_before
    emitted = fake.deltas(model)[deltas_before:]
    # The step's request (with --untitled, a title request comes alongside).
    requested = next(r for r in reversed(fake.requests(model)) if TITLE_ASK not in str(r.body))
    return {
        "t0_ns": t0_ns,
        "handle": handle,
        "run_id": (await handle.describe()).run_id,
        "ack": _ms(t0, acked),
        "first": _ms(t0, first.at),
        "waiting": _ms(t0, waiting.at),
        "provider_request": (requested.received_ns - t0_ns) / 1e6,
        "first_emitted": (emitted[0].emitted_ns - t0_ns) / 1e6 if emitted else float("nan"),
        "first_at_client_ns": first.at_ns,
        "waiting_at_client_ns": waiting.at_ns,
        "pg_writes": pg_writes,
    }


async def next_xid(stack: BenchStack) -> int:
    """The next transaction id Postgres will assign: the difference over a turn counts its
    write transactions (each one a WAL flush at commit when `synchronous_commit` is on).
    Reading it assigns none."""
    value = await stack.pool.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
    return int(value)


async def direct_provider(settings: Any, model: str) -> tuple[float, float]:
    """Floor (a): the provider adapter streaming from the fake server; (first delta, finish) ms."""
    config = ModelConfig(provider="anthropic", name=model)
    request = ModelRequest(
        model=config, messages=[Message(role="user", parts=[TextPart(text="How cheap?")])]
    )
    provider = make_provider(config, settings)
    t0 = time.perf_counter()
    first: float | None = None
    async for event in provider.stream_step(request):
        if first is None and isinstance(event, PartDelta):
            first = time.perf_counter()
    end = time.perf_counter()
    return _ms(t0, first or end), _ms(t0, end)


async def temporal_floor(stack: BenchStack, task_queue: str) -> tuple[float, str]:
    """Floor (b): start a one-no-op-activity workflow and wait for its result; (ms, id)."""
    floor_id = f"floor-{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    await stack.temporal.execute_workflow(NoopFloor.run, id=floor_id, task_queue=task_queue)
    return _ms(t0, time.perf_counter()), floor_id


# --- the run ---------------------------------------------------------------------------------


def _kv(items: list[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=JSON, got {item!r}")
        parsed[key] = json.loads(value)
    return parsed


async def measure(stack: BenchStack, args: argparse.Namespace, samples: Samples) -> None:
    """Warm-up, then N rounds of (turn, direct provider, Temporal floor).

    Each round's turn is the first of a new chat (titled unless `--untitled`, so no title
    is generated): a one-step turn at a fixed transcript size. With `--one-chat` every turn
    goes to the same chat, whose transcript grows by two messages a round (the model reads
    it all each time).
    """
    fake = stack.services.fake
    turn_model, direct_model = (
        f"bench-turn-{uuid.uuid4().hex[:6]}",
        f"bench-direct-{uuid.uuid4().hex[:6]}",
    )
    for model in (turn_model, direct_model):
        fake.script(model, lambda _req: FakeResponse.of_text(REPLY))
    settings = fake.provider_settings()
    chat_config: dict[str, Any] = {"model": {"provider": "anthropic", "name": turn_model}}
    if not args.untitled:
        chat_config["title"] = "bench"
    one_chat = await stack.create_chat(**chat_config) if args.one_chat else None
    floor = floor_worker(stack.worker)
    async with floor:
        total = args.warmup + args.turns
        for i in range(total):
            chat_id = one_chat or await stack.create_chat(**chat_config)
            async with stack.listen(chat_id) as sse:
                turn = await one_turn(stack, sse, chat_id, turn_model)
            first, finish = await direct_provider(settings, direct_model)
            floor_ms, floor_id = await temporal_floor(stack, floor.task_queue)
            warm = i < args.warmup
            if args.gc_freeze and i == args.warmup - 1:
                gc.collect()
                gc.freeze()  # what's alive after warm-up is never scanned again
            tag = "warm-up" if warm else f"turn {i - args.warmup + 1:3d}/{args.turns}"
            say(
                f"{tag}: first delta {turn['first']:6.1f} ms, waiting {turn['waiting']:6.1f} ms | "
                f"provider direct {first:5.1f}/{finish:5.1f} ms | Temporal floor {floor_ms:5.1f} ms"
            )
            if warm:
                continue
            samples.add("turn_first", turn["first"])
            samples.add("turn_waiting", turn["waiting"])
            samples.add("provider_first", first)
            samples.add("provider_finish", finish)
            samples.add("floor", floor_ms)
            history = await turn["handle"].fetch_history()
            points = timeline(history, turn)
            for label, ms in points:
                samples.timeline[label].append(ms)
            if turn["waiting"] > samples.slowest[0]:
                samples.slowest = (turn["waiting"], points)
            waits = wft_waits(history)
            samples.add("wft_count", len(waits))
            samples.values["wft_wait"].extend(waits)
            samples.add("pg_writes", turn["pg_writes"])
            samples.add("events", len(history.events))
            floor_history = await stack.temporal.get_workflow_handle(floor_id).fetch_history()
            samples.add("floor_events", len(floor_history.events))
        if args.store_runs:
            samples.persistence = await persistence_per_run(
                stack, floor.task_queue, chat_config, turn_model, args
            )


async def persistence_per_run(
    stack: BenchStack,
    task_queue: str,
    chat_config: dict[str, Any],
    model: str,
    args: argparse.Namespace,
) -> dict[str, PersistenceCounts]:
    """`--store-runs` turns alone, then as many floors alone: what each asks of Temporal's and
    Postgres's stores.

    The chats and their streams are opened before counting (a stream takes a quota slot:
    a write of its own, not the turn's).
    """
    n = args.store_runs
    async with contextlib.AsyncExitStack() as streams:
        listeners = []
        for _ in range(n):
            chat_id = await stack.create_chat(**chat_config)
            listeners.append((chat_id, await streams.enter_async_context(stack.listen(chat_id))))

        async def turn() -> None:
            chat_id, sse = listeners.pop()
            await one_turn(stack, sse, chat_id, model)

        async def floor() -> None:
            await temporal_floor(stack, task_queue)

        url = f"http://127.0.0.1:{stack.services.temporal.metrics_port}/metrics"
        runs = {"turn": turn, "floor": floor}
        return await count_persistence(
            url, lambda: next_xid(stack), runs, n, settle_s=args.store_settle_s
        )


def report(samples: Samples, sizes: dict[int, dict[str, float]]) -> RunResult:
    """Print the figures; return the run's headline figures."""
    v = samples.values
    print(f"\n=== turn overhead ({samples.mode}): one-step turns through the gateway vs. floors "
          "(same run) ===")  # fmt: skip
    print(f"turn  POST -> first message_part at SSE client : {summary(v['turn_first'])}")
    print(f"turn  POST -> status waiting at SSE client     : {summary(v['turn_waiting'])}")
    print(f"floor (a) provider direct, first delta        : {summary(v['provider_first'])}")
    print(f"floor (a) provider direct, finish             : {summary(v['provider_finish'])}")
    print(f"floor (b) Temporal: 1 no-op activity wf       : {summary(v['floor'])}")
    floor = samples.p50("floor")
    ratio = samples.p50("turn_waiting") / floor
    print(
        f"ratio turn waiting p50 / Temporal floor p50   : {ratio:.2f}  (target <= {TARGET_RATIO})"
    )
    print(
        f"ratio turn first delta p50 / Temporal floor p50: {samples.p50('turn_first') / floor:.2f}"
    )
    print(
        f"workflow tasks per turn: {statistics.median(v['wft_count']):.0f}; "
        f"workflow task schedule->start wait: {summary(v['wft_wait'])}"
    )
    print(
        f"per turn: {statistics.median(v['events']):.0f} history events "
        f"(floor {statistics.median(v['floor_events']):.0f}), "
        f"{statistics.median(v['pg_writes']):.0f} Postgres write transactions"
    )
    print_breakdown(samples.persistence)
    print("\nturn timeline, ms after the POST: median of all turns | the slowest turn")
    points = sorted(samples.timeline.items(), key=lambda kv: statistics.median(kv[1]))
    slowest = dict(samples.slowest[1])
    for label, values in points:
        print(
            f"  {statistics.median(values):7.1f} | {slowest.get(label, float('nan')):7.1f}  {label}"
        )
    print(
        "\nTemporal history of one more one-step turn, by transcript length (protobuf: less "
        "the workflow tasks' own events):"
    )
    for messages, size in sizes.items():
        print(
            f"  {messages:4d} messages: {size['proto_per_step']:7.0f} B/step protobuf, "
            f"{size['json_per_step']:7.0f} B/step JSON ({size['events']:.0f} events, "
            f"{size['steps']:.0f} step)"
        )
    small, large = (sizes[n]["proto_per_step"] for n in HISTORY_SIZES)
    growth = (large - small) / small
    print(
        f"  growth {HISTORY_SIZES[0]} -> {HISTORY_SIZES[1]} messages: {growth:+.1%}"
        " (target within 10%)"
    )
    print(f"\ntargets: ratio {'MET' if ratio <= TARGET_RATIO else 'MISSED'}, "
          f"history {'FLAT' if abs(growth) <= 0.10 else 'GROWS'}")  # fmt: skip
    return RunResult(samples.mode, samples.p50("turn_waiting"), floor, ratio, abs(growth) <= 0.10)


async def run(args: argparse.Namespace, durable: bool) -> RunResult:
    """Bring the stack up, measure, report, tear down."""
    samples = Samples(mode="durable" if durable else "in-memory")
    config = _kv(args.dynamic_config)
    pragmas = dict(p.split("=", 1) for p in args.sqlite_pragma) or None
    async with _stack.services(
        dynamic_config=config, durable=durable, sqlite_pragmas=pragmas
    ) as svc:
        async with _stack.running_stack(svc, worker_overrides=_kv(args.worker_option)) as stack:
            say(f"stack up; {args.warmup} warm-up rounds, then {args.turns} measured rounds")
            await measure(stack, args, samples)
            for messages in HISTORY_SIZES:
                svc.fake.script(f"bench-hist-{messages}", lambda _req: FakeResponse.of_text(REPLY))
            sizes = await _history_sizes(stack)
    return report(samples, sizes)


async def _history_sizes(stack: BenchStack) -> dict[int, HistorySize]:
    """One more turn's history in a chat of each of `HISTORY_SIZES`, measured again (up to
    `PATH_TRIES` times) while the turns took different paths: on a loaded machine a send
    may start its turn with a signal instead of an update, or a workflow task time out,
    which changes the events, not how they grow with the transcript."""
    sizes: dict[int, HistorySize] = {}
    for attempt in range(1, PATH_TRIES + 1):
        paths: set[tuple[int, ...]] = set()
        for messages in HISTORY_SIZES:
            say(f"history size: chat seeded with {messages} messages, one more turn")
            sizes[messages], path = await history_per_step(
                stack, f"bench-hist-{messages}", messages
            )
            paths.add(path)
        if len(paths) == 1:
            break
        say(f"history size: the turns took different paths (try {attempt} of {PATH_TRIES})")
    return sizes


def final_report(results: list[RunResult], speed_targets: bool = True) -> bool:
    """With several runs: each run's figures and, per mode, the median ratio; all targets met
    (the ratio's only with `speed_targets`)?"""
    if len(results) > 1:
        print("\n=== runs ===")
        for r in results:
            print(f"  {r.mode:9s}  turn waiting p50 {r.turn_p50:6.1f} ms  "
                  f"floor p50 {r.floor_p50:6.1f} ms  ratio {r.ratio:.2f}")  # fmt: skip
        for mode in dict.fromkeys(r.mode for r in results):
            ratios = [r.ratio for r in results if r.mode == mode]
            print(f"  {mode}: median ratio {statistics.median(ratios):.2f} of {len(ratios)} runs")
    modes = {r.mode for r in results}
    medians = [statistics.median(r.ratio for r in results if r.mode == m) for m in modes]
    fast = all(m <= TARGET_RATIO for m in medians)
    return (fast or not speed_targets) and all(r.history_flat for r in results)


IN_PROCESS_ONLY = (
    "durable", "both", "one_chat", "untitled", "gc_freeze",
    "dynamic_config", "worker_option", "sqlite_pragma",
)  # fmt: skip
"""Options that set up the in-process stack: `--external` runs chatd dev as it is, both shapes."""


def external(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """`--external`: each run on a fresh `chatd dev`; is the fresh chats' median ratio met?"""
    given = [f"--{name.replace('_', '-')}" for name in IN_PROCESS_ONLY if getattr(args, name)]
    if given:
        parser.error(f"--external runs chatd dev as it is: drop {', '.join(given)}")
    fake_command = [sys.executable, str(Path(__file__).resolve()), "--serve-fake"]
    results = [
        shape
        for n in range(1, (args.runs or 5) + 1)
        for shape in asyncio.run(run_external(n, args.turns, args.warmup, fake_command))
    ]
    return final_external_report(results, TARGET_RATIO) or args.ignore_speed_targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=50, help="measured rounds (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured rounds first")
    parser.add_argument("--dynamic-config", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() after warm-up (an experiment)"
    )
    parser.add_argument("--worker-option", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument(
        "--one-chat",
        action="store_true",
        help="every turn in one chat, its transcript growing 2 messages a round",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="Temporal persisted to a file and Postgres with fsync on, as `chatd dev` runs them",
    )
    parser.add_argument("--both", action="store_true", help="alternate in-memory and durable runs")
    parser.add_argument(
        "--sqlite-pragma",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="durable Temporal's SQLite pragmas instead of chatd dev's (journal_mode, synchronous)",
    )
    parser.add_argument(
        "--runs", type=int, help="runs, each on a fresh stack (default 1; 5 with --external)"
    )
    parser.add_argument(
        "--untitled",
        action="store_true",
        help="chats without a title: each turn also names its chat, as a first message does",
    )
    parser.add_argument(
        "--external",
        action="store_true",
        help="turns through `chatd dev` in a child process, clients out of process: fresh "
        "chats and one chat, the floor on its Temporal server",
    )
    parser.add_argument(
        "--store-runs",
        type=int,
        default=10,
        help="turns, then floor runs, counted alone for the store operations (default 10; "
        "0: no count; not with --external)",
    )
    parser.add_argument(
        "--store-settle-s",
        type=float,
        default=SETTLE_S,
        help=f"wait before reading the store counters after each batch (default {SETTLE_S:g} s; "
        "less misses the batch's asynchronous work)",
    )
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="report the ratio target without failing on it (a smoke run on a busy machine); "
        "a history that grows still fails",
    )
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_timed_fake(args.serve_fake, REPLY)
        return
    if args.external:
        sys.exit(0 if external(parser, args) else 1)
    modes = [False, True] if args.both else [args.durable]
    runs = args.runs or 1
    results = [asyncio.run(run(args, durable)) for _ in range(runs) for durable in modes]
    sys.exit(0 if final_report(results, not args.ignore_speed_targets) else 1)


if __name__ == "__main__":
    main()
