"""Every benchmark in bench/ runs once, at a tiny size, so none breaks unnoticed.

Each script (every `bench/*.py` not starting with `_`; those are its helpers) runs as a user
runs it, `python bench/<script>.py <tiny args>` in a subprocess, bringing up its own stack
(PostgreSQL, Temporal, workers, `chatd dev`...) in a temp dir of its own. It must exit 0
and print its report: the lines `prints` names, so a script that runs and reports nothing
fails too. Speed targets are not held here (`--ignore-speed-targets`, on a shared machine);
a script's correctness checks (lost or duplicated messages, unfinished turns...) still set
its exit status.

A script in bench/ without an entry in `SMOKE_RUNS` fails its test: a new benchmark comes
with its tiny run. Each run takes seconds; see bench/README.md (Smoke runs).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
RUN_TIMEOUT_S = 200.0
"""Past this a run is stopped (SIGINT, so it tears its stack down), under pytest's 300 s."""
STOP_WITHIN_S = 40.0
"""After the SIGINT: then SIGKILL to the run's process group."""


@dataclass(frozen=True)
class SmokeRun:
    """One tiny run of a script: its arguments and what its output must show."""

    args: tuple[str, ...]
    prints: tuple[str, ...]
    """Regular expressions, each matching a line of the output (stdout and stderr)."""
    variant: str = ""
    """Names a second run of the same script (another mode of it)."""


SMOKE_RUNS: dict[str, list[SmokeRun]] = {
    "abuse": [
        SmokeRun(
            ("--chats", "2", "--connections", "2", "--rounds", "1", "--deltas", "5",
             "--spacing-ms", "5", "--solo-s", "1", "--spread-s", "0", "--turn-timeout", "60",
             "--abuser-requests-per-s", "5", "--ignore-speed-targets"),
            (r"^without the abuser +2/2 ", r"^with the abuser +2/2 ",
             r"^  with a CPU stand-in +\d+\.\d$",  # the one round's p99
             r"^p99 ratio \(with / without\): \d", r"^ +\d+ +429 ", r"^PASS$"),
        )
    ],
    "chaos": [
        SmokeRun(
            ("--turns", "4", "--concurrency", "2", "--seed", "1", "--kill-every", "0.5-1",
             "--ignore-speed-targets"),
            (r"^finished \(waiting\) 4/4$", r"^exact transcripts  4/4$",
             r"^lost messages +0$", r"^duplicate messages 0$", r"^PASS$"),
        ),
        SmokeRun(
            ("--faults", "--turns", "4", "--concurrency", "4", "--seed", "1",
             "--kill-every", "1-2", "--deadline", "3", "--reconcile-grace", "2",
             "--reconcile-interval", "1", "--ignore-speed-targets"),
            (r"^chats +4 in ", r"^by plan:$", r"^stuck chats +0 ", r"^lost messages +0 ",
             r"^duplicated +0 ", r"^PASS$"),
            variant="faults",
        ),
    ],
    "chat_reads": [
        SmokeRun(
            ("--requests", "20", "--rounds", "1", "--queued", "3", "--chats", "3"),
            (r"GET /chats/\{id\} \(3 queued\): \d+ B, before and after: same bytes$",
             r"GET /chats \(3 chats\): \d+ B, before and after: same bytes$",
             r"^=== CPU per request", r"^GET /chats \(3 chats\) +median +\d+ -> +\d+"),
        )
    ],
    "concurrency": [
        SmokeRun(
            ("--ladder", "2", "--deltas", "5", "--spacing-ms", "5", "--tool-steps", "1",
             "--turn-timeout", "60", "--quiet-below", "0", "--target-k", "2",
             "--ignore-speed-targets"),
            (r"^=== 1 levels: 2-step turns \(1 x current_time, then 5 deltas",
             r"^ +2 +2/2 ", r"^largest K that passed \(.*\): 2 \(target 2\)$"),
        )
    ],
    "first_delta": [
        SmokeRun(
            ("--turns", "2", "--deltas", "5", "--spacing-ms", "5", "--warmup", "0",
             "--ignore-speed-targets"),
            (r"^emit -> SSE client \(worker, Postgres, gateway\) : p50 .*n=10\)$",
             r"^unmatched deltas: 0$", r"^targets: p50 "),
        )
    ],
    "interrupt_latency": [
        SmokeRun(
            ("--turns", "1", "--warmup", "0"),
            (r"^--- announced \(as deployed\)$", r"^--- heartbeat only \(baseline\)$",
             r"^POST /interrupt -> status waiting at the client +: p50 ",
             r"^deltas the client saw but the persisted step lacks: 0 "),
        )
    ],
    "long_chat": [
        SmokeRun(
            ("--turns", "6", "--context-limit", "4000", "--reply-tokens", "200",
             "--user-tokens", "200"),
            (r"^compactions: [1-9]", r"^checks: context BOUNDED, history FLAT$"),
        )
    ],
    "responses_first_delta": [
        SmokeRun(
            ("--rounds", "1", "--warmup", "0", "--runs", "1", "--settle-ms", "0",
             "--ignore-speed-targets"),
            (r"^ +1 +\d+\.\d +\d+\.\d +\d+\.\d +\d+\.\d$",
             r"^/v1 within 5 ms of native at p50 in every run: (PASS|FAIL)$"),
        )
    ],
    "provider_streams": [
        SmokeRun(
            ("--streams", "2", "--deltas", "5", "--spacing-ms", "5", "--rounds", "1"),
            (r"^=== CPU per delta in this process", r"^anthropic +\d+\.\d ",
             r"^openai-responses +\d+\.\d ", r"^google +\d+\.\d ",
             r"^floor \(asyncio\) +\d+\.\d "),
        )
    ],
    "resume_timeline": [
        SmokeRun(
            ("--kills", "1",),
            (r"^seconds from the SIGKILL:$", r"\(median\)$", r"^last beat -> timeout seen: "),
        )
    ],
    "stateless_conversation": [
        SmokeRun(
            ("--turns", "7", "--window", "3", "--runs", "1"),
            (r"run 1 +resent: .* 1 chat\(s\): flat$", r"run 1 +codex: .* 1 chat\(s\): flat$",
             r"^WAL and rows per call flat \(last 3 within .*\): PASS$"),
        )
    ],
    "turn_overhead": [
        SmokeRun(
            ("--turns", "2", "--warmup", "1", "--store-runs", "1", "--store-settle-s", "2",
             "--ignore-speed-targets"),
            (r"^turn  POST -> status waiting at SSE client +: p50 .*n=2\)$",
             r"^  CreateWorkflowExecution ", r"^ +10 messages: +\d+ B/step protobuf",
             r"^targets: ratio (MET|MISSED), history FLAT$"),
        ),
        SmokeRun(
            ("--external", "--turns", "1", "--warmup", "0", "--runs", "1",
             "--ignore-speed-targets"),
            (r"^=== turn overhead, external \(chatd dev, run 1\): fresh chats ===$",
             r"^  fresh chats: median ratio \d",
             r"^  one chat: median ratio \d\.\d\d of 1 runs; against the floor on one id \d"),
            variant="external",
        ),
    ],
}  # fmt: skip
"""Per script (its file name without `.py`), its tiny runs."""


