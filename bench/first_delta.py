"""Delta latency: the fake provider emits a text delta -> an SSE client receives it.

    python bench/first_delta.py [--turns 20] [--deltas 50] [--spacing-ms 20] [--warmup 2]

Every delta's text is unique (`t<turn>d<delta>|`), so deltas are matched by text; both ends
are stamped with `time.time_ns()` (the fake provider when it writes the delta, the SSE client
when it parses the frame). Interleaved with the turns, same run, same servers, the floor: the
same provider adapter (`make_provider(...).stream_step`) reading an identical stream from the
fake server directly, stamping each `PartDelta` the same way.

The turns run through the in-process stack of `_stack.running_stack` (worker, gateway, SSE
client and fake provider share this process, as in `turn_overhead.py`). The path of a delta:
fake provider -> provider adapter in the model-step activity -> `DeltaPublisher` -> one
Postgres transaction (event rows + NOTIFY) -> the gateway's LISTEN connection -> the SSE
generator's `read_page` query -> the client. The event rows' `created_at` (the publishing
transaction's start) splits it in two: emit -> publish transaction began, and -> client.

Targets: p50 < 10 ms and p99 < 50 ms (emit -> SSE client), and no unmatched delta. Exits 1
when one is missed (`--ignore-speed-targets`: only for an unmatched delta).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
import uuid
from dataclasses import dataclass, field

import _stack
from _stack import BenchStack, SseEvent, say, summary

from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest
from chatd.settings import ProviderSettings

TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0


@dataclass
class Latencies:
    """Milliseconds per matched delta, by measurement."""

    gateway: list[float] = field(default_factory=list)
    """Emit -> SSE client, through the whole stack."""
    to_publish: list[float] = field(default_factory=list)
    """Emit -> the publishing transaction began (event row `created_at`)."""
    publish_to_client: list[float] = field(default_factory=list)
    """Publishing transaction began -> SSE client."""
    direct: list[float] = field(default_factory=list)
    """Floor: emit -> the provider adapter yields the delta, no Temporal, no Postgres."""
    unmatched: int = 0


class UniqueDeltas:
    """A responder streaming `deltas` unique deltas, `spacing_s` apart, per request."""

    def __init__(self, tag: str, deltas: int, spacing_s: float) -> None:
        self._tag = tag
        self._deltas = deltas
        self._spacing_s = spacing_s
        self._counter = itertools.count()

    def __call__(self, _request: FakeRequest) -> FakeResponse:
        """The next request's stream: one text part, one delta per token."""
        n = next(self._counter)
        tokens = [f"{self._tag}{n:04d}d{i:04d}|" for i in range(self._deltas)]
        return FakeResponse(
            parts=[FakeText(text="".join(tokens), chunk_size=len(tokens[0]))],
            delta_delay_s=self._spacing_s,
        )


def _emitted(stack: BenchStack, model: str, since: int) -> dict[str, int]:
    """Text -> emission time of the deltas the fake streamed for `model` after index `since`."""
    return {d.text: d.emitted_ns for d in stack.services.fake.deltas(model)[since:]}


async def one_turn(
    stack: BenchStack, sse: _stack.SseListener, chat_id: str, model: str
) -> tuple[list[SseEvent], int]:
    """Send a message, collect the message_part events until `waiting`; (events, deltas before)."""
    since = len(stack.services.fake.deltas(model))
    sse.drain()
    await stack.send(chat_id, "Stream me something.")
    parts: list[SseEvent] = []
    while True:
        event = await sse.until(lambda _e: True, within_s=60)
        if event.event == "message_part":
            parts.append(event)
        elif event.event == "status" and event.data.get("status") in ("waiting", "error"):
            break
    handle = stack.temporal.get_workflow_handle(f"chat-{chat_id}")
    await handle.result()  # the run is closed before the next turn (not timed)
    return parts, since


async def direct_stream(settings: ProviderSettings, model: str) -> dict[str, int]:
    """Floor: stream from the fake with the provider adapter; text -> receive time (ns)."""
    config = ModelConfig(provider="anthropic", name=model)
    request = ModelRequest(
        model=config, messages=[Message(role="user", parts=[TextPart(text="Stream me.")])]
    )
    received: dict[str, int] = {}
    async for event in make_provider(config, settings).stream_step(request):
        if isinstance(event, PartDelta) and event.text:
            received[event.text] = time.time_ns()
    return received


