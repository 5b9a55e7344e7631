"""Retention: stream events, finished turns' rows and idle workspaces are forgotten.

Every worker runs a round every interval; an advisory lock elects one per round for the
database (so N workers don't prune the same rows N times), while each sweeps the workspace
root it sees (the volume all workers share in the compose deployment: a removal that another
worker did first is no error). `chatd gc` runs
one round by hand, or with `--dry-run` counts what one would delete.

Stream events are pruned per chat as a prefix of its sequence, in batches, and the highest
pruned number is recorded with each batch: a cursor below it gets 410 `cursor_expired`, a
cursor at or above it has lost nothing (`EventLog.cursor_expired`). The owners' watch-stream
events (`owner_events`) are pruned alike, per owner, as long as chat events are kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
from pydantic import BaseModel, Field

from chatd.store.retention import (
    CHAT_CREATIONS,
    QUEUED_MESSAGES,
    TOOL_CALL_STARTS,
    TOOL_RESULTS,
    TURN_MCP_TOOLS,
    WEBHOOK_DELIVERIES,
    FinishedRows,
    PruneCandidate,
    RetentionStore,
)

__all__ = ["Pruned", "Retention", "RetentionReport", "RetentionSettings"]

log = logging.getLogger("chatd.retention")

CHAT_PAGE = 500
"""Chats looked at per candidate query."""
SETTLED = timedelta(minutes=5)
"""How far past the cutoff an event's time must be before no older event can follow it
(longer than any transaction that appends events runs)."""


class RetentionSettings(BaseModel):
    """How long each kind of data is kept (None: forever), and how often retention runs."""

    interval: timedelta = Field(default=timedelta(minutes=10), gt=timedelta(0))
    events: timedelta | None = timedelta(hours=24)
    """Stream events, for clients that reconnect with a cursor."""
    queued_messages: timedelta | None = timedelta(days=7)
    """Sent messages after their turn took them, and the keys of created chats: as long, a
    retried send or create with the same `Idempotency-Key` is recognised."""
    tool_calls: timedelta | None = timedelta(hours=24)
    """Staged tool results and start markers, after their turn ended."""
    workspaces: timedelta | None = timedelta(days=30)
    """A chat's tool workspace on a worker's disk, after the chat was last active."""
    webhook_deliveries: timedelta | None = timedelta(days=30)
    """A webhook delivery's log, after its last attempt settled it (succeeded or failed)."""
    batch: int = Field(default=1000, gt=0)
    """Rows deleted per statement (each its own transaction)."""

    @classmethod
    def from_env(cls) -> RetentionSettings:
        """Read `CHATD_RETENTION_INTERVAL_SECONDS` and the `CHATD_*_RETENTION_HOURS`."""
        defaults = cls()
        interval = os.environ.get("CHATD_RETENTION_INTERVAL_SECONDS")
        return cls(
            interval=timedelta(seconds=float(interval)) if interval else defaults.interval,
            events=_hours("CHATD_EVENT_RETENTION_HOURS", defaults.events),
            queued_messages=_hours(
                "CHATD_QUEUED_MESSAGE_RETENTION_HOURS", defaults.queued_messages
            ),
            tool_calls=_hours("CHATD_TOOL_CALL_RETENTION_HOURS", defaults.tool_calls),
            workspaces=_hours("CHATD_WORKSPACE_RETENTION_HOURS", defaults.workspaces),
            webhook_deliveries=_hours(
                "CHATD_WEBHOOK_DELIVERY_RETENTION_HOURS", defaults.webhook_deliveries
            ),
        )


def _hours(name: str, default: timedelta | None) -> timedelta | None:
    """A retention in hours from the environment; 0 keeps that kind forever."""
    value = os.environ.get(name)
    if not value:
        return default
    hours = float(value)
    return timedelta(hours=hours) if hours > 0 else None


@dataclass(frozen=True)
class Pruned:
    """What a round deleted (or, in a dry run, would delete) of one kind."""

    what: str
    """A table, or `workspaces`."""
    count: int
    chats: int | None = None
    """For stream events: of how many chats."""


@dataclass
class RetentionReport:
    """One round: whether this process held the database's turn, and what went."""

    elected: bool = False
    pruned: list[Pruned] = field(default_factory=list)


Progress = Callable[[Pruned], None]


