"""Where a resume's time goes: SIGKILL a worker mid-stream and time each stage. Run from the
repo root:

    python bench/resume_timeline.py [--kills 10]

The rig of chaos.py (`_chaos_rig`: two `chatd worker` processes, the gateway in this
process), one chat at a time, so each stage can be read off Temporal's own
records. Each round: a step streams 300 deltas 100 ms apart; once the client has seen
deltas for 2-3 s, the worker running the step (the pending activity's worker identity) is
SIGKILLed (kill k waits 0.1 k s longer, so the kills fall at every phase of the 1 s beat);
the workflow is described every 20 ms until the step's next attempt has started.
Printed per kill, in seconds from the kill:

- last beat: the step's last heartbeat as the server recorded it (negative: before the kill);
- timed out: the describe that first showed attempt 2 (the heartbeat timeout fired);
- retry due: attempt 2's scheduled time (timeout + the retry policy's interval);
- started: attempt 2's start (a worker polled it);
- reset / delta: the retried attempt's `reset` and first delta at the SSE client.

The killed worker is started again before the next round.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from _chaos_rig import Rig, chaos_rig, polling
from _stack import SseListener, say
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowHandle

from chatd.fake_provider.script import FakeResponse, FakeText

MODEL = "resume-model"
TEXT = "".join(f"w{i:04d} " for i in range(300))
"""300 deltas of 6 characters, 100 ms apart: 30 s of streaming."""


@dataclass
class Round:
    """One kill's timeline, seconds from the kill."""

    last_beat: float
    timed_out: float
    retry_due: float
    started: float
    reset: float
    delta: float


def _since(stamp: Timestamp, kill_wall: float) -> float:
    return stamp.ToNanoseconds() / 1e9 - kill_wall


async def _pending(handle: WorkflowHandle[object, object]) -> PendingActivityInfo | None:
    described = await handle.describe()
    steps = [
        a
        for a in described.raw_description.pending_activities
        if a.activity_type.name == "stream_model_step"
    ]
    return steps[0] if steps else None


async def one_round(rig: Rig, client: Client, index: int) -> Round:
    """Start a chat, kill its step's worker mid-stream, time the resume."""
    async with rig.http(1) as http:
        created = await http.post(
            "/chats", json={"model": {"provider": "anthropic", "name": MODEL}}
        )
        created.raise_for_status()
        chat_id = str(created.json()["id"])
        async with SseListener(http, chat_id) as listener:
            sent = await http.post(f"/chats/{chat_id}/messages", json={"content": f"go {index}"})
            sent.raise_for_status()
            await listener.until(lambda e: e.event == "message_part", within_s=60)
            await asyncio.sleep(2.0 + (index % 10) / 10)
            handle = client.get_workflow_handle(f"chat-{chat_id}")
            before = await _pending(handle)
            assert before is not None, "the step is not running"
            victim = next(
                i for i, w in enumerate(rig.workers) if f"{w.pid}@" in before.last_worker_identity
            )
            kill_at, kill_wall = time.perf_counter(), datetime.now(UTC).timestamp()
            rig.workers[victim].signal(signal.SIGKILL)
            timed_out = await _attempt_two(handle, kill_at)
            started = await _started(handle)
            reset = await listener.until(lambda e: e.event == "reset", within_s=30)
            delta = await listener.until(lambda e: e.event == "message_part", within_s=30)
    worker = rig.workers[victim]
    await asyncio.to_thread(worker.wait, 10.0)
    polled = worker.log.read_text(errors="replace").count("worker polling task queue")
    worker.start()
    await polling(worker, polled)
    return Round(
        last_beat=_since(started.last_heartbeat_time, kill_wall),
        timed_out=timed_out,
        retry_due=_since(started.scheduled_time, kill_wall),
        started=_since(started.last_started_time, kill_wall),
        reset=reset.at - kill_at,
        delta=delta.at - kill_at,
    )


async def _attempt_two(handle: WorkflowHandle[object, object], kill_at: float) -> float:
    """Seconds from the kill to the first describe showing the step's second attempt."""
    async with asyncio.timeout(30):
        while True:
            pending = await _pending(handle)
            if pending is not None and pending.attempt >= 2:
                return time.perf_counter() - kill_at
            await asyncio.sleep(0.02)


async def _started(handle: WorkflowHandle[object, object]) -> PendingActivityInfo:
    """The step's pending activity once its second attempt has started."""
    async with asyncio.timeout(30):
        while True:
            pending = await _pending(handle)
            if pending is not None and pending.HasField("last_started_time"):
                return pending
            await asyncio.sleep(0.02)


def report(rounds: list[Round]) -> None:
    """One line per kill, then the medians."""
    names = ["last beat", "timed out", "retry due", "started", "reset", "delta"]
    print("\nseconds from the SIGKILL:")
    print(" ".join(f"{n:>10}" for n in names))
    for r in rounds:
        values = [r.last_beat, r.timed_out, r.retry_due, r.started, r.reset, r.delta]
        print(" ".join(f"{v:10.2f}" for v in values))
    columns = list(zip(*[[r.last_beat, r.timed_out, r.retry_due, r.started, r.reset, r.delta]
                         for r in rounds], strict=True))  # fmt: skip
    print(" ".join(f"{statistics.median(c):10.2f}" for c in columns) + "  (median)")
    gaps = [r.timed_out - r.last_beat for r in rounds]
    print(f"\nlast beat -> timeout seen: median {statistics.median(gaps):.2f}s; "
          f"timeout -> started: median "
          f"{statistics.median([r.started - r.timed_out for r in rounds]):.2f}s")  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    """Bring up the rig, run the rounds, report."""
    async with chaos_rig() as rig:
        rig.fake.script(
            MODEL,
            lambda _request: FakeResponse(
                parts=[FakeText(text=TEXT, chunk_size=6)], delta_delay_s=0.1
            ),
        )
        client = await Client.connect(rig.temporal_address)
        rounds = []
        for index in range(args.kills):
            rounds.append(await one_round(rig, client, index))
            say(f"kill {index + 1}: reset {rounds[-1].reset:.2f}s after it")
        report(rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
