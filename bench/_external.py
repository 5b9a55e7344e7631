"""`turn_overhead.py --external`: one-step turns timed as a user's client sees them, against
`chatd dev` in a child process (`_chatd_dev`), beside the Temporal floor on its server.

The clients are in the bench process: one `httpx.AsyncClient` for every POST (a kept-alive
connection), an SSE client on each chat connected before its message is sent, and, for the
floor, a Temporal client and a `NoopFloor` worker with the chatd worker's options on chatd
dev's Temporal server. Two shapes, alternating round by round, each turn followed by a floor
run: fresh chats (each turn the first of a new titled chat) and one chat (every turn in the
same chat, its transcript growing by two messages a round). Per run and shape: the p50s and
their ratio, and where a turn's time goes against the floor's (stages and timeline, from the
runs' histories, the fake provider's times and the SSE client's).

One chat's turns are runs of one workflow id, each started after the last one closed; the
floor's runs each have a new id. Temporal charges more for a new run of a closed id, so one
chat's rounds also time a second floor, its runs all on one id, reported beside the first.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _chatd_dev import FAKE_MODEL, ChatdDev, chatd_dev
from _noop_floor import NoopFloor, noop_activity
from _stack import SseEvent, SseListener, say, summary
from _timed_fake import take_provider_times
from _timeline import timeline, wft_waits
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from chatd.settings import ProviderSettings, TemporalSettings
from chatd.temporal_client import connect_temporal
from chatd.tools.defaults import default_registry
from workers.worker import WorkerConfig, tuned_worker
from workflows.constants import workflow_id

__all__ = ["SHAPES", "ShapeResult", "final_report", "run_external"]

FRESH, ONE_CHAT = "fresh chats", "one chat"
SHAPES = (FRESH, ONE_CHAT)
ASK = "How cheap is a turn?"
_START = "POST (floor: start)"
_LAST_WFT_SCHEDULED = "last workflow_task_scheduled"
_LAST_WFT_COMPLETED = "last workflow_task_completed"
_FLOOR_RESULT = "client got the result (floor)"

STAGES: tuple[tuple[str, str, str], ...] = (
    ("POST -> workflow started (gateway; floor: start)", _START, "workflow_execution_started #1"),
    ("1st workflow task scheduled -> started", "workflow_task_scheduled #1",
     "workflow_task_started #1"),
    ("1st workflow task started -> completed", "workflow_task_started #1",
     "workflow_task_completed #1"),
    ("1st workflow task completed -> activity started", "workflow_task_completed #1",
     "activity_task_started #1"),
    ("activity started -> provider got the request", "activity_task_started #1",
     "provider got the request"),
    ("provider: request -> 1st delta emitted", "provider got the request",
     "provider emitted 1st delta"),
    ("1st delta: provider -> SSE client", "provider emitted 1st delta",
     "SSE client got 1st message_part"),
    ("SSE client: 1st message_part -> status waiting", "SSE client got 1st message_part",
     "SSE client got status waiting"),
    ("activity started -> completed", "activity_task_started #1", "activity_task_completed #1"),
    ("activity completed -> last workflow task completed", "activity_task_completed #1",
     _LAST_WFT_COMPLETED),
    ("last workflow task scheduled -> completed", _LAST_WFT_SCHEDULED, _LAST_WFT_COMPLETED),
    ("floor: last workflow task completed -> result at client", _LAST_WFT_COMPLETED,
     _FLOOR_RESULT),
)  # fmt: skip
"""(stage, from point, to point): the turn's critical path to `waiting` first, then what
follows it (the floor's result waits on all of it)."""

_NO_CLIENT_POINTS: dict[str, float] = dict.fromkeys(
    ("ack", "provider_request", "first_emitted", "first", "waiting"), math.nan
)
"""`timeline`'s client-side points, absent for a floor run."""


@dataclass
class Clients:
    """The bench's connections to one running `chatd dev`."""

    http: httpx.AsyncClient
    """Every POST, on one kept-alive connection."""
    streams: httpx.AsyncClient
    """The SSE clients."""
    fake: httpx.AsyncClient
    temporal: Client
    floor_queue: str


@dataclass
class Turn:
    """One turn: POST -> first `message_part` / `status: waiting`, and its points (ms)."""

    first: float
    waiting: float
    points: dict[str, float]
    wft_waits: list[float]


@dataclass
class Floor:
    """One floor run: start -> result, and its points (ms)."""

    ms: float
    points: dict[str, float]


@dataclass
class ShapeSamples:
    """A shape's measured rounds in one run."""

    turns: list[Turn] = field(default_factory=list)
    floors: list[Floor] = field(default_factory=list)
    one_id_floors: list[Floor] = field(default_factory=list)
    """One chat's rounds only: the floor's runs on one workflow id, as a chat's turns are."""

    @property
    def waiting_p50(self) -> float:
        """Median POST -> `waiting` of the turns."""
        return statistics.median(t.waiting for t in self.turns)

    @property
    def floor_p50(self) -> float:
        """Median start -> result of the floor runs."""
        return statistics.median(f.ms for f in self.floors)

    @property
    def one_id_floor_p50(self) -> float | None:
        """Median start -> result of the floor runs on one id (None: not timed)."""
        return statistics.median(f.ms for f in self.one_id_floors) if self.one_id_floors else None


@dataclass
class ShapeResult:
    """A run's headline figures for one shape."""

    run: int
    shape: str
    turn_p50: float
    floor_p50: float
    ratio: float
    one_id_floor_p50: float | None
    """The floor whose runs all have one workflow id (one chat only)."""

    @property
    def one_id_ratio(self) -> float | None:
        """The turns' p50 over the one-id floor's."""
        return self.turn_p50 / self.one_id_floor_p50 if self.one_id_floor_p50 else None


def _ms(start: float, end: float) -> float:
    return (end - start) * 1000


def _is_waiting(event: SseEvent) -> bool:
    return event.event == "status" and event.data.get("status") == "waiting"


def _with_aliases(points: dict[str, float]) -> dict[str, float]:
    """`points`, with the start (0) and the last workflow task's points under fixed names."""
    marked = {_START: 0.0, **points}
    completed = "workflow_task_completed #"
    last = max(
        (int(label.removeprefix(completed)) for label in points if label.startswith(completed)),
        default=None,
    )
    if last is not None:
        marked[_LAST_WFT_SCHEDULED] = points[f"workflow_task_scheduled #{last}"]
        marked[_LAST_WFT_COMPLETED] = points[f"workflow_task_completed #{last}"]
    return marked


def stages(points: dict[str, float]) -> dict[str, float]:
    """The `STAGES` whose two points are both in `points`: stage -> ms."""
    marked = _with_aliases(points)
    return {
        name: marked[end] - marked[begin]
        for name, begin, end in STAGES
        if begin in marked and end in marked
    }


# --- one measurement of each kind ------------------------------------------------------------


async def create_chat(c: Clients) -> str:
    """A titled chat on the fake model (no title is generated); its id."""
    response = await c.http.post("/chats", json={"model": FAKE_MODEL, "title": "bench"})
    if response.status_code != 201:
        raise RuntimeError(f"POST /chats answered {response.status_code}: {response.text}")
    return str(response.json()["id"])


async def one_turn(c: Clients, sse: SseListener, chat_id: str) -> Turn:
    """POST a message; time the first delta and `waiting` at the client; let the run close."""
    await take_provider_times(c.fake)  # forget what came before
    sse.drain()
    t0_ns = time.time_ns()
    t0 = time.perf_counter()
    response = await c.http.post(f"/chats/{chat_id}/messages", json={"content": ASK})
    acked = time.perf_counter()
    if response.status_code != 202:
        raise RuntimeError(f"POST answered {response.status_code}: {response.text}")
    first = await sse.until(lambda e: e.event == "message_part")
    waiting = await sse.until(_is_waiting)
    handle = c.temporal.get_workflow_handle(workflow_id(chat_id))
    await handle.result()  # the run is closed before the next measurement (not timed)
    history = await handle.fetch_history()
    provider = await take_provider_times(c.fake)
    client_points = {
        "t0_ns": t0_ns,
        "ack": _ms(t0, acked),
        "provider_request": provider.first_received_ms(t0_ns),
        "first_emitted": provider.first_emitted_ms(t0_ns),
        "first": _ms(t0, first.at),
        "waiting": _ms(t0, waiting.at),
    }
    return Turn(
        first=client_points["first"],
        waiting=client_points["waiting"],
        points=dict(timeline(history, client_points)),
        wft_waits=wft_waits(history),
    )


async def fresh_chat_turn(c: Clients) -> Turn:
    """A turn that is the first message of a new chat, its SSE client connected first."""
    chat_id = await create_chat(c)
    async with SseListener(c.streams, chat_id) as sse:
        return await one_turn(c, sse, chat_id)


async def floor_run(c: Clients, floor_id: str | None = None) -> Floor:
    """Start `NoopFloor` (on `floor_id`, whose last run has closed; else a new id) and wait
    for its result; its points from its history."""
    t0_ns = time.time_ns()
    t0 = time.perf_counter()
    handle = await c.temporal.start_workflow(
        NoopFloor.run, id=floor_id or f"floor-{uuid.uuid4().hex}", task_queue=c.floor_queue
    )
    await handle.result()
    ms = _ms(t0, time.perf_counter())
    history: WorkflowHistory = await handle.fetch_history()
    points = {
        label: at
        for label, at in timeline(history, {**_NO_CLIENT_POINTS, "t0_ns": t0_ns})
        if not math.isnan(at)
    }
    points[_FLOOR_RESULT] = ms
    return Floor(ms, points)


# --- the run ---------------------------------------------------------------------------------


def floor_worker_like_chatd(client: Client) -> Worker:
    """A `NoopFloor` worker, on a task queue of its own, tuned as chatd dev's worker is (its
    `WorkerConfig` defaults), without its background jobs (reconciler, retention)."""
    config = WorkerConfig(
        task_queue=f"bench-floor-{uuid.uuid4().hex[:8]}",
        providers=ProviderSettings(),
        registry=default_registry(),
        workspace_root=Path(),
    )
    return tuned_worker(client, config, workflows=[NoopFloor], activities=[noop_activity])


@contextlib.asynccontextmanager
async def clients(dev: ChatdDev) -> AsyncIterator[Clients]:
    """The bench's clients of `dev`, and the floor worker, running; closed on the way out."""
    headers = {"Authorization": f"Bearer {dev.api_key}"}
    temporal = await connect_temporal(TemporalSettings(address=dev.temporal_address))
    floor = floor_worker_like_chatd(temporal)
    async with (
        httpx.AsyncClient(base_url=dev.api_url, headers=headers, timeout=60) as http,
        httpx.AsyncClient(base_url=dev.api_url, headers=headers, timeout=60) as streams,
        httpx.AsyncClient(base_url=dev.fake_url, timeout=10) as fake,
        floor,
    ):
        yield Clients(http, streams, fake, temporal, floor.task_queue)


async def measure(c: Clients, turns: int, warmup: int) -> dict[str, ShapeSamples]:
    """Warm-up, then `turns` rounds of (fresh-chat turn, floor, one-chat turn, floor, floor
    on one id)."""
    samples = {shape: ShapeSamples() for shape in SHAPES}
    one_chat = await create_chat(c)
    one_id = f"floor-one-id-{uuid.uuid4().hex}"
    async with SseListener(c.streams, one_chat) as one_chat_sse:
        for i in range(warmup + turns):
            line: list[str] = []
            for shape in SHAPES:
                if shape == FRESH:
                    turn = await fresh_chat_turn(c)
                else:
                    turn = await one_turn(c, one_chat_sse, one_chat)
                floor = await floor_run(c)
                line.append(f"{shape} {turn.waiting:6.1f} ms, floor {floor.ms:5.1f} ms")
                if shape == ONE_CHAT:
                    one_id_floor = await floor_run(c, one_id)
                    line.append(f"floor on one id {one_id_floor.ms:5.1f} ms")
                if i >= warmup:
                    samples[shape].turns.append(turn)
                    samples[shape].floors.append(floor)
                    if shape == ONE_CHAT:
                        samples[shape].one_id_floors.append(one_id_floor)
            tag = "warm-up" if i < warmup else f"round {i - warmup + 1:3d}/{turns}"
            say(f"{tag}: waiting | " + " | ".join(line))
    return samples


async def run_external(
    run: int, turns: int, warmup: int, fake_command: Sequence[str]
) -> list[ShapeResult]:
    """One run on a fresh `chatd dev`: measure both shapes, report them, stop it."""
    async with chatd_dev(fake_command) as dev, clients(dev) as c:
        say(f"run {run}: {warmup} warm-up rounds, then {turns} measured rounds")
        samples = await measure(c, turns, warmup)
    return [report(run, shape, samples[shape]) for shape in SHAPES]


# --- the report ------------------------------------------------------------------------------


def _median_points(points: Sequence[dict[str, float]]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for one in points:
        for label, ms in one.items():
            values[label].append(ms)
    return {label: statistics.median(v) for label, v in values.items()}


def _cell(value: float | None) -> str:
    return f"{value:7.1f}" if value is not None and not math.isnan(value) else "      -"


def report(run: int, shape: str, s: ShapeSamples) -> ShapeResult:
    """Print one shape's figures of a run; return its headline figures."""
    floor, waiting = s.floor_p50, s.waiting_p50
    print(f"\n=== turn overhead, external (chatd dev, run {run}): {shape} ===")
    firsts, waitings = [t.first for t in s.turns], [t.waiting for t in s.turns]
    print(f"turn  POST -> first message_part at SSE client : {summary(firsts)}")
    print(f"turn  POST -> status waiting at SSE client     : {summary(waitings)}")
    print(f"floor Temporal: 1 no-op activity wf           : {summary([f.ms for f in s.floors])}")
    print(f"ratio turn waiting p50 / floor p50             : {waiting / floor:.2f}")
    one_id = s.one_id_floor_p50
    if one_id is not None:
        one_id_ms = [f.ms for f in s.one_id_floors]
        print(f"floor on one workflow id, as a chat's turns   : {summary(one_id_ms)}")
        print(f"ratio turn waiting p50 / one-id floor p50      : {waiting / one_id:.2f}")
    waits = [w for t in s.turns for w in t.wft_waits]
    print(f"turn workflow task schedule->start wait        : {summary(waits)}")  # fmt: skip
    turn_stages = _median_points([stages(t.points) for t in s.turns])
    floor_stages = _median_points([stages(f.points) for f in s.floors])
    one_id_stages = _median_points([stages(f.points) for f in s.one_id_floors])
    print("\nwhere the time goes, ms (median: the turns | the floor | the floor on one id)")
    for name, _, _ in STAGES:
        if name in turn_stages or name in floor_stages:
            print(
                f"  {_cell(turn_stages.get(name))} | {_cell(floor_stages.get(name))} | "
                f"{_cell(one_id_stages.get(name))}  {name}"
            )
    turn_points = _median_points([t.points for t in s.turns])
    floor_points = _median_points([f.points for f in s.floors])
    slowest = max(s.turns, key=lambda t: t.waiting).points
    print("\ntimeline, ms after the POST (floor: its start): turn median | slowest turn | floor")
    order = {**floor_points, **turn_points}  # a label by the turn's time, else the floor's
    for label in sorted(order, key=order.__getitem__):
        print(
            f"  {_cell(turn_points.get(label))} | {_cell(slowest.get(label))} | "
            f"{_cell(floor_points.get(label))}  {label}"
        )
    return ShapeResult(run, shape, waiting, floor, waiting / floor, one_id)


def final_report(results: Sequence[ShapeResult], target: float) -> bool:
    """Each run's figures and each shape's median ratio; is the fresh chats' within `target`?

    Only fresh chats have a target: one chat's figures grow with the number of turns.
    """
    print("\n=== turn overhead, external (chatd dev): runs ===")
    for r in results:
        one_id = (
            f"  floor on one id {r.one_id_floor_p50:6.1f} ms  ratio {r.one_id_ratio:.2f}"
            if r.one_id_floor_p50 is not None and r.one_id_ratio is not None
            else ""
        )
        print(f"  run {r.run}  {r.shape:11s}  turn waiting p50 {r.turn_p50:6.1f} ms  "
              f"floor p50 {r.floor_p50:6.1f} ms  ratio {r.ratio:.2f}{one_id}")  # fmt: skip
    medians: dict[str, float] = {}
    for shape in SHAPES:
        ratios = [r.ratio for r in results if r.shape == shape]
        medians[shape] = statistics.median(ratios)
        goal = f"  (target <= {target})" if shape == FRESH else ""
        one_id_ratios = [r.one_id_ratio for r in results if r.shape == shape and r.one_id_ratio]
        beside = (
            f"; against the floor on one id {statistics.median(one_id_ratios):.2f}"
            if one_id_ratios
            else ""
        )
        print(f"  {shape}: median ratio {medians[shape]:.2f} of {len(ratios)} runs{goal}{beside}")
    return medians[FRESH] <= target
