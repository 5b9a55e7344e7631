"""K concurrent chats on one worker and one gateway: does every delta still arrive in time?

    python bench/concurrency.py [--ladder 25,50,100,200,300,500,700,1000] [--deltas 100]
                                [--spacing-ms 20] [--tool-steps 2] [--turn-timeout 300]
                                [--keep-going]

Processes: PostgreSQL and the Temporal dev server (as `_stack.services()` starts them), ONE
`chatd worker` (`WorkerProcess`, CHATD_TOOLS unset), ONE `chatd api` gateway, and the fake
provider in its own child process (this script with `--serve-fake PORT`), so that the SSE
clients in this process don't share a GIL with it. Each process's CPU and peak RSS is
measured with psutil over each level of the ladder.

Per level K: K chats, each with an SSE client (a bare asyncio protocol, `_stack.RawSseClient`)
connected before its message is sent; the K messages are sent at once. Each turn has 3 model
steps (`--tool-steps` sets the first count): steps 1 and 2 call `current_time`, step 3
streams `--deltas` text deltas
`--spacing-ms` apart. Every delta's text is unique (`K<k>C<chat>d<i>|`), stamped with
`time.time_ns()` by the fake provider when written and by the SSE client when received;
latency = receive - emit, matched by text.

Resets: `reset` events in the level's chat logs (a streaming step whose attempt was given up
and retried: clients drop what they were shown and see it again), per 1,000 turns, and why
each retried attempt's predecessor was given up (its `last_failure` in the run's history:
a heartbeat timeout, an error). Nothing is killed here, so every reset is a false alarm.

Before the ladder, three turns run alone: their median (send -> `waiting`) is the unloaded
turn. A level passes when every send is answered 202, every turn ends `waiting`, the p99
delta latency is under 250 ms, there is at most 1 reset per 1,000 turns, and its wall time
(first send -> last turn ended) is at most 3x the unloaded turn plus the send spread. The
last two see a retry storm that the latency of what finished can't: a level whose steps are
reset and re-streamed ends late, and its resets are counted. Each level also reports its
turns per second and the workflow tasks that timed out (a worker that took more than it
could run).
The ladder stops at the first level that fails (unless `--keep-going`). Exit status 1 when
the largest passing K is below `--target-k` (500). `--ignore-speed-targets` (a smoke run on a
busy machine) holds a level to its sends and turns only: p99, resets and wall are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import _stack
import asyncpg
import httpx
import psutil  # type: ignore[import-untyped]
from _stack import (
    ChildProcess,
    ProcessMeter,
    RawSseClient,
    WorkerProcess,
    percentile,
    raw_post,
    say,
)
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from chatd.devstack.ports import free_port
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore

P99_LIMIT_MS = 250.0
RESETS_PER_1000_LIMIT = 1.0
WALL_LIMIT_TURNS = 3.0
PG_STATS_FLUSH_S = 1.5
"""Postgres backends report their row counts at most once a second: wait them out."""
"""A level may take this many unloaded turns' time (plus the send spread)."""
UNLOADED_TURNS = 3
TARGET_K = 500
MODEL = "bench-concurrency"
NAN = float("nan")
T = TypeVar("T")
_TAG = re.compile(r"tag=(K\d+C\d+)")


# --- the fake model (runs in the fake provider's child process) ------------------------------


@dataclass(frozen=True)
class Script:
    """What the fake model streams in the final step."""

    deltas: int = 100
    spacing_s: float = 0.02
    tool_steps: int = 2

    def __call__(self, request: FakeRequest) -> FakeResponse:
        """The first `tool_steps` steps call `current_time`; the next streams unique text
        deltas."""
        messages = request.body.get("messages", [])
        step = sum(1 for m in messages if m.get("role") == "assistant")
        if step < self.tool_steps:
            return FakeResponse.of_tool_call("current_time")
        found = _TAG.search(json.dumps(messages[0]) if messages else "")
        tag = found.group(1) if found else "untagged"
        tokens = [f"{tag}d{i:04d}|" for i in range(self.deltas)]
        return FakeResponse(
            parts=[FakeText(text="".join(tokens), chunk_size=len(tokens[0]))],
            delta_delay_s=self.spacing_s,
        )


