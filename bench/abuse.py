"""One abusive key beside well-behaved chats: do the quotas keep the others' streams fast?

    python bench/abuse.py [--chats 100] [--connections 50] [--rounds 3] [--deltas 100]
                          [--spacing-ms 20] [--tool-steps 0] [--solo-s 10]

Processes: PostgreSQL and the Temporal dev server (`_stack.services()`), one `chatd worker`,
one `chatd api` gateway, the fake provider in its own process (as `bench/concurrency.py`
runs them), and the abuser in a process of its own (this script with `--abuser`).

The abuser holds one key under the product's default limits (`BUILT_IN_LIMITS`, set as the
database's defaults; `--abuser-requests-per-s` lowers its request rate). It first opens
streams on its chat until one is refused, holding the ones it got; then `--connections`
connections send requests as fast as they can, turn about `POST /chats/{id}/messages` and
`GET /chats/{id}`. The well-behaved tenant is another owner whose limits are raised to fit
its `--chats` chats, each with a stream.

In one run, on the same servers, `--rounds` times in turn:
1. `--chats` turns (`concurrency.run_level`: `--tool-steps` steps calling `current_time`,
   then `--deltas` text deltas `--spacing-ms` apart) with nobody else on the gateway;
2. (first round only) the abuser alone for `--solo-s` seconds: the gateway's CPU per
   request of the abuser's;
3. the same turns again with the abuser running.

Target: the p99 delta latency (fake provider's write -> SSE client) with the abuser, over
all rounds, is at most 2x that without; every turn finishes; the abuser got 429s (on
requests and on streams). Exit status 1 otherwise (`--ignore-speed-targets`, for a smoke run
on a busy machine: the ratio is reported, not held to its target).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _stack
import concurrency
import httpx
import psutil  # type: ignore[import-untyped]
from _stack import ChildProcess, say

from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore
from chatd.store.quotas import BUILT_IN_LIMITS, DEFAULTS_OWNER, LimitOverrides, QuotaStore

TARGET_RATIO = 2.0
GOOD_OWNER = "well-behaved"
ABUSER_OWNER = "abuser"


# --- the abuser (runs in its own process) -----------------------------------------------------


async def abuse(
    base_url: str, key: str, chat_id: str, connections: int, snapshots: Path
) -> dict[str, object]:
    """Open streams until refused, then flood until SIGTERM; the tallies. SIGUSR1 writes the
    tallies so far to `snapshots`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    headers = {"Authorization": f"Bearer {key}"}
    tally: collections.Counter[str] = collections.Counter()
    loop.add_signal_handler(signal.SIGUSR1, lambda: _write_whole(snapshots, tally))
    streams = await _open_streams(base_url, headers, chat_id, tally)
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=30
    ) as http:

        async def flood(worker: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    if n % 2:
                        response = await http.post(
                            f"/chats/{chat_id}/messages", json={"content": f"spam {worker} {n}"}
                        )
                    else:
                        response = await http.get(f"/chats/{chat_id}")
                except httpx.HTTPError as err:
                    tally[f"transport {type(err).__name__}"] += 1
                    continue
                tally[_outcome(response)] += 1

        started = time.perf_counter()
        flooders = [asyncio.create_task(flood(i)) for i in range(connections)]
        await stop.wait()
        for task in flooders:
            task.cancel()
        await asyncio.gather(*flooders, return_exceptions=True)
        elapsed = time.perf_counter() - started
    for stream in streams:
        await stream.aclose()
    return {"tally": tally, "streams_held": len(streams), "flood_s": elapsed}


async def _open_streams(
    base_url: str, headers: dict[str, str], chat_id: str, tally: collections.Counter[str]
) -> list[httpx.AsyncClient]:
    """Streams on the chat, opened one by one until the gateway refuses one (each on its own
    client, kept open)."""
    held: list[httpx.AsyncClient] = []
    while len(held) < 10_000:
        client = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=None)
        request = client.build_request("GET", f"/chats/{chat_id}/stream")
        response = await client.send(request, stream=True)
        if response.status_code != 200:
            await response.aread()
            tally[f"stream {_outcome(response)}"] += 1
            await response.aclose()
            await client.aclose()
            break
        tally["stream 200"] += 1
        held.append(client)
    say(f"abuser: holding {len(held)} streams")
    return held