async def measure(stack: BenchStack, args: argparse.Namespace) -> Latencies:
    """Warm-up, then N rounds of (turn through the stack, direct stream)."""
    fake = stack.services.fake
    suffix = uuid.uuid4().hex[:6]
    turn_model, direct_model = f"bench-fd-turn-{suffix}", f"bench-fd-direct-{suffix}"
    spacing = args.spacing_ms / 1000
    fake.script(turn_model, UniqueDeltas("t", args.deltas, spacing))
    fake.script(direct_model, UniqueDeltas("f", args.deltas, spacing))
    settings = fake.provider_settings()
    # Titled: no title request, whose stream (the same model) would mix with the turn's deltas.
    chat_id = await stack.create_chat(
        title="bench", model={"provider": "anthropic", "name": turn_model}
    )
    result = Latencies()
    async with stack.listen(chat_id) as sse:
        for i in range(args.warmup + args.turns):
            parts, since = await one_turn(stack, sse, chat_id, turn_model)
            emitted = _emitted(stack, turn_model, since)
            published = await _stack.stored_delta_times(stack.pool, emitted)
            d_since = len(fake.deltas(direct_model))
            received = await direct_stream(settings, direct_model)
            d_emitted = _emitted(stack, direct_model, d_since)
            turn_ms: list[float] = []
            deltas = _stack.EmittedDeltas(emitted)
            for event in parts:
                text = event.data.get("part", {}).get("text") or ""
                for piece in deltas.within(text):
                    turn_ms.append((event.at_ns - emitted[piece]) / 1e6)
                    if i >= args.warmup and piece in published:
                        result.to_publish.append((published[piece] - emitted[piece]) / 1e6)
                        result.publish_to_client.append((event.at_ns - published[piece]) / 1e6)
            direct_ms = [(received[t] - ns) / 1e6 for t, ns in d_emitted.items() if t in received]
            missing = len(emitted) - len(turn_ms) + len(d_emitted) - len(direct_ms)
            tag = "warm-up" if i < args.warmup else f"turn {i - args.warmup + 1:3d}/{args.turns}"
            say(
                f"{tag}: {len(turn_ms)}/{len(emitted)} deltas, emit->SSE median "
                f"{_median(turn_ms):5.1f} max {max(turn_ms, default=0):5.1f} ms | direct median "
                f"{_median(direct_ms):5.1f} max {max(direct_ms, default=0):5.1f} ms"
            )
            if i < args.warmup:
                continue
            result.gateway.extend(turn_ms)
            result.direct.extend(direct_ms)
            result.unmatched += missing
    return result


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else float("nan")


def report(lat: Latencies, args: argparse.Namespace) -> bool:
    """Print the table; whether both targets are met."""
    p50 = _stack.percentile(lat.gateway, 50) if lat.gateway else float("inf")
    p99 = _stack.percentile(lat.gateway, 99) if lat.gateway else float("inf")
    print(
        f"\n=== delta latency, fake provider emit -> receiver ({args.turns} turns x "
        f"{args.deltas} deltas, {args.spacing_ms:g} ms apart) ==="
    )
    print(f"emit -> SSE client (worker, Postgres, gateway) : {summary(lat.gateway)}")
    print(f"  emit -> publish transaction began            : {summary(lat.to_publish)}")
    print(f"  publish transaction began -> SSE client      : {summary(lat.publish_to_client)}")
    print(f"floor: emit -> provider adapter, direct        : {summary(lat.direct)}")
    print(f"unmatched deltas: {lat.unmatched}")
    fast = p50 < TARGET_P50_MS and p99 < TARGET_P99_MS
    ok = (fast or args.ignore_speed_targets) and lat.unmatched == 0
    print(
        f"\ntargets: p50 {p50:.1f} ms (< {TARGET_P50_MS:g}) "
        f"{'MET' if p50 < TARGET_P50_MS else 'MISSED'}, p99 {p99:.1f} ms "
        f"(< {TARGET_P99_MS:g}) {'MET' if p99 < TARGET_P99_MS else 'MISSED'}"
    )
    return ok


async def run(args: argparse.Namespace) -> bool:
    """Bring the stack up, measure, report, tear down."""
    async with _stack.services() as svc, _stack.running_stack(svc) as stack:
        say(f"stack up; {args.warmup} warm-up turns, then {args.turns} measured turns")
        latencies = await measure(stack, args)
    return report(latencies, args)


def main() -> None:
    """Parse options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns (default 20)")
    parser.add_argument("--deltas", type=int, default=50, help="deltas per turn (default 50)")
    parser.add_argument("--spacing-ms", type=float, default=20.0, help="between deltas")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured turns first")
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="report the p50/p99 targets without failing on them (a smoke run on a busy "
        "machine); unmatched deltas still fail",
    )
    args = parser.parse_args()
    sys.exit(0 if asyncio.run(run(args)) else 1)


if __name__ == "__main__":
    main()
