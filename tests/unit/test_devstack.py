"""The dev-stack servers start, keep data across restarts/crashes and tear down cleanly."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus

from chatd.devstack.ports import bound_socket, free_port, pid_alive
from chatd.devstack.postgres import PostgresError, PostgresProcess
from chatd.devstack.temporal import (
    CHAT_SEARCH_ATTRIBUTES,
    TemporalDevServer,
    TemporalDevServerError,
)
from chatd.store.db import migrate

TEST_PG_SETTINGS = {"fsync": "off", "synchronous_commit": "off"}


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A short-lived directory under the system temp dir (reachable by the postgres user)."""
    path = Path(tempfile.mkdtemp(prefix="chatd-devstack-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_free_port_is_bindable_and_outside_the_ephemeral_range() -> None:
    """Ports from the ephemeral range can be taken by any outgoing connection before use."""
    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = {free_port() for _ in range(20)}
    assert all(not low <= port <= high for port in ports), ports
    assert len(ports) > 1, "chosen at random, so concurrent stacks rarely pick the same port"
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


async def test_a_server_on_a_bound_socket_sends_without_waiting_for_acks() -> None:
    """asyncio turns Nagle's algorithm off only on a TCP socket that says it is one: with it
    on, a body written after its headers waits for the client's delayed ACK."""
    nodelay: list[int] = []

    async def accepted(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nodelay.append(
            writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        writer.close()

    sock = bound_socket()
    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        await reader.read()
        writer.close()
    assert nodelay and nodelay[0] != 0


async def test_database_url_fixture_gives_a_fresh_migrated_database(
    database_url: str, empty_database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT current_database()") == urlsplit(database_url).path[1:]
        assert await conn.fetchval("SHOW max_connections") == "300"
        assert await conn.fetchval("SHOW fsync") == "off"
        assert await conn.fetchval("SELECT count(*) FROM chats") == 0
        assert await migrate(database_url) == [], "every migration is applied already"
    finally:
        await conn.close()
    empty = await asyncpg.connect(empty_database_url)
    try:
        tables = await empty.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables == 0
    finally:
        await empty.close()


async def test_postgres_survives_restart_crash_and_stale_pidfile(scratch_dir: Path) -> None:
    server = PostgresProcess(scratch_dir, settings=TEST_PG_SETTINGS)
    try:
        server.start()
        server.start()  # idempotent
        dsn = server.create_database("chaos")
        conn = await asyncpg.connect(dsn)
        await conn.execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('before')")
        await conn.close()

        sock_conn = await asyncpg.connect(server.socket_dsn_for("chaos"))
        assert await sock_conn.fetchval("SELECT current_database()") == "chaos"
        assert await sock_conn.fetchval(
            "SELECT client_addr IS NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ), "connected over the unix socket, not TCP"
        await sock_conn.close()

        port = server.port
        server.restart()
        assert server.port == port
        assert await _values(dsn) == ["before"]

        server.kill()
        pidfile = server.pgdata / "postmaster.pid"
        assert pidfile.exists(), "a crash leaves postmaster.pid behind"
        # Point the stale pid file at a live, non-postgres process (pid reuse after a crash).
        lines = pidfile.read_text().splitlines()
        pidfile.write_text("\n".join([str(os.getpid()), *lines[1:]]) + "\n")
        server.start()
        assert await _values(dsn) == ["before"]
    finally:
        server.stop()
    assert not server.running
    assert server.socket_dir is None


def test_postgres_rejects_bad_database_name(postgres: PostgresProcess) -> None:
    with pytest.raises(PostgresError):
        postgres.create_database('x"; DROP DATABASE postgres; --')


def test_postgres_startup_failure_shows_log_tail(scratch_dir: Path) -> None:
    server = PostgresProcess(scratch_dir, settings={"no_such_setting": "1"}, startup_timeout=20)
    with pytest.raises(PostgresError, match="no_such_setting"):
        server.start()
    assert not server.running


async def test_temporal_search_attributes_registered(temporal_client: Client) -> None:
    resp = await temporal_client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_client.namespace)
    )
    for name in CHAT_SEARCH_ATTRIBUTES:
        assert resp.custom_attributes[name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


async def test_temporal_persists_workflows_across_restart_and_crash(scratch_dir: Path) -> None:
    server = TemporalDevServer(scratch_dir, headless=True)
    try:
        server.start()
        assert server.db_path is not None
        client = await Client.connect(server.address)
        workflow_id = f"wait-{uuid.uuid4().hex[:8]}"
        # No worker polls this queue, so the workflow simply stays running.
        await client.start_workflow(
            "WaitForever",
            id=workflow_id,
            task_queue="nobody-polls-this",
            execution_timeout=timedelta(hours=1),
        )
        for bounce in (server.restart, server.kill):
            bounce()
            server.start()
            client = await Client.connect(server.address)
            desc = await client.get_workflow_handle(workflow_id).describe()
            assert desc.status == WorkflowExecutionStatus.RUNNING
    finally:
        server.stop()
    assert not server.running
    # The file is in write-ahead-log mode (bytes 18-19 of SQLite's header: 2 = WAL), the
    # journal DURABLE_SQLITE_PRAGMAS asks for; the rollback journal would be 1.
    assert server.db_path.read_bytes()[18:20] == b"\x02\x02"


ORPHAN_SCRIPT = """
import os, signal, sys, threading
from chatd.devstack import PostgresProcess, TemporalDevServer
pg = PostgresProcess(sys.argv[1] + "/pg")
tds = TemporalDevServer(sys.argv[1] + "/temporal", headless=True)
# Started off the main thread, so the children do not die with us: real orphans.
t = threading.Thread(target=lambda: (pg.start(), tds.start()))
t.start()
t.join()
print(pg.pid, tds.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_orphans_of_a_killed_owner_are_stopped_on_next_start(scratch_dir: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    res = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(scratch_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == -9, res.stderr
    orphan_pids = [int(pid) for pid in res.stdout.split()]
    pg = PostgresProcess(scratch_dir / "pg")
    tds = TemporalDevServer(scratch_dir / "temporal", headless=True)
    try:
        pg.start()
        tds.start()
        assert pg.pid not in orphan_pids and tds.pid not in orphan_pids
        assert not any(pid_alive(pid) for pid in orphan_pids)
    finally:
        tds.stop()
        pg.stop()


async def _values(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [row["v"] for row in await conn.fetch("SELECT v FROM t ORDER BY v")]
    finally:
        await conn.close()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on, as one that took it between its pick and the
    server's bind would."""
    with bound_socket() as taken:
        taken.listen()
        yield taken.getsockname()[1]


def test_a_port_taken_before_the_server_binds_it_is_picked_again(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A picked port is free only when picked: a stack starting beside this one can bind it
    first, and the server then exits "address already in use". The start picks again."""
    picks = iter([free_port(), taken_port])
    monkeypatch.setattr(
        "chatd.devstack.temporal.free_port", lambda host: next(picks, None) or free_port(host)
    )
    server = TemporalDevServer(headless=True, metrics_port=0)
    try:
        server.start()
        assert server.running
        assert server.metrics_port not in (0, taken_port)
        assert server.log_path is not None
        assert "address already in use" in server.log_path.read_text()
    finally:
        server.cleanup()


def test_a_port_given_by_the_caller_is_not_replaced_when_taken(taken_port: int) -> None:
    """The caller chose that port (a client may already be told it): fail, naming it."""
    server = TemporalDevServer(headless=True, metrics_port=taken_port)
    try:
        with pytest.raises(TemporalDevServerError, match="address already in use"):
            server.start()
        assert not server.running
    finally:
        server.cleanup()


def test_postgres_picks_its_port_again_when_it_was_taken_first(
    scratch_dir: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the Temporal dev server does: a picked port taken before the server binds it."""
    picks = iter([taken_port])
    monkeypatch.setattr(
        "chatd.devstack.postgres.free_port", lambda host: next(picks, None) or free_port(host)
    )
    pg = PostgresProcess(scratch_dir / "pg", settings=TEST_PG_SETTINGS)
    try:
        pg.start()
        assert pg.running
        assert pg.port != taken_port
        assert "Address already in use" in pg.log_path.read_text()
        assert pg.psql("SELECT 1").strip() == "1"
    finally:
        pg.stop()


def test_postgres_keeps_a_port_given_by_the_caller(scratch_dir: Path, taken_port: int) -> None:
    pg = PostgresProcess(scratch_dir / "pg", port=taken_port, settings=TEST_PG_SETTINGS)
    try:
        with pytest.raises(PostgresError, match="Address already in use"):
            pg.start()
        assert not pg.running
    finally:
        pg.stop()