def burn(share: float, period_s: float = 0.01) -> None:
    """Keep `share` of one core busy, until killed: the abuser's CPU, without its requests."""
    while True:
        busy_until = time.perf_counter() + share * period_s
        while time.perf_counter() < busy_until:
            pass
        time.sleep((1 - share) * period_s)


def _write_whole(path: Path, tally: collections.Counter[str]) -> None:
    """Write the tallies so that a reader never sees half of them."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(tally))
    partial.replace(path)


def _outcome(response: httpx.Response) -> str:
    if response.status_code < 400:
        return str(response.status_code)
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return f"{response.status_code} {response.json()['error']['code']}"
    return str(response.status_code)


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Solo:
    """The abuser alone: what the gateway spent on it."""

    requests: int
    refused: int
    seconds: float
    gateway_cpu_s: float

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.gateway_cpu_s / self.requests if self.requests else float("nan")


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def run(args: argparse.Namespace) -> int:
    """Bring everything up, measure the three phases, report; the exit status."""
    logs = Path(tempfile.mkdtemp(prefix="chatd-abuse-"))
    async with _stack.services() as svc:
        await migrate(svc.database_url)
        pool = await connect_pool(svc.database_url, min_size=1, max_size=2)
        quotas = QuotaStore(pool)
        await quotas.set_limits(DEFAULTS_OWNER, LimitOverrides(**BUILT_IN_LIMITS.model_dump()))
        if args.abuser_requests_per_s is not None:
            rate = args.abuser_requests_per_s
            await quotas.set_limits(
                ABUSER_OWNER,
                LimitOverrides(requests_per_s=rate, request_burst=max(1, round(2 * rate))),
            )
        roomy = 10 * args.chats
        await quotas.set_limits(
            GOOD_OWNER,
            LimitOverrides(
                requests_per_s=roomy,
                request_burst=roomy,
                running_turns=roomy,
                streams=roomy,
                streams_per_chat=roomy,
            ),
        )
        good_key = await KeyStore(pool).create(GOOD_OWNER)
        abuser_key = await KeyStore(pool).create(ABUSER_OWNER)
        await pool.close()
        rounds_without: list[concurrency.Level] = []
        rounds_with: list[concurrency.Level] = []
        rounds_stand_in: list[concurrency.Level] = []
        floods: list[dict[str, Any]] = []
        solo: Solo | None = None
        async with concurrency.stack_processes(
            svc, logs, args.deltas, args.spacing_ms, args.tool_steps
        ) as procs:
            meter = procs.meter()
            base_url, gateway = procs.base_url, procs.gateway
            limits = httpx.Limits(
                max_connections=120, max_keepalive_connections=120, keepalive_expiry=2.0
            )
            async with httpx.AsyncClient(
                base_url=base_url,
                headers={"Authorization": f"Bearer {good_key}"},
                timeout=120,
                limits=limits,
            ) as http:
                h = concurrency.Harness(
                    base_url, "127.0.0.1", procs.api_port, good_key, http, procs.fake_url,
                    meter, svc.database_url, svc.temporal.address,
                )  # fmt: skip
                h.logs = logs
                abuser_chat = await _abusers_chat(base_url, abuser_key)
                for round_no in range(1, args.rounds + 1):
                    say(f"round {round_no}: {args.chats} chats without the abuser")
                    rounds_without.append(await _turns(h, args))
                    tallies = logs / f"abuser-{round_no}.json"
                    abuser = ChildProcess(
                        [sys.executable, __file__, "--abuser", base_url, abuser_key,
                         abuser_chat, str(args.connections), str(tallies)],
                        log=logs / f"abuser-{round_no}.log",
                    )  # fmt: skip
                    try:
                        abuser.start()
                        meter.add("abuser", abuser.pid)
                        await _until_flooding(abuser)
                        if solo is None:
                            solo = await _alone(abuser, tallies, gateway.pid or 0, args.solo_s)
                        say(f"round {round_no}: {args.chats} chats with the abuser")
                        rounds_with.append(await _turns(h, args))
                    finally:
                        await asyncio.to_thread(abuser.stop)
                    floods.append(json.loads(tallies.read_text()))
                    await asyncio.sleep(2)  # let the abuser's streams and turns settle
                    share = rounds_with[-1].cpu.get("abuser", 0.0) / 100
                    say(f"round {round_no}: {args.chats} chats beside a stand-in ({share:.0%})")
                    stand_in = ChildProcess(
                        [sys.executable, __file__, "--burn", str(share)],
                        log=logs / f"stand-in-{round_no}.log",
                    )
                    try:
                        stand_in.start()
                        meter.add("stand-in", stand_in.pid)
                        rounds_stand_in.append(await _turns(h, args))
                    finally:
                        await asyncio.to_thread(stand_in.stop)
    assert solo is not None
    rounds = {
        "without the abuser": rounds_without,
        "with the abuser": rounds_with,
        "with a CPU stand-in": rounds_stand_in,
    }
    return report(args, rounds, floods, solo)


async def _turns(h: concurrency.Harness, args: argparse.Namespace) -> concurrency.Level:
    """The well-behaved chats' turns, their sends spread over `--spread-s`."""
    return await concurrency.run_level(h, args.chats, args.turn_timeout, args.spread_s)


