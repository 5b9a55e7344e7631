"""Shared fixtures: lazily started PostgreSQL and Temporal dev servers (real, local processes)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings
from support.postgres import THROWAWAY_PG_SETTINGS
from support.scratch import use_ram_for_temp_files
from temporalio.client import Client

from chatd.devstack.postgres import PostgresProcess, create_database_sql, drop_database_sql
from chatd.devstack.temporal import TemporalDevServer
from chatd.store.db import migrate

# Speed is measured in bench/, not asserted here: Hypothesis's per-example deadline would
# fail a property on a loaded machine for a slow example, not a wrong one.
settings.register_profile("chatd", deadline=None)
settings.load_profile("chatd")

# Every test's worker, in process or a child, runs workflow code in Temporal's sandbox: a
# deployed worker runs without it (its CPU), so the suite is where its checks of the
# workflows' determinism are made.
os.environ.setdefault("CHATD_WORKFLOW_SANDBOX", "1")


@pytest.fixture(autouse=True)
def _heap_frozen_after_each_test() -> Iterator[None]:
    """Collect a test's garbage when it ends, then freeze what survives.

    A test process keeps what its tests leave behind (imported modules, caches, apps), and a
    full collection walks all of it. With in-process workers that pause landed inside
    workflow activations: past two seconds on a loaded machine, Temporal's deadlock detector
    failed the task. Frozen objects are never walked again, so each collection sees only
    what the running test made.
    """
    yield
    gc.collect()
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    """Temp files in RAM, before anything makes one (support/scratch.py says why)."""
    use_ram_for_temp_files()


WORKERS_PER_CORE = 3
MOST_WORKERS = 8


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): three workers per core the process may use, at most
    eight. Most of a test's time is waiting (on servers, subprocesses, a browser, timers),
    so on two cores six workers overlap those waits where three left the cores idle; each
    worker starts its own servers, hence the cap."""
    return min(WORKERS_PER_CORE * len(os.sched_getaffinity(0)), MOST_WORKERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first: parallel workers then end together, none left running one alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresProcess]:
    """A session-wide PostgreSQL server in a temp dir (fsync=off), started on first use."""
    root = Path(tempfile.mkdtemp(prefix="chatd-test-pg-"))
    # Autovacuum off: each test's database lives for seconds, and vacuuming a thousand of
    # them only competes with the tests for the CPU. Each copy of the template writes ~9 MB
    # of WAL: a checkpoint every 256 MB keeps the WAL of a RAM temp dir small.
    settings = {**THROWAWAY_PG_SETTINGS, "autovacuum": "off", "max_wal_size": "256MB"}
    server = PostgresProcess(root, settings=settings)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_template(postgres: PostgresProcess) -> str:
    """A database with every migration applied, which each test's database copies: a copy
    costs a fraction of migrating an empty database."""
    name = "t_migrated_template"
    dsn = postgres.create_database(name)
    # In a thread of its own: this thread's event loop belongs to pytest-asyncio.
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate(dsn)).result()
    return name


@pytest.fixture(scope="session")
async def postgres_admin(postgres: PostgresProcess) -> AsyncIterator[asyncpg.Connection]:
    """The connection that creates and drops the tests' databases: a psql run each time cost
    a process and a server connection of their own."""
    connection = await asyncpg.connect(postgres.dsn_for("postgres"))
    yield connection
    if postgres.running:
        await connection.close()


@pytest.fixture
async def database_url(
    postgres: PostgresProcess,
    postgres_admin: asyncpg.Connection,
    migrated_template: str,
    request: pytest.FixtureRequest,
) -> AsyncIterator[str]:
    """DSN of a fresh, uniquely named, migrated database for this test, dropped after it."""
    name = _test_database_name(request)
    await postgres_admin.execute(create_database_sql(name, migrated_template))
    yield postgres.dsn_for(name)
    await _drop(postgres, postgres_admin, name)


@pytest.fixture
async def empty_database_url(
    postgres: PostgresProcess, postgres_admin: asyncpg.Connection, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """DSN of a fresh, uniquely named database with no tables, for tests of migrations."""
    name = _test_database_name(request)
    await postgres_admin.execute(create_database_sql(name))
    yield postgres.dsn_for(name)
    await _drop(postgres, postgres_admin, name)


async def _drop(postgres: PostgresProcess, admin: asyncpg.Connection, name: str) -> None:
    """Drop a test's database as the test ends: a session's thousand databases would
    otherwise be deleted file by file when it ends, half a minute with nothing else to do."""
    if postgres.running:  # a test may have stopped it
        await admin.execute(drop_database_sql(name))


def _test_database_name(request: pytest.FixtureRequest) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"t_{slug}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalDevServer]:
    """A session-wide headless, in-memory Temporal dev server, started on first use."""
    server = TemporalDevServer(headless=True)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
async def temporal_client(temporal_server: TemporalDevServer) -> AsyncIterator[Client]:
    """A temporalio Client connected to the session dev server."""
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
    yield client
