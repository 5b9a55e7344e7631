"""The production processes behind `chatd worker`, `chatd api`, `chatd migrate`, `chatd keys`,
`chatd limits`, `chatd usage` and `chatd gc`."""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import uvicorn

from chatd.heap import freeze_startup_objects
from chatd.serving import Server
from chatd.settings import ProviderSettings, TemporalSettings, titles_enabled
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore
from chatd.store.quotas import DEFAULTS_OWNER, LimitOverrides, QuotaStore
from chatd.store.usage_reports import Period, PeriodError, UsageReports, UsageTotal
from chatd.telemetry import setup_telemetry
from chatd.tools.defaults import default_registry
from chatd.tools.loading import with_extra_tools

__all__ = [
    "run_api",
    "run_codec_server",
    "run_gc",
    "run_keys",
    "run_limits",
    "run_migrate",
    "run_usage",
    "run_worker",
]

log = logging.getLogger("chatd")


def workspace_root() -> Path:
    """Where per-chat tool workspaces live on this worker (`CHATD_WORKSPACE_ROOT`)."""
    return Path(os.environ.get("CHATD_WORKSPACE_ROOT", ".data/workspaces")).resolve()


async def run_worker(database_url: str, providers: ProviderSettings | None = None) -> None:
    """Run one worker until SIGINT/SIGTERM."""
    from chatd.temporal_client import connect_temporal
    from workers.worker import WorkerConfig, assembled_worker, run_until_signalled

    setup_telemetry("chatd-worker")
    temporal = TemporalSettings.from_env()
    client = await connect_temporal(temporal)
    config = WorkerConfig(
        task_queue=temporal.task_queue,
        providers=providers or ProviderSettings.from_env(),
        registry=with_extra_tools(default_registry()),
        workspace_root=workspace_root(),
        generate_titles=titles_enabled(),
    )
    async with assembled_worker(database_url, client, config) as worker:
        await run_until_signalled(worker)


async def run_api(database_url: str, host: str, port: int) -> None:
    """Serve the gateway until SIGINT/SIGTERM."""
    from api.app import GatewayConfig, create_app
    from api.shutdown import end_streams

    setup_telemetry("chatd-api")
    config = GatewayConfig(
        database_url=database_url,
        temporal=TemporalSettings.from_env(),
        generate_titles=titles_enabled(),
    )
    app = create_app(config)
    server = Server(app, host, port, on_shutdown=lambda: end_streams(app))
    log.info("gateway listening on http://%s:%d", host, port)
    freeze_startup_objects()
    await server.serve()


async def run_codec_server(host: str, port: int) -> None:
    """Serve the codec endpoint until SIGINT/SIGTERM; exit with the reason if unconfigured."""
    from chatd.codec import CodecKeyError
    from chatd.codec_server import CodecServerConfig, codec_app

    try:
        config = CodecServerConfig.from_env()
    except CodecKeyError as err:
        raise SystemExit(f"chatd codec-server: {err}") from None
    server = uvicorn.Server(
        uvicorn.Config(codec_app(config), host=host, port=port, log_level="warning")
    )
    log.info("codec server listening on http://%s:%d", host, port)
    await server.serve()


async def run_migrate(database_url: str) -> None:
    """Apply pending migrations."""
    applied = await migrate(database_url)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


async def run_gc(database_url: str, dry_run: bool, workspaces: Path | None) -> None:
    """`chatd gc [--dry-run]`: one retention round, each kind printed as it is done."""
    from chatd.retention import Pruned, Retention, RetentionSettings

    verb = "would delete" if dry_run else "deleted"

    def show(pruned: Pruned) -> None:
        of_chats = f" of {pruned.chats} chat(s)" if pruned.chats is not None else ""
        print(f"{pruned.what}: {verb} {pruned.count}{of_chats}", flush=True)

    async with _database(database_url) as pool:
        retention = Retention(pool, RetentionSettings.from_env(), workspaces or workspace_root())
        report = await retention.run_round(dry_run=dry_run, progress=show)
    if not report.elected:
        raise SystemExit(
            "chatd: another process is running a retention round: the database was left"
            " alone; try again"
        )


@contextlib.asynccontextmanager
async def _database(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A small pool for a command; a clear exit if the database can't be reached."""
    try:
        pool = await connect_pool(database_url, min_size=1, max_size=2)
    except OSError as err:
        raise SystemExit(f"chatd: cannot reach the database ({err.strerror or err})") from None
    try:
        yield pool
    finally:
        await pool.close()


async def run_keys(database_url: str, args: argparse.Namespace) -> None:
    """`chatd keys create|list|revoke`."""
    async with _database(database_url) as pool:
        keys = KeyStore(pool)
        if args.keys_command == "create":
            print(await keys.create(args.owner, args.name))
        elif args.keys_command == "list":
            for key in await keys.list():
                state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
                print(f"{key.id}  {key.prefix}…  owner={key.owner}  {key.name!r}  {state}")
        elif args.keys_command == "revoke":
            if not await keys.revoke(args.key_id):
                raise SystemExit(f"chatd: no active key {args.key_id}")
            print(f"revoked {args.key_id}")


async def run_limits(database_url: str, args: argparse.Namespace) -> None:
    """`chatd limits show|set`: an owner's quotas (`*`: the defaults)."""
    async with _database(database_url) as pool:
        quotas = QuotaStore(pool)
        if args.limits_command == "set":
            given = {n: getattr(args, n) for n in LimitOverrides.model_fields if n in args}
            if not given:
                raise SystemExit("chatd: name a limit to set, e.g. --running-turns 10")
            current = await quotas.overrides(args.owner)
            await quotas.set_limits(args.owner, current.model_copy(update=given))
        own = await quotas.overrides(args.owner)
        applied = await quotas.limits(args.owner)
        for name, value in applied.model_dump().items():
            source = "own" if getattr(own, name) is not None else "default"
            shown = "none" if value is None else f"{value:g}"
            print(f"{name:22} {shown:>12}  ({source})")
        if args.owner != DEFAULTS_OWNER:
            usage = await quotas.usage_today(args.owner)
            print(
                f"today: {usage.input_tokens} input and {usage.output_tokens} output tokens,"
                f" ${usage.cost_usd:.4f}"
            )


async def run_usage(database_url: str, args: argparse.Namespace) -> None:
    """`chatd usage`: tokens and cost per day, model, chat or owner, as a table or CSV."""
    try:
        period = Period.of(args.first, args.last)
    except PeriodError as err:
        raise SystemExit(f"chatd: {err}") from None
    async with _database(database_url) as pool:
        report = await UsageReports(pool).report(period, args.group_by, owner=args.owner)
    fields = list(UsageTotal.model_fields)
    if args.csv:
        # Rows only: a spreadsheet sums them itself, and a total row would be summed too.
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([args.group_by, *fields])
        for group in report.groups:
            out.writerow([group.key, *(getattr(group, name) for name in fields)])
        return
    header = [args.group_by, *(name.removesuffix("_tokens") for name in fields)]
    rows = [[group.key, *_cells(group, fields)] for group in report.groups]
    rows.append(["total", *_cells(report.total, fields)])
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        key, *figures = row
        aligned = (cell.rjust(width) for cell, width in zip(figures, widths[1:], strict=True))
        print(key.ljust(widths[0]), *aligned, sep="  ")


def _cells(figures: UsageTotal, fields: list[str]) -> list[str]:
    values = (getattr(figures, name) for name in fields)
    return [f"{value:.6f}" if isinstance(value, float) else str(value) for value in values]