class Retention:
    """Runs retention rounds: the database under an advisory lock, this disk's workspaces."""

    def __init__(
        self, pool: asyncpg.Pool, settings: RetentionSettings, workspace_root: Path | None
    ) -> None:
        self._store = RetentionStore(pool)
        self._pool = pool
        self._settings = settings
        self._workspace_root = workspace_root

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run a round every interval in the background for the duration of the block."""
        task = asyncio.create_task(self._forever(), name="chatd-retention")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])

    async def _forever(self) -> None:
        interval = self._settings.interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                report = await self.run_round()
            except Exception:  # Postgres away, a disk error: the next round tries again
                log.warning("retention round failed; next in %gs", interval, exc_info=True)
                continue
            for pruned in report.pruned:
                if pruned.count:
                    log.info("retention: deleted %d %s", pruned.count, pruned.what)

    async def run_round(
        self, *, dry_run: bool = False, progress: Progress | None = None
    ) -> RetentionReport:
        """One round; with `dry_run`, count instead of deleting. `progress` hears of each
        kind as it is done."""
        report = RetentionReport()

        def done(pruned: Pruned) -> None:
            report.pruned.append(pruned)
            if progress is not None:
                progress(pruned)

        async with self._store.round_lock() as held:
            report.elected = held
            if held:
                await self._prune_database(dry_run, done)
        if self._settings.workspaces is not None and self._workspace_root is not None:
            done(await self._sweep_workspaces(self._settings.workspaces, dry_run))
        return report

    async def _prune_database(self, dry_run: bool, done: Progress) -> None:
        """Everything but workspaces: what the elected process does."""
        settings = self._settings
        if settings.events is not None:
            done(await self._prune_events(settings.events, dry_run))
            done(await self._prune_owner_events(settings.events, dry_run))
        for rows, retention in (
            (QUEUED_MESSAGES, settings.queued_messages),
            (CHAT_CREATIONS, settings.queued_messages),
            (TOOL_RESULTS, settings.tool_calls),
            (TOOL_CALL_STARTS, settings.tool_calls),
            (TURN_MCP_TOOLS, settings.tool_calls),
            (WEBHOOK_DELIVERIES, settings.webhook_deliveries),
        ):
            if retention is not None:
                done(await self._delete_finished(rows, retention, dry_run))

    async def _prune_events(self, retention: timedelta, dry_run: bool) -> Pruned:
        cutoff: datetime = await self._pool.fetchval("SELECT now() - $1::interval", retention)
        count = chats = 0
        after: uuid.UUID | None = uuid.UUID(int=0)
        while after is not None:
            candidates, after = await self._store.event_candidates(
                after=after, cutoff=cutoff, limit=CHAT_PAGE
            )
            for chat in candidates:
                pruned = await self._prune_chat(chat, cutoff, dry_run)
                count += pruned
                chats += int(pruned > 0)
        return Pruned("chat_events", count, chats)

    async def _prune_chat(self, chat: PruneCandidate, cutoff: datetime, dry_run: bool) -> int:
        """Delete the chat's events up to its boundary, a batch at a time; how many."""
        batch = self._settings.batch
        boundary = await self._store.event_boundary(
            chat, cutoff=cutoff, settled=SETTLED, window=batch
        )
        if dry_run:
            return await self._store.count_events(chat.chat_id, chat.through_seq, boundary)
        count, after = 0, chat.through_seq
        while after < boundary:
            through = min(after + batch, boundary)
            deleted = await self._store.prune_events(chat.chat_id, after, through)
            if deleted is None:
                break
            count, after = count + deleted, through
        return count

    async def _prune_owner_events(self, retention: timedelta, dry_run: bool) -> Pruned:
        """Each owner's watch-stream events older than the retention, a batch at a time."""
        cutoff: datetime = await self._pool.fetchval("SELECT now() - $1::interval", retention)
        step = self._store.owner_events_through if dry_run else self._store.prune_owner_events
        batch, count = self._settings.batch, 0
        after: str | None = ""
        while after is not None:
            candidates, after = await self._store.owner_event_candidates(
                after=after, cutoff=cutoff, limit=CHAT_PAGE
            )
            for owner in candidates:
                pruned = owner.through_seq
                while True:
                    through = await step(owner.owner, pruned, cutoff, batch)
                    # An owner's numbers have no gap: (pruned, through] holds that many.
                    count += through - pruned
                    if through - pruned < batch:
                        break
                    pruned = through
        return Pruned("owner_events", count)

    async def _delete_finished(
        self, rows: FinishedRows, retention: timedelta, dry_run: bool
    ) -> Pruned:
        if dry_run:
            return Pruned(rows.table, await self._store.count_finished(rows, retention))
        count, batch = 0, self._settings.batch
        while True:
            deleted = await self._store.delete_finished(rows, retention, batch)
            count += deleted
            if deleted < batch:
                return Pruned(rows.table, count)

    async def _sweep_workspaces(self, idle_for: timedelta, dry_run: bool) -> Pruned:
        """Remove the workspaces of chats idle for `idle_for` (or deleted), never of a chat in
        a turn; directories not named by a chat id are left alone. Idle is read from the chat's
        `updated_at`, which each turn's begin and end move: only a turn that begins in the
        instant between that read and the removal can find its workspace gone."""
        assert self._workspace_root is not None
        found = await asyncio.to_thread(_chat_directories, self._workspace_root)
        busy = await self._store.busy_chats(list(found), idle_for)
        idle = [path for chat_id, path in found.items() if chat_id not in busy]
        if not dry_run:
            for path in idle:
                await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        return Pruned("workspaces", len(idle))


def _chat_directories(root: Path) -> dict[uuid.UUID, Path]:
    """The workspace directories under `root`, by chat id."""
    if not root.is_dir():
        return {}
    found: dict[uuid.UUID, Path] = {}
    for entry in root.iterdir():
        try:
            chat_id = uuid.UUID(entry.name)
        except ValueError:
            continue
        if str(chat_id) == entry.name and entry.is_dir() and not entry.is_symlink():
            found[chat_id] = entry
    return found
