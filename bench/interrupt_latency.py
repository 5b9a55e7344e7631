"""How fast does an interrupt stop a streaming turn? Run from the repo root:

    python bench/interrupt_latency.py [--turns 30] [--warmup 2] [--seed 1]

Each turn streams 500 unique text deltas 20 ms apart (10 s) to an SSE client connected
beforehand. When the client has received 5 to 40 delta events (drawn per turn, so the interrupt
falls at every phase of the heartbeat interval), it POSTs `/interrupt` and measures,
from that POST: the last delta the fake provider emitted (the stream's cancellation reached
the provider connection), the last delta the client received, and `status: waiting` at the
client (the partial step and its interrupted results persisted, the turn finished). It also
checks that the persisted step holds every delta the client saw.

The interrupt travels: gateway -> `interrupt` signal -> a workflow task cancels the stream
activity -> the server hands the cancellation to the worker with the response to the
activity's next heartbeat (a streaming step beats every 1 s: `LIVENESS_EVERY_S`) -> the
activity persists what it has and returns -> the workflow finishes the turn. After the signal the
gateway also announces the interrupt (NOTIFY `chatd_interrupts`), and a worker listening
stops the step at once. Both are measured in one run, side by side: "announced" (as
deployed), then "heartbeat only" (the worker doesn't listen), the same seed for both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import uuid
from dataclasses import dataclass, field

import _stack
from _stack import BenchStack, SseEvent, say, summary
from first_delta import UniqueDeltas

DELTAS = 500
SPACING_S = 0.02
INTERRUPT_AFTER = (5, 40)
"""The interrupt comes after this many delta events (inclusive range, drawn per turn); the
worker merges the deltas of one 25 ms frame, so an event holds one or two of the fake's."""


@dataclass
class Stops:
    """Milliseconds from the interrupt POST, per turn."""

    provider_stopped: list[float] = field(default_factory=list)
    """-> the last delta the fake provider emitted."""
    client_last_delta: list[float] = field(default_factory=list)
    """-> the last delta the SSE client received."""
    waiting: list[float] = field(default_factory=list)
    """-> `status: waiting` at the SSE client."""
    lost: int = 0
    """Deltas the client saw that the persisted step does not hold (must be 0)."""


def _is_final(event: SseEvent) -> bool:
    return event.event == "status" and event.data.get("status") in ("waiting", "error")


async def one_turn(
    stack: BenchStack, sse: _stack.SseListener, chat_id: str, model: str, after: int
) -> tuple[float, float, float, int]:
    """Stream, interrupt after `after` deltas; (provider, client, waiting) ms and deltas lost."""
    fake = stack.services.fake
    since = len(fake.deltas(model))
    sse.drain()
    await stack.send(chat_id, "Stream me something long.")
    seen: list[SseEvent] = []
    while len(seen) < after:
        event = await sse.until(lambda e: e.event == "message_part", within_s=60)
        seen.append(event)
    interrupted_ns = time.time_ns()
    response = await stack.http.post(f"/chats/{chat_id}/interrupt")
    response.raise_for_status()
    while True:
        event = await sse.until(lambda _e: True, within_s=60)
        if event.event == "message_part":
            seen.append(event)
        elif _is_final(event):
            break
    waiting_ns = event.at_ns
    emitted = fake.deltas(model)[since:]
    await stack.temporal.get_workflow_handle(f"chat-{chat_id}").result()
    persisted = await _persisted_text(stack, chat_id)
    texts = [e.data.get("part", {}).get("text") or "" for e in seen]
    lost = sum(1 for t in texts if t and t not in persisted)
    return (
        (emitted[-1].emitted_ns - interrupted_ns) / 1e6,
        (seen[-1].at_ns - interrupted_ns) / 1e6,
        (waiting_ns - interrupted_ns) / 1e6,
        lost,
    )


async def _persisted_text(stack: BenchStack, chat_id: str) -> str:
    """The text of the chat's last assistant message, as persisted."""
    parts = await stack.pool.fetchval(
        "SELECT parts FROM messages WHERE chat_id = $1 AND role = 'assistant'"
        " ORDER BY id DESC LIMIT 1",
        uuid.UUID(chat_id),
    )
    return "".join(p.get("text", "") for p in parts or [])


async def measure(stack: BenchStack, args: argparse.Namespace) -> Stops:
    """Warm-up, then N interrupted turns in one chat."""
    model = f"bench-interrupt-{uuid.uuid4().hex[:6]}"
    stack.services.fake.script(model, UniqueDeltas("i", DELTAS, SPACING_S))
    # Titled: a title request would get the same 10 s stream, whose deltas would pass for the
    # turn's, and whose activity would hold up the worker's shutdown.
    chat_id = await stack.create_chat(title="bench", model={"provider": "anthropic", "name": model})
    stops = Stops()
    rng = random.Random(args.seed)
    async with stack.listen(chat_id) as sse:
        for i in range(args.warmup + args.turns):
            after = rng.randint(*INTERRUPT_AFTER)
            provider, client, waiting, lost = await one_turn(stack, sse, chat_id, model, after)
            tag = "warm-up" if i < args.warmup else f"turn {i - args.warmup + 1:3d}/{args.turns}"
            say(
                f"{tag}: provider stopped {provider:6.1f} ms, last delta at client "
                f"{client:6.1f} ms, waiting {waiting:6.1f} ms after the interrupt; lost {lost}"
            )
            if i < args.warmup:
                continue
            stops.provider_stopped.append(provider)
            stops.client_last_delta.append(client)
            stops.waiting.append(waiting)
            stops.lost += lost
    return stops


def report(runs: dict[str, Stops], args: argparse.Namespace) -> bool:
    """Print the table per mode; whether nothing the client saw was lost."""
    print(
        f"\n=== interrupt latency: {args.turns} turns per mode, interrupted after "
        f"{INTERRUPT_AFTER[0]}-{INTERRUPT_AFTER[1]} of {DELTAS} deltas "
        f"({SPACING_S * 1000:g} ms apart) ==="
    )
    for mode, stops in runs.items():
        print(f"--- {mode}")
        print(
            f"POST /interrupt -> provider emits its last delta : {summary(stops.provider_stopped)}"
        )
        print(
            f"POST /interrupt -> last delta at the SSE client  : {summary(stops.client_last_delta)}"
        )
        print(f"POST /interrupt -> status waiting at the client  : {summary(stops.waiting)}")
        print(f"deltas the client saw but the persisted step lacks: {stops.lost} (must be 0)")
    return all(stops.lost == 0 for stops in runs.values())


MODES = {"announced (as deployed)": True, "heartbeat only (baseline)": False}
"""Each mode's `announced_interrupts`."""


async def run(args: argparse.Namespace) -> bool:
    """Bring the services up; per mode, a stack: measure, tear down; then report."""
    runs: dict[str, Stops] = {}
    async with _stack.services() as svc:
        for mode, announced in MODES.items():
            async with _stack.running_stack(svc, announced_interrupts=announced) as stack:
                say(f"{mode}: {args.warmup} warm-up turns, then {args.turns} measured turns")
                runs[mode] = await measure(stack, args)
    return report(runs, args)


def main() -> None:
    """Parse options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="for the interrupt points")
    args = parser.parse_args()
    sys.exit(0 if asyncio.run(run(args)) else 1)


if __name__ == "__main__":
    main()
