"""What a call costs Postgres as a conversation grows, when the client resends the whole
conversation with every request (LangChain, pydantic-ai, LlamaIndex, Codex do), beside a
client that chains with `previous_response_id` and one whose resent conversation matches no
stored one (its first message differs each call, so each call is a new chat holding the
whole history: the cost the prefix matching saves), and a Codex-shaped session (`store:
false`, a developer message, `prompt_cache_key`, `include` of encrypted reasoning, resent
whole: its hidden chat is continued), side by side in one run.

`chatd dev` runs as a subprocess with a fake provider that answers at once; this process is
the client. Each mode holds one conversation of `--turns` calls, one user message each,
the three modes' calls taking turns. Around each call (from the POST to the response's end,
then `--settle-ms` for the turn's tail) the bench reads the WAL bytes written (the WAL
insert position) and the rows added to the tables a turn writes (messages, events,
responses, queued messages, conversation prefixes). Other work on the stack (the
reconciler's passes) lands in both modes alike.

Pass rule, per run: every call completes, the resent, chained and Codex conversations each
stay in one chat, and for each of them the median WAL bytes and rows of the last ten calls
are within 1.3x of those of calls 2-11 (flat: no O(history) writes). `--window N` compares
the last N calls with calls 2 to N+1 instead (a smoke run's few calls).

    python bench/stateless_conversation.py [--turns 50] [--runs 3] [--settle-ms 150] [--window 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from _chatd_dev import FAKE_MODEL, ChatdDev, chatd_dev
from _stack import say
from _timed_fake import serve_timed_fake

REPLY = "A short answer from the fake provider."
MODEL = f"{FAKE_MODEL['provider']}/{FAKE_MODEL['name']}"
FLAT = 1.3
_COUNTERS = """
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint AS wal,
       (SELECT count(*) FROM messages) + (SELECT count(*) FROM chat_events)
       + (SELECT count(*) FROM responses) + (SELECT count(*) FROM queued_messages)
       + (SELECT count(*) FROM conversation_prefixes) AS rows
"""
"""The WAL position (exact, where the statistics views lag by up to a second) and the rows of
the tables a turn writes to."""


class Conversation:
    """One client's conversation: resent whole each call, or chained by response id."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.items: list[dict[str, Any]] = []
        self.previous: str | None = None
        self.costs: list[tuple[int, int]] = []
        self.chats: set[str] = set()

    def body(self, turn: int) -> dict[str, Any]:
        message = {"role": "user", "content": f"question {turn}: what next?"}
        if self.mode == "codex" and not self.items:
            self.items.append({"role": "developer", "content": "You are a coding agent."})
        self.items.append(message)
        if self.mode == "resent":
            return {"model": MODEL, "input": self.items}
        if self.mode == "codex":
            return {
                "model": MODEL,
                "input": self.items,
                "store": False,
                "prompt_cache_key": "bench-session",
                "include": ["reasoning.encrypted_content"],
                "parallel_tool_calls": True,
            }
        if self.mode == "unmatched":  # its first message differs each call: no prefix is known
            first = {"role": "user", "content": f"call {turn}: {self.items[0]['content']}"}
            return {"model": MODEL, "input": [first, *self.items[1:]]}
        body: dict[str, Any] = {"model": MODEL, "input": [message]}
        if self.previous:
            body["previous_response_id"] = self.previous
        return body

    def took(self, response: dict[str, Any]) -> None:
        self.previous = response["id"]
        self.items += response["output"]
        self.chats.add(response["conversation"]["id"])
        if self.mode == "unmatched":
            self.chats = {"one conversation, a new chat per call by design"}


async def _call(
    http: httpx.AsyncClient, db: asyncpg.Connection, talk: Conversation, turn: int, settle: float
) -> None:
    before = await db.fetchrow(_COUNTERS)
    answered = await http.post("/v1/responses", json=talk.body(turn))
    response = answered.json()
    if answered.status_code != 200 or response.get("status") != "completed":
        raise RuntimeError(f"{talk.mode} call {turn}: {answered.status_code} {answered.text}")
    talk.took(response)
    await asyncio.sleep(settle)
    after = await db.fetchrow(_COUNTERS)
    talk.costs.append((after["wal"] - before["wal"], after["rows"] - before["rows"]))


def _ratio(costs: list[tuple[int, int]], field: int, window: int) -> tuple[float, float, float]:
    """Medians of calls 2 to `window` + 1 and of the last `window` calls: a call's window may
    also hold a periodic pass of the workers' reconciler."""
    early = statistics.median(c[field] for c in costs[1 : window + 1])
    late = statistics.median(c[field] for c in costs[-window:])
    return early, late, late / early if early else float("inf")


async def _run(run: int, turns: int, settle: float, window: int, fake_command: list[str]) -> bool:
    async with chatd_dev(fake_command) as dev:
        talks = await _measure(dev, turns, settle)
    passed = True
    for talk in talks:
        wal = _ratio(talk.costs, 0, window)
        rows = _ratio(talk.costs, 1, window)
        flat = wal[2] <= FLAT and rows[2] <= FLAT and len(talk.chats) == 1
        if talk.mode != "unmatched":  # the cost the matching saves: it grows
            passed &= flat
        say(
            f"run {run} {talk.mode:>8}: WAL/call {wal[0] / 1024:.1f} KiB (calls 2-{window + 1})"
            f" -> {wal[1] / 1024:.1f} KiB (last {window}) x{wal[2]:.2f}; rows/call {rows[0]:.1f} ->"
            f" {rows[1]:.1f} x{rows[2]:.2f}, {len(talk.chats)} chat(s):"
            f" {'flat' if flat else 'GROWS'}"
        )
    return passed


async def _measure(dev: ChatdDev, turns: int, settle: float) -> list[Conversation]:
    root = dev.api_url.removesuffix("/api/v1")
    headers = {"Authorization": f"Bearer {dev.api_key}"}
    talks = [Conversation(mode) for mode in ("resent", "chained", "unmatched", "codex")]
    db = await asyncpg.connect(dev.postgres_dsn)
    try:
        async with httpx.AsyncClient(base_url=root, headers=headers, timeout=120) as http:
            for turn in range(turns):
                for talk in talks[turn % 4 :] + talks[: turn % 4]:
                    await _call(http, db, talk, turn, settle)
    finally:
        await db.close()
    return talks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle-ms", type=float, default=150.0)
    parser.add_argument(
        "--window",
        type=int,
        default=10,
        help="the last N calls against calls 2 to N+1 (default 10; --turns at least 2N+1)",
    )
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_timed_fake(args.serve_fake, REPLY)
        return 0
    if args.window < 1 or args.turns < 2 * args.window + 1:
        parser.error(
            f"--turns must be at least {2 * args.window + 1} "
            f"(calls 2-{args.window + 1} against the last {args.window})"
        )
    fake_command = [sys.executable, str(Path(__file__).resolve()), "--serve-fake"]
    results = [
        asyncio.run(_run(run, args.turns, args.settle_ms / 1000, args.window, fake_command))
        for run in range(1, args.runs + 1)
    ]
    verdict = "PASS" if all(results) else "FAIL"
    print(
        f"\nWAL and rows per call flat (last {args.window} within {FLAT}x of calls "
        f"2-{args.window + 1}): {verdict}"
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
