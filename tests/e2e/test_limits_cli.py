"""`chatd limits show|set`: an owner's quotas, as every gateway then enforces them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from harness import Stack


async def _limits(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "chatd.cli", "limits", *args],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
    )


def _shown(output: str) -> dict[str, tuple[str, str]]:
    """`name value (source)` lines as {name: (value, source)}."""
    rows = [line.split() for line in output.splitlines() if line.endswith(")")]
    return {name: (value, source.strip("()")) for name, value, source in rows}


async def test_limits_set_by_the_command_are_enforced_and_shown(
    stack: Stack, database_url: str
) -> None:
    done = await _limits(database_url, "set", "alice", "--requests-per-s", "0.01")
    assert done.returncode == 0, done.stderr
    done = await _limits(database_url, "set", "alice", "--request-burst", "2")
    assert done.returncode == 0, done.stderr
    shown = _shown(done.stdout)
    assert shown["requests_per_s"] == ("0.01", "own"), "a later set keeps the earlier values"
    assert shown["request_burst"] == ("2", "own")
    assert shown["running_turns"] == ("100", "default")
    assert shown["input_tokens_per_day"] == ("none", "default")
    answers = [(await stack.http.get("/chats")).status_code for _ in range(3)]
    assert answers == [200, 200, 429]

    done = await _limits(database_url, "set", "alice", "--request-burst", "default")
    assert _shown(done.stdout)["request_burst"] == ("100", "default")
    done = await _limits(database_url, "set", "*", "--running-turns", "7")
    assert done.returncode == 0, done.stderr
    shown = _shown((await _limits(database_url, "show", "bob")).stdout)
    assert shown["running_turns"] == ("7", "default")


async def test_a_bad_limit_is_refused_with_a_message(database_url: str) -> None:
    done = await _limits(database_url, "set", "alice", "--running-turns", "-1")
    assert done.returncode == 2 and "negative" in done.stderr
    done = await _limits(database_url, "set", "alice", "--streams", "many")
    assert done.returncode == 2 and "not a number" in done.stderr
    done = await _limits(database_url, "set", "alice")
    assert done.returncode == 1 and "name a limit" in done.stderr