# --- one level of the ladder -----------------------------------------------------------------


@dataclass
class Level:
    """What one level of the ladder measured."""

    k: int
    finished: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    """Emit -> SSE client, ms, every matched delta."""
    stored: list[float] = field(default_factory=list)
    """Emit -> the delta's row written by the worker (`chat_events.created_at`), ms."""
    unmatched: int = 0
    """Emitted deltas no client received; negative when some were received twice."""
    durations: list[float] = field(default_factory=list)
    """Send -> final status at the client, s."""
    gaps: list[float] = field(default_factory=list)
    """Time between consecutive deltas of a stream as the fake emitted them, ms."""
    wall_s: float = 0.0
    send_retries: int = 0
    """Sends answered 503 and retried (none since a send no worker takes in time is queued)."""
    sends_queued: int = 0
    """Sends answered 202 with `turn_id` null: no worker took the update within the gateway's
    wait, so the message went by signal-with-start."""
    send_ms: list[float] = field(default_factory=list)
    """POST -> 202 of each send, retries included."""
    refused: list[str] = field(default_factory=list)
    """Sends not answered 202 (after retrying 503s): their status and body."""
    resets: int = 0
    """`reset` events in the level's chats: retried streaming attempts clients saw."""
    retried: Counter[str] = field(default_factory=Counter)
    """Retried model-step attempts by why the one before was given up (from the histories)."""
    task_timeouts: int = 0
    """Workflow tasks that timed out in the level's histories (start-to-close or sticky
    schedule-to-start): each is a workflow task run again, often with a full replay."""
    wall_limit_s: float = float("inf")
    """`WALL_LIMIT_TURNS` unloaded turns plus the send spread."""
    cpu: dict[str, float] = field(default_factory=dict)
    rss: dict[str, float] = field(default_factory=dict)
    system_cpu: float = 0.0
    deltas: int = 0
    """Deltas the fake provider streamed over the level."""
    pg_rows: int = 0
    """Rows Postgres inserted, updated or deleted in the bench's database over the level."""
    wal_bytes: int = 0
    """WAL Postgres wrote over the level (the whole cluster: the bench is all it serves)."""
    speed_targets: bool = True
    """Whether the p99, resets and wall limits fail the level (`--ignore-speed-targets`)."""

    def cpu_s_per_1000_deltas(self, name: str) -> float:
        """The CPU seconds process `name` spent per 1,000 streamed deltas."""
        cpu_s = self.cpu.get(name, NAN) / 100 * self.wall_s
        return 1000 * cpu_s / self.deltas if self.deltas else NAN

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("inf")

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99) if self.latencies else float("inf")

    @property
    def resets_per_1000(self) -> float:
        return 1000 * self.resets / self.k if self.k else NAN

    @property
    def turns_per_s(self) -> float:
        return self.finished / self.wall_s if self.wall_s else NAN

    @property
    def failures(self) -> list[str]:
        """Why the level fails (empty: it passes)."""
        failed = []
        if self.refused:
            failed.append(f"{len(self.refused)} sends refused")
        if self.finished != self.k or self.errors:
            failed.append(f"{self.k - self.finished} turns not finished")
        if not self.speed_targets:
            return failed
        if not self.p99 < P99_LIMIT_MS:
            failed.append(f"p99 {self.p99:.0f} ms")
        if self.resets_per_1000 > RESETS_PER_1000_LIMIT:
            failed.append(f"{self.resets_per_1000:.1f} resets per 1,000 turns")
        if self.wall_s > self.wall_limit_s:
            failed.append(f"wall {self.wall_s:.0f} s > {self.wall_limit_s:.0f} s")
        return failed

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class Harness:
    """The running processes and clients."""

    base_url: str
    host: str
    port: int
    api_key: str
    http: httpx.AsyncClient
    fake_url: str
    meter: ProcessMeter
    database_url: str
    temporal_address: str
    """Where `run_level` reads the turns' histories (retried steps, task timeouts)."""
    profiles: dict[str, int] = field(default_factory=dict)
    """Processes to sample with py-spy during each level (name -> pid)."""
    py_spy: str | None = None
    unloaded_turn_s: float = float("inf")
    """The median turn with nothing else running (`unloaded_turn`)."""
    send_retries: int = 0
    """Sends answered 503 and retried, over the whole run (`_send`)."""
    refused: list[str] = field(default_factory=list)
    """Sends not answered 202, over the whole run (`_send`)."""
    sends_queued: int = 0
    """Sends answered with `turn_id` null, over the whole run (`_send`)."""
    send_ms: list[float] = field(default_factory=list)
    """POST -> 202 of every send of the run."""
    logs: Path = Path(".")
    quiet_below: float = 0.0
    speed_targets: bool = True
    """Whether a level's speed limits fail it (`Level.speed_targets`)."""