async def _alone(abuser: ChildProcess, tallies: Path, gateway_pid: int, seconds: float) -> Solo:
    """The abuser's requests and the gateway's CPU over `seconds` of the abuser alone."""
    first = await asyncio.to_thread(_snapshot, abuser, tallies)
    cpu_first, started = _cpu_s(gateway_pid), time.time()
    await asyncio.sleep(seconds)
    last = await asyncio.to_thread(_snapshot, abuser, tallies)
    cpu_last, ended = _cpu_s(gateway_pid), time.time()
    flood = [w for w in last if not w.startswith("stream")]
    solo = Solo(
        requests=sum(last[w] - first.get(w, 0) for w in flood),
        refused=sum(last[w] - first.get(w, 0) for w in flood if w.startswith("429")),
        seconds=ended - started,
        gateway_cpu_s=cpu_last - cpu_first,
    )
    say(f"the abuser alone: {solo.requests / solo.seconds:.0f} requests/s, gateway "
        f"{100 * solo.gateway_cpu_s / solo.seconds:.0f}% CPU")  # fmt: skip
    return solo


def _snapshot(abuser: ChildProcess, tallies: Path) -> dict[str, int]:
    """The abuser's tallies so far (it writes them on SIGUSR1); blocks for a moment."""
    snapshot = Path(f"{tallies}.snapshot")
    snapshot.unlink(missing_ok=True)
    assert abuser.process is not None
    abuser.process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not snapshot.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the abuser wrote no tallies; see {abuser.log}")
        time.sleep(0.01)
    counts: dict[str, int] = json.loads(snapshot.read_text())
    return counts


def _pooled(levels: list[concurrency.Level]) -> concurrency.Level:
    """The rounds of one condition as one level: every delta's latency, mean CPU."""
    pooled = concurrency.Level(sum(level.k for level in levels))
    pooled.finished = sum(level.finished for level in levels)
    pooled.latencies = [x for level in levels for x in level.latencies]
    for name in dict.fromkeys(n for level in levels for n in level.cpu):  # the meter's order
        pooled.cpu[name] = statistics.mean(level.cpu.get(name, 0.0) for level in levels)
    pooled.system_cpu = statistics.mean(level.system_cpu for level in levels)
    return pooled


async def _abusers_chat(base_url: str, key: str) -> str:
    async with httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        response = await http.post("/chats", json={"model": {"provider": "anthropic"}})
        response.raise_for_status()
        return str(response.json()["id"])


async def _until_flooding(abuser: ChildProcess, within_s: float = 120.0) -> None:
    """Wait until the abuser holds its streams and floods (and a second more, at full speed)."""
    async with asyncio.timeout(within_s):
        while "abuser: holding" not in abuser.log.read_text(errors="replace"):
            if abuser.pid is None:
                raise RuntimeError(f"the abuser exited; see {abuser.log}")
            await asyncio.sleep(0.1)
    await asyncio.sleep(1)


