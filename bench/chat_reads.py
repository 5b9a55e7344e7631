"""The gateway's CPU per chat read: `GET /chats/{id}` and `GET /chats`, before and after.

    python bench/chat_reads.py [--requests 2000] [--rounds 5] [--queued 20] [--chats 20]

The real app (`api.app.create_app`, its middleware and lifespan) on a real PostgreSQL and
Temporal dev server (`_stack.services()`), called in-process as an ASGI app: no HTTP client,
so the figures are what the gateway's process pays per request (asyncpg included, Postgres
excluded). One chat carries what the abuse benchmark's chat carries (`--queued` queued
messages) and a last error, pending tool calls and usage; the owner has `--chats` chats.

Beside the gateway's routes, the same app serves the handlers as they were before chat reads
were made cheap, under `/api/v1/before`: each round measures both, interleaved, with
`time.process_time()` over `--requests` sequential requests, and checks that both answer
the same bytes (exit status 1 if they differ: the old handlers no longer stand for the route).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import _stack
from _stack import say
from fastapi import APIRouter, FastAPI, Query, Request
from starlette.types import Message

from api.access import OwnedChat, Owner
from api.app import GatewayConfig, create_app
from api.routes.chats import CURSOR_PATTERN, _cursor, _parse_cursor
from api.schemas import ChatList, ChatOut
from api.state import state_of
from chatd.settings import TemporalSettings
from chatd.store.chats import QUEUED_COUNT, ROOTS_ONLY, SUMMARY_COLUMNS, ChatSummary
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore
from chatd.store.pages import Page, page_bytes

OWNER = "reader"

# `GET /chats` as it was: the summaries of a page of chats and their queue lengths, in one
# statement, after the key's owner was read in another. `candidate`
# reads one row past the limit, and the running size of each, to tell whether more follow;
# the first row always fits, so a chat larger than the budget still gets a page.
_LIST = f"""
WITH candidate AS (
    SELECT {SUMMARY_COLUMNS},
           row_number() OVER w AS n,
           sum(octet_length(c.model::text) + octet_length(c.usage::text)
               + coalesce(octet_length(c.title), 0)
               + coalesce(octet_length(c.last_error::text), 0)) OVER w AS upto
    FROM chats c
    WHERE c.owner = $1 AND ($2::timestamptz IS NULL OR (c.created_at, c.id) < ($2, $3))
      AND c.discard_at IS NULL
      {{roots}}
    WINDOW w AS (ORDER BY c.created_at DESC, c.id DESC ROWS UNBOUNDED PRECEDING)
    ORDER BY c.created_at DESC, c.id DESC
    LIMIT $4 + 1
), page AS (
    SELECT * FROM candidate WHERE n = 1 OR (n <= $4 AND upto <= $5)
)
SELECT page.*, {QUEUED_COUNT.format(chat="page.id")},
       (SELECT count(*) FROM candidate) > (SELECT count(*) FROM page) AS more
FROM page ORDER BY n
"""
_LIST_BEFORE = _LIST.format(roots=ROOTS_ONLY)

before = APIRouter(prefix="/api/v1/before/chats")


@before.get("", response_model=ChatList)
async def list_chats_before(
    request: Request,
    owner: Owner,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
) -> ChatList:
    """`GET /chats` as it was: a `ChatList` that FastAPI validates and serializes."""
    cursor = _parse_cursor(before) if before else None
    rows = await state_of(request).pool.fetch(
        _LIST_BEFORE, owner, cursor[0] if cursor else None, cursor[1] if cursor else None,
        limit, page_bytes(),
    )  # fmt: skip
    page = Page(
        [ChatSummary.model_validate(dict(r)) for r in rows],
        bool(rows[0]["more"]) if rows else False,
    )
    return ChatList(
        chats=page.rows,
        has_more=page.more,
        next_before=_cursor(page.rows[-1]) if page.more else None,
    )


@before.get("/{chat_id}", response_model=ChatOut)
async def get_chat_before(chat: OwnedChat, request: Request) -> ChatOut:
    """`GET /chats/{id}` as it was: the chat, then its queue, in two queries."""
    return ChatOut.of(chat, await state_of(request).transcript.queued(chat.id))


async def asgi_get(app: FastAPI, path: str, key: str) -> tuple[int, bytes]:
    """One GET through the whole ASGI app, as uvicorn would hand it over."""
    path, _, query = path.partition("?")
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "headers": [(b"host", b"127.0.0.1:8080"), (b"authorization", f"Bearer {key}".encode())],
    }  # fmt: skip
    status, body = 0, bytearray()

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status, bytes(body)


async def seed(app: FastAPI, key: str, chats: int, queued: int) -> str:
    """`chats` chats of the owner; the last one in `requires_action` with a last error,
    pending tool calls, usage and `queued` queued messages. Its id."""
    pool = app.state.gateway.pool
    chat_id = ""
    for n in range(chats):
        chat_id = await pool.fetchval(
            "INSERT INTO chats (id, owner, title, model) VALUES (gen_random_uuid(), $1, $2, $3)"
            " RETURNING id::text",
            OWNER, f"chat {n}", {"provider": "anthropic", "name": "claude-sonnet-4-5"},
        )  # fmt: skip
    await pool.execute(
        """UPDATE chats SET status = 'requires_action', action_expires_at = now(),
               last_error = $2, pending_tool_calls = $3, usage = $4 WHERE id = $1::uuid""",
        chat_id,
        {"message": "overloaded", "kind": "overloaded", "provider": "anthropic",
         "retryable": True, "status_code": 529, "detail": {"attempts": 3}},
        [{"id": f"call_{n}", "name": "lookup", "arguments": '{"q": "x"}'} for n in range(3)],
        {"input_tokens": 1234, "output_tokens": 567, "cache_read_tokens": 89},
    )  # fmt: skip
    for n in range(queued):
        await pool.execute(
            "INSERT INTO queued_messages (id, chat_id, parts) VALUES (gen_random_uuid(), $1, $2)",
            uuid.UUID(chat_id), [{"type": "text", "text": f"spam reader {n}"}],
        )  # fmt: skip
    return chat_id


async def cpu_per_request(get: Callable[[], Awaitable[object]], requests: int) -> float:
    """µs of this process's CPU per request, over `requests` sequential ones."""
    started = time.process_time()
    for _ in range(requests):
        await get()
    return (time.process_time() - started) / requests * 1e6