def _scripts() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def _cases() -> list[object]:
    """A case per tiny run; one per script that has none, and per entry without a script,
    both of which fail."""
    cases: list[object] = []
    for script in sorted({*_scripts(), *SMOKE_RUNS}):
        runs: list[SmokeRun | None] = [*SMOKE_RUNS.get(script, [None])]
        for run in runs:
            name = f"{script}-{run.variant}" if run is not None and run.variant else script
            cases.append(pytest.param(script, run, id=name))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("script", "run"), _cases())
def test_bench_script_runs_at_a_tiny_size(
    script: str, run: SmokeRun | None, tmp_path: Path
) -> None:
    path = BENCH / f"{script}.py"
    if run is None:
        pytest.fail(f"bench/{script}.py has no smoke run: add its tiny arguments to SMOKE_RUNS")
    if not path.exists():
        pytest.fail(f"SMOKE_RUNS names {script}, but bench/{script}.py does not exist")
    command = [sys.executable, str(path), *run.args]
    started = time.monotonic()
    # Not under tmp_path: PostgreSQL's socket goes in the run's temp dir, and its path must
    # stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="chatd-smoke-") as tmp:
        code, output = _run(command, Path(tmp))
    took = time.monotonic() - started
    (tmp_path / "output.log").write_text(output)
    shown = f"$ {' '.join(command[1:])}\n(exit {code} after {took:.0f} s)\n{_tail(output)}"
    assert code == 0, shown
    missing = [p for p in run.prints if not re.search(p, output, re.MULTILINE)]
    assert not missing, f"the output lacks lines matching {missing}\n{shown}"


def _run(command: list[str], tmp: Path) -> tuple[int | None, str]:
    """Run `command` from the repo root, its temp files under `tmp`; (exit status, output).

    On timeout the run gets a SIGINT, so that it stops the servers it started, then its
    process group a SIGKILL; the status is then None."""
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        return None, f"{output}\n(stopped: still running after {RUN_TIMEOUT_S:.0f} s)"


def _tail(output: str, lines: int = 80) -> str:
    return "\n".join(output.splitlines()[-lines:])
