"""What a turn and the floor ask of the stores: Temporal persistence operations (from the
dev server's Prometheus metrics: how many, and the time they took) and Postgres write
transactions, per run.

Each kind of run goes alone, one after the other, and the counters are read after the
server's queues settle (visibility and transfer tasks run after a workflow task), so the
count holds what a run causes, asynchronous work included. The same wait with nothing
running is counted too and taken off (the server's own background work).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx

__all__ = ["PersistenceCounts", "count_persistence", "print_breakdown"]

SETTLE_S = 3.0
"""After the runs: the server's queues are empty, and its metrics exported (the counters
lag by up to a second or two), well within this."""
_SERIES = re.compile(
    r"^(visibility_)?persistence_(requests|latency_sum)\{([^}]*)\}\s+(\S+)$", re.MULTILINE
)
_OPERATION = re.compile(r'operation="([^"]+)"')
_MS = " ms"

PersistenceCounts = dict[str, float]
"""Operation -> count per run, `<operation> ms` -> its time per run (Temporal), and
`postgres writes` (write transactions)."""


async def _scrape(metrics_url: str) -> Counter[str]:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(metrics_url)).text
    totals: Counter[str] = Counter()
    for visibility, series, labels, value in _SERIES.findall(text):
        operation = _OPERATION.search(labels)
        if operation:
            name = f"{'visibility ' if visibility else ''}{operation.group(1)}"
            if series == "requests":
                totals[name] += round(float(value))
            else:  # seconds, kept in microseconds (a Counter of ints)
                totals[name + _MS] += round(float(value) * 1e6)
    return totals


async def _during(
    metrics_url: str,
    next_xid: Callable[[], Awaitable[int]],
    work: Callable[[], Awaitable[None]],
    settle_s: float,
) -> Counter[str]:
    before, xid = await _scrape(metrics_url), await next_xid()
    await work()
    await asyncio.sleep(settle_s)
    counts = await _scrape(metrics_url) - before
    counts["postgres writes"] = await next_xid() - xid
    return counts


async def count_persistence(
    metrics_url: str,
    next_xid: Callable[[], Awaitable[int]],
    runs: dict[str, Callable[[], Awaitable[None]]],
    n: int,
    settle_s: float = SETTLE_S,
) -> dict[str, PersistenceCounts]:
    """For each named run: `n` of them alone, then per-run counts (idle background taken off).

    Each batch is read `settle_s` after it ran (shorter than `SETTLE_S`: counts that miss
    the batch's asynchronous work, for a smoke run)."""
    await asyncio.sleep(settle_s)  # what ran before settles (and its metrics are exported)
    idle = await _during(metrics_url, next_xid, lambda: asyncio.sleep(0), settle_s)
    found: dict[str, PersistenceCounts] = {}
    for name, run in runs.items():

        async def repeat(run: Callable[[], Awaitable[None]] = run) -> None:
            for _ in range(n):
                await run()

        counts = await _during(metrics_url, next_xid, repeat, settle_s)
        counts.subtract(idle)
        found[name] = {
            op: c / n / (1000 if op.endswith(_MS) else 1) for op, c in counts.items() if c > 0
        }
    return found


def print_breakdown(found: dict[str, PersistenceCounts]) -> None:
    """One line per operation: per run of each kind, how many and the time they took."""
    if not found:
        return
    names = list(found)
    operations = sorted({op for counts in found.values() for op in counts if not _is_ms(op)})
    header = "  ".join(f"{name + ': n, ms':>16s}" for name in names)
    print(f"\nstore operations per run (alone, async work included): {header}")
    for op in operations:
        cells = "  ".join(
            f"{found[name].get(op, 0.0):6.1f} {found[name].get(op + _MS, 0.0):9.2f}"
            for name in names
        )
        print(f"  {op:53s} {cells}")
    totals = "  ".join(
        f"{sum(v for op, v in found[name].items() if _is_ms(op)):16.2f}" for name in names
    )
    print(f"  {'Temporal persistence, ms in all':53s} {totals}")


def _is_ms(op: str) -> bool:
    return op.endswith(_MS)