async def measure(app: FastAPI, key: str, paths: dict[str, str], args: argparse.Namespace) -> bool:
    """Each round, each path and its counterpart before the change, in alternating order (so
    neither always runs on the warmer caches): µs of CPU per request. Whether every path
    answered the same bytes before and after."""
    variants = {"before": "/api/v1/before", "after": "/api/v1"}
    same_bytes = True
    for name, path in paths.items():
        answers = {
            when: await asgi_get(app, f"{prefix}{path}", key) for when, prefix in variants.items()
        }
        assert all(status == 200 for status, _ in answers.values()), answers
        alike = answers["before"][1] == answers["after"][1]
        same_bytes &= alike
        same = "same bytes" if alike else "BODIES DIFFER"
        say(f"{name}: {len(answers['after'][1])} B, before and after: {same}")
    figures: dict[tuple[str, str], list[float]] = {(n, w): [] for n in paths for w in variants}
    for round_ in range(args.rounds):
        order = list(variants.items())[:: 1 if round_ % 2 == 0 else -1]
        for name, path in paths.items():
            for when, prefix in order:
                get = functools.partial(asgi_get, app, f"{prefix}{path}", key)
                figures[name, when].append(await cpu_per_request(get, args.requests))
        say(
            f"round {round_ + 1}: "
            + ", ".join(f"{n} {w} {v[-1]:.0f}" for (n, w), v in figures.items())
        )
    print(f"\n=== CPU per request (µs), {args.rounds} rounds of {args.requests} ===")
    for name in paths:
        old = statistics.median(figures[name, "before"])
        new = statistics.median(figures[name, "after"])
        runs = " ".join(
            f"{o:.0f}->{n:.0f}"
            for o, n in zip(figures[name, "before"], figures[name, "after"], strict=True)
        )
        print(f"{name:28s} median {old:6.0f} -> {new:6.0f}  ({1 - new / old:+.0%}; runs {runs})")
    return same_bytes


async def main(args: argparse.Namespace) -> bool:
    """Serve the app, seed the reads, measure; whether before and after answered alike."""
    async with _stack.services() as svc:
        await migrate(svc.database_url)
        pool = await connect_pool(svc.database_url)
        try:
            await _stack.bench_limits(pool)
            key = await KeyStore(pool).create(OWNER)
        finally:
            await pool.close()
        settings = TemporalSettings(address=svc.temporal.address, task_queue="chat-reads")
        app = create_app(GatewayConfig(database_url=svc.database_url, temporal=settings))
        app.include_router(before)
        async with app.router.lifespan_context(app):
            chat_id = await seed(app, key, args.chats, args.queued)
            paths = {
                f"GET /chats/{{id}} ({args.queued} queued)": f"/chats/{chat_id}",
                f"GET /chats ({args.chats} chats)": "/chats",
            }
            return await measure(app, key, paths, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queued", type=int, default=20)
    parser.add_argument("--chats", type=int, default=20)
    sys.exit(0 if asyncio.run(main(parser.parse_args())) else 1)