async def _bounded(limit: int, coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run the coroutines, at most `limit` at a time; their results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(coro: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await coro

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def _create_chat(h: Harness) -> str:
    response = await h.http.post("/chats", json={"model": {"provider": "anthropic", "name": MODEL}})
    response.raise_for_status()
    return str(response.json()["id"])


async def _send(h: Harness, chat_id: str, tag: str, after_s: float = 0.0) -> float:
    """POST the message (`raw_post`: a lean client, so that send -> 202 is the server's); the
    time it was first sent (perf_counter).

    As a client should: a 503 (Temporal or Postgres unreachable) is retried with the same
    Idempotency-Key.
    """
    await asyncio.sleep(after_s)
    sent = time.perf_counter()
    headers = {"Authorization": f"Bearer {h.api_key}", "Idempotency-Key": tag}
    for _attempt in range(10):
        status, answer = await raw_post(
            h.host,
            h.port,
            f"/api/v1/chats/{chat_id}/messages",
            {"content": f"What time is it? tag={tag}"},
            headers,
        )
        if status != 503:
            break
        h.send_retries += 1
        await asyncio.sleep(1)
    if status != 202:
        h.refused.append(f"{status} {str(answer)[:200]}")
        return sent
    h.send_ms.append((time.perf_counter() - sent) * 1000)
    h.sends_queued += answer["turn_id"] is None
    return sent


async def run_level(h: Harness, k: int, timeout_s: float, spread_s: float = 0.0) -> Level:
    """K chats, K SSE clients, K messages at once (or spread evenly over `spread_s`); wait
    until every turn ends (or timeout)."""
    level = Level(k, speed_targets=h.speed_targets)
    await _wait_quiet(h.quiet_below)
    say(f"K={k}: creating {k} chats and connecting {k} SSE clients")
    chat_ids: list[str] = await _bounded(50, [_create_chat(h) for _ in range(k)])
    clients: list[RawSseClient] = await _bounded(
        50,
        [
            RawSseClient.connect(h.host, h.port, f"/api/v1/chats/{c}/stream", h.api_key)
            for c in chat_ids
        ],
    )
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(c.ready.wait() for c in clients))
        failed = [c.error for c in clients if c.error]
        if failed:
            raise RuntimeError(f"{len(failed)} SSE clients failed to connect: {failed[0]}")
        async with httpx.AsyncClient(timeout=10) as fake:
            await fake.get(f"{h.fake_url}/bench/deltas")  # forget older deltas
        _stack.pause_gc()
        tags = [f"K{k:04d}C{i:04d}" for i in range(k)]
        say(f"K={k}: sending {k} messages")
        profilers = _start_profilers(h, k)
        pg_before = await _pg_counters(h.database_url)
        h.meter.start()
        started = time.perf_counter()
        retries_before, queued_before, answers_before, refused_before = (
            h.send_retries,
            h.sends_queued,
            len(h.send_ms),
            len(h.refused),
        )
        sends = [
            _send(h, c, t, after_s=spread_s * i / k)
            for i, (c, t) in enumerate(zip(chat_ids, tags, strict=True))
        ]
        # Spread out, the sends wait their turn themselves; at once, 100 go at a time.
        sent_at = list(await asyncio.gather(*sends)) if spread_s else await _bounded(100, sends)
        level.send_retries = h.send_retries - retries_before
        level.sends_queued = h.sends_queued - queued_before
        level.send_ms = h.send_ms[answers_before:]
        level.refused = h.refused[refused_before:]
        level.wall_limit_s = WALL_LIMIT_TURNS * h.unloaded_turn_s + spread_s
        progress = asyncio.create_task(_progress(k, clients, started))
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(c.finished.wait() for c in clients))
        except TimeoutError:
            level.errors.append(f"timeout after {timeout_s:.0f}s")
        finally:
            progress.cancel()
        level.wall_s = time.perf_counter() - started
        await h.meter.stop()
        _stop_profilers(profilers)
        for name in h.meter.names:
            level.cpu[name] = h.meter.cpu_pct(name)
            level.rss[name] = h.meter.peak_rss_mb(name)
        level.system_cpu = h.meter.system_cpu_pct
        await asyncio.sleep(PG_STATS_FLUSH_S)
        rows_after, wal_after = await _pg_counters(h.database_url)
        level.pg_rows, level.wal_bytes = rows_after - pg_before[0], wal_after - pg_before[1]
    finally:
        for client in clients:
            client.close()
    async with httpx.AsyncClient(timeout=60) as fake:
        rows = (await fake.get(f"{h.fake_url}/bench/deltas")).json()
    level.deltas = len(rows)
    _analyse(level, clients, sent_at, rows)
    level.stored = await _stored_latencies(h.database_url, rows)
    level.resets = await _resets(h.database_url, chat_ids)
    level.retried, level.task_timeouts = await _retried_steps(h.temporal_address, chat_ids)
    return level


