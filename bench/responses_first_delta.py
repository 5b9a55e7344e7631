"""POST -> first text delta through Open Responses (`/v1/responses`, `stream: true`) against the
native API (`POST /chats/{id}/messages`, the chat's SSE stream connected first), side by side.

`chatd dev` runs as a subprocess, its worker's `anthropic` provider pointed at a fake provider
in a child process that answers at once; the clients are this process, on kept-alive
connections. Each round measures, in alternating order, a native chat's first two turns and
a `/v1` response with its continuation, each pair the same conversation shape:

- native, first: a chat created (untitled, as a `/v1` chat is) and its stream connected
  before the clock starts; the clock runs from the POST of the message to the first
  `message_part` on the stream;
- native, next: the same chat's second message, sent as its first turn has ended;
- `/v1`, new: the clock runs from the POST (which creates the chat) to the first
  `response.output_text.delta` of its own stream;
- `/v1`, continued: the same for a response continuing it with `previous_response_id`,
  sent as the first has completed.

Each timed POST waits `--settle-ms` (100) first, so every shape starts from a quiet stack: a
POST sent the moment the previous turn ended shares the gateway, the worker and Postgres with
that turn's tail (its workflow closing, its title's model call), and the shapes that follow
another shape's end (`/v1` new, both "next" shapes) would pay for it where the native first
message, preceded by its chat's creation and stream, does not.

Pass rule: each `/v1` p50 is within 5 ms of its native counterpart's p50 of the same run
(exit status 1 otherwise, unless `--ignore-speed-targets`).

    python bench/responses_first_delta.py [--rounds 40] [--runs 3] [--settle-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _chatd_dev import FAKE_MODEL, ChatdDev, chatd_dev
from _stack import SseListener, percentile, say
from _timed_fake import serve_timed_fake

REPLY = "Hello from the fake provider, answering at once."
V1_MODEL = f"{FAKE_MODEL['provider']}/{FAKE_MODEL['name']}"
LIMIT_MS = 5.0


async def _native(
    http: httpx.AsyncClient, streams: httpx.AsyncClient, settle: float
) -> tuple[float, float]:
    """POST a new chat's first message, then its second -> each one's first delta on the
    chat's stream (connected first), in ms."""
    created = await http.post("/api/v1/chats", json={"model": FAKE_MODEL})
    chat_id = created.json()["id"]
    async with SseListener(streams, chat_id) as sse:
        first = await _native_turn(http, sse, chat_id, settle)
        following = await _native_turn(http, sse, chat_id, settle)
    return first, following


async def _native_turn(
    http: httpx.AsyncClient, sse: SseListener, chat_id: str, settle: float
) -> float:
    await asyncio.sleep(settle)
    started = time.perf_counter()
    sent = await http.post(f"/api/v1/chats/{chat_id}/messages", json={"content": "hi"})
    if sent.status_code != 202:
        raise RuntimeError(f"send answered {sent.status_code}: {sent.text}")
    first = await sse.until(lambda e: e.event == "message_part")
    elapsed = (first.at - started) * 1000
    await sse.until(lambda e: e.event == "status" and e.data["status"] == "waiting")
    return elapsed


async def _v1(http: httpx.AsyncClient, previous: str | None, settle: float) -> tuple[float, str]:
    """POST a streamed response -> its first text delta, in ms; and the response's id."""
    body: dict[str, Any] = {"model": V1_MODEL, "input": "hi", "stream": True}
    if previous is not None:
        body["previous_response_id"] = previous
    await asyncio.sleep(settle)
    started = time.perf_counter()
    first: float | None = None
    response_id = ""
    async with http.stream("POST", "/v1/responses", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"/v1 answered {response.status_code}: {await response.aread()}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line.removeprefix("data: "))
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            if event["type"] == "response.output_text.delta" and first is None:
                first = (time.perf_counter() - started) * 1000
    if first is None:
        raise RuntimeError("the /v1 stream had no text delta")
    return first, response_id


_PAIRS = (("v1_new", "native"), ("v1_continued", "native_next"))
"""Each `/v1` shape and the native one it is held to."""


async def _run(
    run: int, rounds: int, warmup: int, settle: float, fake_command: list[str]
) -> dict[str, float]:
    async with chatd_dev(fake_command) as dev:
        samples = await _measure(dev, rounds, warmup, settle)
    p50 = {shape: percentile(values, 50) for shape, values in samples.items()}
    p90 = {shape: percentile(values, 90) for shape, values in samples.items()}
    say(
        f"run {run}: POST -> first delta p50 (p90): native {p50['native']:.1f}"
        f" ({p90['native']:.1f}), /v1 new chat {p50['v1_new']:.1f} ({p90['v1_new']:.1f});"
        f" native next {p50['native_next']:.1f} ({p90['native_next']:.1f}),"
        f" /v1 continued {p50['v1_continued']:.1f} ({p90['v1_continued']:.1f}) ms"
        f" ({rounds} rounds, {settle * 1000:.0f} ms settle)"
    )
    return p50


async def _measure(
    dev: ChatdDev, rounds: int, warmup: int, settle: float
) -> dict[str, list[float]]:
    root = dev.api_url.removesuffix("/api/v1")
    headers = {"Authorization": f"Bearer {dev.api_key}"}
    shapes = ("native", "native_next", "v1_new", "v1_continued")
    samples: dict[str, list[float]] = {shape: [] for shape in shapes}
    async with (
        httpx.AsyncClient(base_url=root, headers=headers, timeout=60) as http,
        httpx.AsyncClient(base_url=f"{root}/api/v1", headers=headers, timeout=60) as streams,
    ):
        for index in range(warmup + rounds):
            if index % 2:
                native, native_next = await _native(http, streams, settle)
                new, response_id = await _v1(http, None, settle)
                continued, _ = await _v1(http, response_id, settle)
            else:
                new, response_id = await _v1(http, None, settle)
                continued, _ = await _v1(http, response_id, settle)
                native, native_next = await _native(http, streams, settle)
            if index >= warmup:
                for shape, value in zip(shapes, (native, native_next, new, continued), strict=True):
                    samples[shape].append(value)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--settle-ms", type=float, default=100.0, help="the quiet before each timed POST"
    )
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="report the pass rule without failing on it (a smoke run on a busy machine)",
    )
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_timed_fake(args.serve_fake, REPLY)
        return 0
    fake_command = [sys.executable, str(Path(__file__).resolve()), "--serve-fake"]
    results = [
        asyncio.run(_run(run, args.rounds, args.warmup, args.settle_ms / 1000, fake_command))
        for run in range(1, args.runs + 1)
    ]
    print("\nrun  native p50  /v1 new p50  native next p50  /v1 continued p50  (ms)")
    passed = True
    for run, p50 in enumerate(results, 1):
        print(
            f"{run:>3}  {p50['native']:>10.1f}  {p50['v1_new']:>11.1f}"
            f"  {p50['native_next']:>15.1f}  {p50['v1_continued']:>17.1f}"
        )
        passed &= all(abs(p50[v1] - p50[native]) <= LIMIT_MS for v1, native in _PAIRS)
    verdict = "PASS" if passed else "FAIL"
    print(f"\n/v1 within {LIMIT_MS:.0f} ms of native at p50 in every run: {verdict}")
    return 0 if passed or args.ignore_speed_targets else 1


if __name__ == "__main__":
    sys.exit(main())