def report(
    args: argparse.Namespace,
    rounds: dict[str, list[concurrency.Level]],
    floods: list[dict[str, Any]],
    solo: Solo,
) -> int:
    """Print the figures (each condition's rounds pooled, and each round's p99); the exit
    status."""
    levels = {name: _pooled(of_condition) for name, of_condition in rounds.items()}
    tally: collections.Counter[str] = collections.Counter()
    for flood in floods:
        tally.update(flood["tally"])
    without, with_abuser = levels["without the abuser"], levels["with the abuser"]
    stand_in = levels["with a CPU stand-in"]
    ratio = with_abuser.p99 / without.p99
    print(
        f"\n=== {args.chats} well-behaved chats, with and without one abusive key "
        f"({args.rounds} rounds of each, alternating) ==="
    )
    names = [*dict.fromkeys(n for level in levels.values() for n in level.cpu), "machine"]
    cores = os.cpu_count() or 1
    for level in levels.values():
        level.cpu["machine"] = level.system_cpu * cores
    cpu_header = " ".join(f"{n:>9}" for n in names)
    print(f"{'':20} {'done':>9} {'p50 ms':>8} {'p99 ms':>8}   CPU % of a core: {cpu_header}")
    for name, level in levels.items():
        cpu = " ".join(f"{level.cpu.get(n, float('nan')):8.0f}%" for n in names)
        print(
            f"{name:20} {level.finished:4d}/{level.k:<4d} {level.p50:8.1f} {level.p99:8.1f}"
            f"{'':20}{cpu}"
        )
    print(
        "(the stand-in burns the CPU the abuser's process used and sends nothing: what the"
        " abuser costs by sharing the machine, apart from what it asks of the servers)"
    )
    print("\np99 ms of each round (one round's stall shows here, pooled above):")
    for name, of_condition in rounds.items():
        print(f"  {name:20} " + "  ".join(f"{level.p99:7.1f}" for level in of_condition))
    print(
        f"\np99 ratio (with / with the stand-in): {with_abuser.p99 / stand_in.p99:.2f}; "
        f"(with the stand-in / without): {stand_in.p99 / without.p99:.2f}"
    )
    print(f"\np99 ratio (with / without): {ratio:.2f} (target <= {TARGET_RATIO:g})")
    flood_s = sum(flood["flood_s"] for flood in floods)
    print(f"\nthe abuser ({args.connections} connections, {flood_s:.0f} s of flood in all):")
    for what, n in tally.most_common():
        print(f"  {n:8d}  {what}")
    print(f"  streams held per round: {[flood['streams_held'] for flood in floods]}")
    print(
        f"\nthe abuser alone ({solo.seconds:.0f} s): {solo.requests / solo.seconds:.0f} "
        f"requests/s, {solo.refused / max(solo.requests, 1):.0%} of them refused; the gateway "
        f"spent {100 * solo.gateway_cpu_s / solo.seconds:.0f}% of a core on them and the "
        f"abuser's streams: {solo.us_per_request:.0f} us of CPU per request"
    )
    got_429s = any(w.startswith("429") for w in tally) and any(
        w.startswith("stream 429") for w in tally
    )
    finished = all(level.finished == level.k for level in levels.values())
    passed = (ratio <= TARGET_RATIO or args.ignore_speed_targets) and got_429s and finished
    print(f"\n{'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


def main() -> None:
    """Parse options; run the bench, or be the abuser (`--abuser`) or the fake provider."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=100, help="well-behaved chats")
    parser.add_argument("--connections", type=int, default=50, help="the abuser's connections")
    parser.add_argument("--deltas", type=int, default=100, help="deltas a turn streams")
    parser.add_argument(
        "--tool-steps", type=int, default=0, help="steps calling current_time before the deltas"
    )
    parser.add_argument("--spacing-ms", type=float, default=20.0, help="between deltas")
    parser.add_argument("--solo-s", type=float, default=10.0, help="the abuser alone, seconds")
    parser.add_argument(
        "--spread-s", type=float, default=30.0, help="the well-behaved sends spread over this"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both conditions")
    parser.add_argument(
        "--abuser-requests-per-s",
        type=float,
        help="the abuser's request rate limit, its burst twice that (default: the product's,"
        f" {BUILT_IN_LIMITS.requests_per_s:g}/s): low in a smoke run, so a slow machine's"
        " abuser is refused too",
    )
    parser.add_argument("--turn-timeout", type=float, default=300.0, help="per phase, seconds")
    parser.add_argument(
        "--ignore-speed-targets",
        action="store_true",
        help="report the p99 ratio without failing on it (a smoke run on a busy machine); "
        "unfinished turns and missing 429s still fail",
    )
    parser.add_argument("--abuser", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--burn", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.burn is not None:
        burn(args.burn)
        return
    if args.abuser:
        base_url, key, chat_id, connections, out = args.abuser
        snapshots = Path(f"{out}.snapshot")
        tallies = asyncio.run(abuse(base_url, key, chat_id, int(connections), snapshots))
        Path(out).write_text(json.dumps(tallies))
        return
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