async def unloaded_turn(h: Harness) -> float:
    """The median of `UNLOADED_TURNS` turns run one at a time, send -> `waiting`, seconds."""
    durations: list[float] = []
    for _ in range(UNLOADED_TURNS):
        level = await run_level(h, 1, timeout_s=60)
        if level.finished != 1:
            raise RuntimeError(f"an unloaded turn did not finish: {level.errors or level.refused}")
        durations.extend(level.durations)
    return statistics.median(durations)


async def _resets(database_url: str, chat_ids: list[str]) -> int:
    """`reset` events in these chats' logs."""
    conn = await asyncpg.connect(database_url)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM chat_events WHERE event = 'reset' AND chat_id = ANY($1::uuid[])",
            chat_ids,
        )
    finally:
        await conn.close()
    return int(count)


async def _pg_counters(database_url: str) -> tuple[int, int]:
    """Rows written in the bench's database (`pg_stat_database`) and WAL bytes written by the
    cluster (`pg_stat_wal`), so far."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetchval(
            "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
        wal = await conn.fetchval("SELECT wal_bytes FROM pg_stat_wal")
    finally:
        await conn.close()
    return int(rows), int(wal)


async def _retried_steps(temporal_address: str, chat_ids: list[str]) -> tuple[Counter[str], int]:
    """Model-step attempts after the first in these chats' turns, by the previous attempt's
    failure (`heartbeat timeout`, or the error's message), and workflow task timeouts by
    kind; and how many workflow tasks timed out."""
    client = await Client.connect(temporal_address)
    task_timeouts = 0

    async def one(chat_id: str) -> Counter[str]:
        nonlocal task_timeouts
        found: Counter[str] = Counter()
        history = await client.get_workflow_handle(f"chat-{chat_id}").fetch_history()
        model_steps: set[int] = set()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                task_timeouts += 1
                kind = event.workflow_task_timed_out_event_attributes.timeout_type
                found[f"workflow task {TimeoutType.Name(kind)[13:].lower()} timeout"] += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == "stream_model_step":
                    model_steps.add(event.event_id)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                if started.attempt > 1 and started.scheduled_event_id in model_steps:
                    failure = started.last_failure
                    if failure.HasField("timeout_failure_info"):
                        kind = TimeoutType.Name(failure.timeout_failure_info.timeout_type)
                        found[f"{kind[13:].lower()} timeout"] += started.attempt - 1
                    else:
                        found[failure.message[:60] or "?"] += started.attempt - 1
        return found

    counts = await _bounded(20, [one(c) for c in chat_ids])
    return sum(counts, Counter[str]()), task_timeouts


async def _stored_latencies(database_url: str, rows: list[list[Any]]) -> list[float]:
    """Emit -> stored, per delta: the worker's share of the latency (the rest is the gateway's)."""
    emitted: dict[str, int] = {text: ns for _model, text, ns in rows}
    conn = await asyncpg.connect(database_url)
    try:
        stored = await _stack.stored_delta_times(conn, emitted)
    finally:
        await conn.close()
    return [(ns - emitted[text]) / 1e6 for text, ns in stored.items()]


def _analyse(
    level: Level,
    clients: list[RawSseClient],
    sent_at: list[float],
    rows: list[list[Any]],
) -> None:
    emitted: dict[str, int] = {text: ns for _model, text, ns in rows}
    deltas = _stack.EmittedDeltas(emitted)
    by_stream: dict[str, list[int]] = {}
    for _model, text, ns in rows:
        by_stream.setdefault(text.split("d", 1)[0], []).append(ns)
    for stamps in by_stream.values():
        stamps.sort()
        level.gaps.extend((b - a) / 1e6 for a, b in itertools.pairwise(stamps))
    wall_anchor_ns = time.time_ns() - int(time.perf_counter() * 1e9)
    matched = 0
    for client, sent in zip(clients, sent_at, strict=True):
        if client.status == "waiting":
            level.finished += 1
            level.durations.append((client.finished_ns - wall_anchor_ns) / 1e9 - sent)
        elif client.status is not None or client.error:
            level.errors.append(client.status or client.error or "?")
        for ns, data in client.parts():
            for piece in deltas.within(data.get("part", {}).get("text") or ""):
                level.latencies.append((ns - emitted[piece]) / 1e6)
                matched += 1
    level.unmatched = len(emitted) - matched


async def _progress(k: int, clients: list[RawSseClient], started: float) -> None:
    while True:
        await asyncio.sleep(5)
        done = sum(1 for c in clients if c.finished.is_set())
        deltas = sum(len(c.frames) for c in clients)
        say(f"K={k}: {done}/{k} turns done, {deltas} deltas received, "
            f"{time.perf_counter() - started:.0f}s")  # fmt: skip


# --- report ----------------------------------------------------------------------------------


def _fmt(value: float, width: int = 6, digits: int = 0) -> str:
    return f"{value:{width}.{digits}f}"


def report(levels: list[Level], names: list[str], args: argparse.Namespace) -> int | None:
    """Print the table; the largest passing K."""
    print(
        f"\n=== {len(levels)} levels: {args.tool_steps + 1}-step turns ({args.tool_steps} x "
        f"current_time, then {args.deltas} deltas {args.spacing_ms:g} ms apart), one worker, "
        "one gateway ==="
    )
    print(
        f"{'K':>5} {'done':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'turn p50 s':>10} "
        f"{'turn max s':>10} {'gap p50':>7} {'gap p99':>7} {'wall s':>7}  result"
    )
    for lv in levels:
        extra = ""
        if lv.send_retries:
            extra += f" ({lv.send_retries} sends retried after a 503)"
        if lv.sends_queued:
            extra += f" ({lv.sends_queued} sends queued by signal)"
        if lv.unmatched < 0:  # a step whose attempt was lost streams again after a `reset`
            extra += f" ({-lv.unmatched} deltas re-streamed after a step retry)"
        if lv.unmatched > 0 or lv.errors:
            extra += f" ({lv.unmatched} unmatched, {len(lv.errors)} errors: {lv.errors[:2]})"
        print(
            f"{lv.k:5d} {lv.finished:4d}/{lv.k:<4d} {_fmt(lv.p50, 8, 1)} {_fmt(lv.p99, 8, 1)} "
            f"{_fmt(max(lv.latencies, default=NAN), 8, 1)} "
            f"{_fmt(statistics.median(lv.durations) if lv.durations else NAN, 10, 2)} "
            f"{_fmt(max(lv.durations, default=NAN), 10, 2)} "
            f"{_fmt(statistics.median(lv.gaps) if lv.gaps else NAN, 7, 1)} "
            f"{_fmt(percentile(lv.gaps, 99) if lv.gaps else NAN, 7, 1)} "
            f"{lv.wall_s:7.1f}  {_verdict(lv)}{extra}"
        )
    print(
        f"\nthe unloaded turn: {levels[0].wall_limit_s / WALL_LIMIT_TURNS:.2f} s "
        f"(a level may take {WALL_LIMIT_TURNS:g}x as long)"
    )
    print(
        f"{'K':>5} {'refused':>7} {'queued':>7} {'202 p50':>8} {'202 p99':>8} {'turns/s':>7} "
        f"{'wall s':>7} {'limit s':>7} {'resets/1k':>9} {'wf task t/o':>11}"
    )
    for lv in levels:
        print(
            f"{lv.k:5d} {len(lv.refused):7d} {lv.sends_queued:7d} "
            f"{_fmt(percentile(lv.send_ms, 50) if lv.send_ms else NAN, 8)} "
            f"{_fmt(percentile(lv.send_ms, 99) if lv.send_ms else NAN, 8)} "
            f"{_fmt(lv.turns_per_s, 7, 1)} {lv.wall_s:7.1f} {lv.wall_limit_s:7.1f} "
            f"{lv.resets_per_1000:9.1f} {lv.task_timeouts:11d}"
        )
    print("\nresets (a streaming step's attempt given up and retried; no worker was killed)")
    for lv in levels:
        why = ", ".join(f"{n} {kind}" for kind, n in lv.retried.most_common()) or "none"
        print(
            f"{lv.k:5d}  {lv.resets} resets = {lv.resets_per_1000:.1f} per 1,000 turns; "
            f"retried: {why}"
        )
    print("\nwhere the delay is: emit -> stored by the worker | stored -> SSE client (the rest)")
    for lv in levels:
        stored_p50 = statistics.median(lv.stored) if lv.stored else NAN
        stored_p99 = percentile(lv.stored, 99) if lv.stored else NAN
        print(
            f"{lv.k:5d}  emit -> stored p50 {stored_p50:6.1f} ms  p99 {stored_p99:6.1f} ms"
            f"  ({len(lv.stored)} rows)"
        )
    cores = os.cpu_count() or 1
    print(f"\nCPU % of one core over each level ({cores} cores = {100 * cores}%) | peak RSS MiB")
    print(f"{'K':>5} " + " ".join(f"{n:>17}" for n in names) + f" {'machine':>8} {'others':>7}")
    for lv in levels:
        cells = " ".join(f"{lv.cpu.get(n, NAN):6.0f}% {lv.rss.get(n, NAN):6.0f}M   " for n in names)
        machine = lv.system_cpu * cores
        others = machine - sum(v for v in lv.cpu.values() if v == v)
        print(f"{lv.k:5d} {cells} {machine:7.0f}% {others:6.0f}%")
    _cost_table(levels, names)
    print(
        "\ngap = time between consecutive deltas of one stream as the fake provider wrote them "
        f"(scripted {args.spacing_ms:g} ms); postgres RSS sums its processes (shared buffers "
        "counted per process); others = machine - the processes above (other work on the "
        "machine, or short-lived processes)."
    )
    passing = [lv.k for lv in levels if lv.passed]
    best = max(passing) if passing else None
    print(f"\nlargest K that passed ({_pass_rule(args)}): {best} (target {args.target_k})")
    return best


def _pass_rule(args: argparse.Namespace) -> str:
    """What a level is held to."""
    speed = (
        f"p99 < {P99_LIMIT_MS:g} ms, <= {RESETS_PER_1000_LIMIT:g} resets per 1,000 turns, "
        f"wall <= {WALL_LIMIT_TURNS:g}x the unloaded turn"
    )
    if args.ignore_speed_targets:
        speed = f"not held to: {speed}"
    return f"every send 202, every turn finished, {speed}"


def _cost_table(levels: list[Level], names: list[str]) -> None:
    """What a streamed delta costs each process, and a turn Postgres."""
    print("\nCPU seconds per 1,000 streamed deltas | Postgres per turn")
    print(
        f"{'K':>5} {'deltas':>7} " + " ".join(f"{n:>13}" for n in names)
        + f" {'rows/turn':>9} {'WAL KiB/turn':>12}"
    )  # fmt: skip
    for lv in levels:
        cells = " ".join(f"{lv.cpu_s_per_1000_deltas(n):13.3f}" for n in names)
        turns = lv.finished or NAN
        print(
            f"{lv.k:5d} {lv.deltas:7d} {cells} {lv.pg_rows / turns:9.1f} "
            f"{lv.wal_bytes / 1024 / turns:12.1f}"
        )


def _verdict(level: Level) -> str:
    return "PASS" if level.passed else f"FAIL ({'; '.join(level.failures)})"


# --- processes -------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int | None:
    """Bring everything up, run the ladder, report."""
    logs = Path(tempfile.mkdtemp(prefix="chatd-concurrency-"))
    levels: list[Level] = []
    async with _stack.services() as svc:
        await migrate(svc.database_url)
        pool = await connect_pool(svc.database_url, min_size=1, max_size=2)
        api_key = await KeyStore(pool).create("bench")
        await _stack.bench_limits(pool)
        await pool.close()
        async with stack_processes(
            svc, logs, args.deltas, args.spacing_ms, args.tool_steps
        ) as procs:
            meter = procs.meter()
            base_url, api_port, fake_url = procs.base_url, procs.api_port, procs.fake_url
            limits = httpx.Limits(
                max_connections=120, max_keepalive_connections=120, keepalive_expiry=2.0
            )  # under uvicorn's 5 s keep-alive: never reuse a connection it is closing
            async with httpx.AsyncClient(
                base_url=base_url,
                headers={"Authorization": f"Bearer {api_key}"},
                timeout=120,
                limits=limits,
            ) as http:
                h = Harness(
                    base_url, "127.0.0.1", api_port, api_key, http, fake_url, meter,
                    svc.database_url, svc.temporal.address,
                )  # fmt: skip
                h.py_spy, h.logs, h.quiet_below = args.py_spy, logs, args.quiet_below
                h.speed_targets = not args.ignore_speed_targets
                if args.py_spy:
                    h.profiles = {
                        "worker": procs.worker.pid or 0,
                        "gateway": procs.gateway.pid or 0,
                    }
                    say(f"py-spy profiles (collapsed stacks) go to {logs}")
                say("worker, gateway and fake provider up")
                h.unloaded_turn_s = await unloaded_turn(h)
                say(f"the unloaded turn: {h.unloaded_turn_s:.2f} s")
                for k in args.ladder:
                    level = await run_level(h, k, args.turn_timeout)
                    levels.append(level)
                    say(
                        f"K={k}: {level.finished}/{k} finished, p50 {level.p50:.1f} ms, "
                        f"p99 {level.p99:.1f} ms, wall {level.wall_s:.1f}s, "
                        f"{level.send_retries} sends retried after a 503, "
                        f"{level.sends_queued} queued by signal, send -> 202 p50 "
                        f"{percentile(level.send_ms, 50):.0f} / p99 "
                        f"{percentile(level.send_ms, 99):.0f} ms, "
                        f"{level.resets} resets, {len(level.refused)} refused, "
                        f"{level.turns_per_s:.1f} turns/s -> {_verdict(level)}"
                    )
                    if not level.passed and not args.keep_going:
                        break
                    await asyncio.sleep(2)  # let runs close and Temporal settle
                names = meter.names
    return report(levels, names, args) if levels else None


@dataclass
class StackProcesses:
    """The fake provider, a gateway and a worker, each in a process of its own."""

    fake: ChildProcess
    gateway: ChildProcess
    worker: WorkerProcess
    svc: _stack.Services
    fake_url: str
    api_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}/api/v1"

    def meter(self) -> ProcessMeter:
        """A meter of these processes, the servers' and this one's."""
        meter = ProcessMeter()
        meter.add("worker", self.worker.pid)
        meter.add("gateway", self.gateway.pid)
        meter.add("postgres", self.svc.postgres.pid, children=True)
        meter.add("temporal", self.svc.temporal.pid, children=True)
        meter.add("fake provider", self.fake.pid)
        meter.add("bench (SSE)", os.getpid())
        return meter


@contextlib.asynccontextmanager
async def stack_processes(
    svc: _stack.Services, logs: Path, deltas: int, spacing_ms: float, tool_steps: int = 2
) -> AsyncIterator[StackProcesses]:
    """Start the fake provider (`Script` with these steps), a gateway and a worker on a task
    queue of their own; wait until each serves; stop them on the way out."""
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    fake_port, api_port = free_port(), free_port()
    fake = ChildProcess(
        [sys.executable, __file__, "--serve-fake", str(fake_port),
         "--deltas", str(deltas), "--spacing-ms", str(spacing_ms),
         "--tool-steps", str(tool_steps)],
        log=logs / "fake.log",
    )  # fmt: skip
    fake_url = f"http://127.0.0.1:{fake_port}"
    gateway = _stack.gateway_process(
        database_url=svc.database_url,
        temporal_address=svc.temporal.address,
        task_queue=task_queue,
        port=api_port,
        log=logs / "gateway.log",
    )
    worker = WorkerProcess(
        database_url=svc.database_url,
        temporal_address=svc.temporal.address,
        task_queue=task_queue,
        fake=svc.fake,
        workspace=logs / "workspaces",
        log=logs / "worker.log",
        tools=None,
        env={"ANTHROPIC_BASE_URL": fake_url},
    )
    say(f"logs in {logs}")
    try:
        fake.start()
        gateway.start()
        worker.start()
        await fake.wait_http(f"{fake_url}/health")
        await gateway.wait_http(f"http://127.0.0.1:{api_port}/healthz")
        await worker_polling(worker)
        yield StackProcesses(fake, gateway, worker, svc, fake_url, api_port)
    finally:
        for proc in (worker, gateway, fake):
            await asyncio.to_thread(proc.stop)


async def _wait_quiet(below_pct: float, within_s: float = 120.0) -> None:
    """Wait (up to `within_s`) until the machine is idle: other work skews the figures."""
    if below_pct <= 0:
        return
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        busy = await asyncio.to_thread(psutil.cpu_percent, 2.0)
        if busy < below_pct:
            return
        say(f"machine busy ({busy:.0f}% of all cores) with other work; waiting")
    say("machine still busy; measuring anyway (see the `others` column)")


def _start_profilers(h: Harness, k: int) -> list[subprocess.Popen[bytes]]:
    """`py-spy record` (raw collapsed stacks, until SIGINT) on each profiled process."""
    if not h.py_spy:
        return []
    procs: list[subprocess.Popen[bytes]] = []
    for name, pid in h.profiles.items():
        out = h.logs / f"py-spy-{name}-K{k}.txt"
        argv = [h.py_spy, "record", "-p", str(pid), "-f", "raw", "-r", "50", "--nonblocking"]
        procs.append(
            subprocess.Popen(
                [*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
    return procs


def _stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for proc in profilers:
        proc.send_signal(signal.SIGINT)
    for proc in profilers:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def worker_polling(worker: WorkerProcess, within_s: float = 60.0) -> None:
    async with asyncio.timeout(within_s):
        while "worker polling task queue" not in worker.log.read_text(errors="replace"):
            if not worker.running:
                raise RuntimeError(f"worker exited during startup; see {worker.log}")
            await asyncio.sleep(0.1)


def main() -> None:
    """Parse options; run the ladder, or serve the fake provider (`--serve-fake`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--ladder",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[25, 50, 100, 200, 300, 500, 700, 1000],
        help="comma-separated K values (default 25,50,100,200,300,500,700,1000)",
    )
    parser.add_argument("--deltas", type=int, default=100, help="deltas in step 3")
    parser.add_argument("--spacing-ms", type=float, default=20.0, help="between deltas")
    parser.add_argument(
        "--tool-steps", type=int, default=2, help="steps calling current_time before the deltas"
    )
    parser.add_argument("--turn-timeout", type=float, default=300.0, help="per level, seconds")
    parser.add_argument("--target-k", type=int, default=TARGET_K)
    parser.add_argument("--keep-going", action="store_true", help="don't stop at a failure")
    parser.add_argument(
        "--quiet-below",
        type=float,
        default=25.0,
        help="before each level, wait until the machine's CPU is below this %% (0: don't)",
    )
    parser.add_argument("--py-spy", metavar="BIN", help="profile worker and gateway with py-spy")
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="a level passes when every send is answered 202 and every turn finishes: its p99, "
        "resets and wall time are reported, not held to their limits (a smoke run on a busy "
        "machine)",
    )
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        script = Script(args.deltas, args.spacing_ms / 1000, args.tool_steps)
        _stack.serve_fake_provider(script, args.serve_fake)
        return
    best = asyncio.run(run(args))
    sys.exit(0 if best is not None and best >= args.target_k else 1)


if __name__ == "__main__":
    main()
