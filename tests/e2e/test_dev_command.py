"""`chatd dev` as a user runs it: one command, a demo chat, Ctrl-C, and a resumed start."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest
from support.mcp_servers import write_mcp_config

from chatd.dev import DevOptions, _api_key
from chatd.devstack.ports import free_port
from chatd.mcp.config import CONFIG_ENV
from chatd.store.db import migrate

_SILENCE_S = 60.0
DEAF_MCP_SERVER = "import time; time.sleep(600)  # an MCP server deaf to its stdin"


@contextmanager
def _chatd(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "chatd.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if process.stdout is not None:
            process.stdout.close()


def _read_until(process: subprocess.Popen[str], pattern: str, seen: list[str]) -> re.Match[str]:
    """The first line matching `pattern`. chatd prints a line as each part of it starts, so
    the bound is on its silence, not on its whole start: on a loaded machine the start takes
    longer, and each part still reports."""
    assert process.stdout is not None
    deadline = time.monotonic() + _SILENCE_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError("chatd exited:\n" + "".join(seen))
        seen.append(line)
        deadline = time.monotonic() + _SILENCE_S
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError("timed out:\n" + "".join(seen))


def _children(process: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(process.pid).children(recursive=True)


_taken: set[int] = set()
_PORT_PICKS = 3
"""Starts of a `chatd dev` whose picked port another process took meanwhile."""


def _port() -> int:
    """A free port no other stack in this module was given (two picks may coincide)."""
    port = free_port()
    while port in _taken:
        port = free_port()
    _taken.add(port)
    return port


def _chat_turn(base: str, key: str, content: str) -> tuple[str, list[dict[str, object]]]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        chat = http.post("/chats", json={"message": {"content": content}}).json()
        deadline = time.monotonic() + 30
        while http.get(f"/chats/{chat['id']}").json()["status"] != "waiting":
            assert time.monotonic() < deadline, "the demo turn did not finish"
            time.sleep(0.1)
        messages = http.get(f"/chats/{chat['id']}/messages").json()["messages"]
        return chat["id"], messages


def _keys(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """`chatd keys ...` without DATABASE_URL: stdout, or stderr if it failed and `check` is off."""
    environ = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | (env or {})
    done = subprocess.run(
        [sys.executable, "-m", "chatd.cli", "keys", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 or not check, done.stderr
    return (done.stdout if done.returncode == 0 else done.stderr).strip()


@pytest.mark.slow
def test_chatd_dev_runs_a_demo_chat_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    api_port, temporal_port = _port(), _port()
    args = [
        "dev",
        "--data-dir",
        str(tmp_path / "data"),
        "--api-port",
        str(api_port),
        "--temporal-port",
        str(temporal_port),
        "--temporal-ui-port",
        str(_port()),
        "--postgres-port",
        str(_port()),
    ]
    seen: list[str] = []
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    with _chatd(*args, env=env) as first:
        key = _read_until(first, r"api key\s+(\S+)", seen).group(1)
        _read_until(first, r"Ctrl-C stops everything", seen)
        banner = "".join(seen)
        assert "PostgreSQL: ready" in banner and "Temporal dev server: ready" in banner
        assert "demo model" in banner and "temporal ui  http://" in banner
        base = f"http://127.0.0.1:{api_port}/api/v1"
        chat_id, messages = _chat_turn(base, key, "hello there")
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert "[demo model]" in str(messages[1]["parts"])
        database_url = (tmp_path / "data" / "database_url").read_text().strip()
        transports = _transports(database_url)
        assert transports["tcp"] == 0 and transports["unix"] > 0, transports
        children = _children(first)
        assert children, "Postgres and Temporal run as child processes"
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], f"children left running: {alive}"
    assert (tmp_path / "data" / "api_key").stat().st_mode & 0o777 == 0o600
    stopped = _keys("list", "--data-dir", str(tmp_path / "data"), check=False)
    assert "no `chatd dev` is running" in stopped

    seen.clear()
    with _chatd(*args, "--no-worker", env=env) as second:
        again = _read_until(second, r"api key\s+(\S+)", seen).group(1)
        join_env = _read_until(second, r"DATABASE_URL=(\S+) TEMPORAL_ADDRESS=(\S+)", seen)
        demo_url = _read_until(second, r"CHATD_DEMO_BASE_URL=(\S+) chatd worker", seen).group(1)
        _read_until(second, r"Ctrl-C stops everything", seen)
        assert "worker polling" not in "".join(seen)
        assert again == key, "the generated key is kept in the data dir"
        erin = _keys("create", "--owner", "erin", "--data-dir", str(tmp_path / "data"))
        listed = _keys("list", env={"CHATD_DATA_DIR": str(tmp_path / "data")})
        assert "owner=erin" in listed and "owner=dev" in listed
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {erin}"}) as http:
            assert http.get("/chats").json()["chats"] == []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
            resumed = http.get(f"/chats/{chat_id}/messages").json()["messages"]
        assert resumed == messages
        worker_env = {
            **env,
            "DATABASE_URL": join_env.group(1),
            "TEMPORAL_ADDRESS": join_env.group(2),
            "CHATD_DEMO_BASE_URL": demo_url,
            "CHATD_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        }
        with _chatd("worker", env=worker_env) as worker:
            worker_log: list[str] = []
            frozen = _read_until(worker, r"froze (\d+) startup objects", worker_log).group(1)
            assert int(frozen) > 100_000, "the provider SDKs are imported before the freeze"
            _, joined = _chat_turn(base, key, "served by a joined worker")
        assert [m["role"] for m in joined] == ["user", "assistant"]


def _transports(dsn: str) -> Counter[str]:
    """The connections of `chatd dev`'s worker and gateway to its Postgres, by transport
    (this check's own aside): a unix socket's have no client address."""

    async def read() -> list[asyncpg.Record]:
        connection = await asyncpg.connect(dsn)
        try:
            return await connection.fetch(
                "SELECT client_addr IS NULL AS unix FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        finally:
            await connection.close()

    return Counter("unix" if row["unix"] else "tcp" for row in asyncio.run(read()))


def _dev_args(root: Path) -> tuple[list[str], int]:
    api_port = _port()
    args = ["dev", "--data-dir", str(root), "--api-port", str(api_port)]
    for option in ("--temporal-port", "--temporal-ui-port", "--postgres-port", "--demo-port"):
        args += [option, str(_port())]
    return args, api_port


def test_two_instances_run_side_by_side_with_fixed_keys(tmp_path: Path) -> None:
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    one_args, one_port = _dev_args(tmp_path / "one")
    two_args, two_port = _dev_args(tmp_path / "two")
    one_key, two_key = "chatd-test-key-one", "chatd-test-key-two"
    seen_one: list[str] = []
    seen_two: list[str] = []
    with (
        _chatd(*one_args, "--api-key", one_key, env=env) as one,
        _chatd(*two_args, env={**env, "CHATD_API_KEY": two_key}) as two,
    ):
        assert _read_until(one, r"api key\s+(\S+)", seen_one).group(1) == one_key
        assert _read_until(two, r"api key\s+(\S+)", seen_two).group(1) == two_key
        _read_until(one, r"Ctrl-C stops everything", seen_one)
        _read_until(two, r"Ctrl-C stops everything", seen_two)
        one_base = f"http://127.0.0.1:{one_port}/api/v1"
        two_base = f"http://127.0.0.1:{two_port}/api/v1"
        one_chat, one_messages = _chat_turn(one_base, one_key, "hello from one")
        two_chat, two_messages = _chat_turn(two_base, two_key, "hello from two")
        assert [m["role"] for m in one_messages] == ["user", "assistant"]
        assert [m["role"] for m in two_messages] == ["user", "assistant"]
        with httpx.Client(base_url=two_base, headers={"Authorization": f"Bearer {two_key}"}) as h:
            assert h.get(f"/chats/{one_chat}").status_code == 404, "separate stacks, separate data"
            assert h.get(f"/chats/{two_chat}").status_code == 200
        with httpx.Client(base_url=two_base, headers={"Authorization": f"Bearer {one_key}"}) as h:
            assert h.get("/chats").status_code == 401, "each instance has its own keys"


@pytest.fixture
async def dev_database(database_url: str) -> str:
    await migrate(database_url)
    return database_url


def _options(data_dir: Path, api_key: str | None = None) -> DevOptions:
    return DevOptions(data_dir, 0, 0, 0, 0, api_key=api_key, worker=False)


async def test_the_key_file_is_private_from_its_first_byte(
    dev_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without chmod, a file created world-readable would stay so: only the creation mode counts.
    monkeypatch.setattr(Path, "chmod", lambda *_, **__: None)
    monkeypatch.setattr(os, "chmod", lambda *_, **__: None)
    key = await _api_key(dev_database, _options(tmp_path))
    key_file = tmp_path / "api_key"
    assert key_file.read_text().strip() == key
    assert key_file.stat().st_mode & 0o777 == 0o600


async def test_a_revoked_dev_key_is_not_revived(dev_database: str, tmp_path: Path) -> None:
    first = await _api_key(dev_database, _options(tmp_path))
    assert await _api_key(dev_database, _options(tmp_path)) == first, "a restart keeps the key"
    conn = await asyncpg.connect(dev_database)
    try:
        await conn.execute("UPDATE api_keys SET revoked_at = now()")
        fresh = await _api_key(dev_database, _options(tmp_path))
        assert fresh != first and (tmp_path / "api_key").read_text().strip() == fresh
        with pytest.raises(SystemExit, match="--api-key refused: this key was revoked"):
            await _api_key(dev_database, _options(tmp_path, api_key=first))
        owners = await conn.fetch("SELECT owner FROM api_keys WHERE revoked_at IS NULL")
    finally:
        await conn.close()
    assert [r["owner"] for r in owners] == ["dev"], "only the fresh key is active"


@contextmanager
def _started(root: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """`chatd dev` up to its banner: the process, its key and its API port.

    Its ports are picked free, not held: another test process's server may take one before
    chatd binds it. chatd then refuses to start, naming the port, and starts again on others.
    """
    for attempt in range(1, _PORT_PICKS + 1):
        args, api_port = _dev_args(root)
        seen: list[str] = []
        with _chatd(*args, env=env) as dev:
            try:
                key = _read_until(dev, r"api key\s+(\S+)", seen).group(1)
            except AssertionError:
                if attempt < _PORT_PICKS and any(" is in use: " in line for line in seen):
                    continue
                raise
            _read_until(dev, r"Ctrl-C stops everything", seen)
            yield dev, key, api_port
            return


def test_ctrl_c_with_an_open_stream_stops_promptly(tmp_path: Path) -> None:
    """Also: without `--demo-port`, the demo model gets a free port of its own, not the one
    after the API's (taken here by another program)."""
    args, api_port = _dev_args(tmp_path / "data")
    del args[args.index("--demo-port") : args.index("--demo-port") + 2]
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    seen: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as next_port:
        next_port.bind(("127.0.0.1", api_port + 1))  # where the demo model used to go
        next_port.listen()
        with _chatd(*args, env=env) as dev:
            demo = _read_until(dev, r"demo model\s+http://127.0.0.1:(\d+)\s+\(--demo-port\)", seen)
            key = _read_until(dev, r"api key\s+(\S+)", seen).group(1)
            _read_until(dev, r"Ctrl-C stops everything", seen)
            _stream_then_ctrl_c(dev, api_port, key)
    assert int(demo.group(1)) != api_port + 1


def _stream_then_ctrl_c(dev: subprocess.Popen[str], api_port: int, key: str) -> None:
    base = f"http://127.0.0.1:{api_port}/api/v1"
    chat_id, _ = _chat_turn(base, key, "hello")
    headers = {"Authorization": f"Bearer {key}"}
    with (
        httpx.Client(base_url=base, headers=headers, timeout=30) as http,
        http.stream("GET", f"/chats/{chat_id}/stream", params={"after": 0}) as stream,
    ):
        lines = stream.iter_lines()
        while not next(lines).startswith("id: "):
            pass  # the stream is open and serving events
        dev.send_signal(signal.SIGINT)
        assert dev.wait(10) == 0, "chatd dev stops despite the open stream"
        list(lines)  # the stream ended cleanly: its client resumes on another gateway


def test_children_die_with_a_sigkilled_chatd_dev(tmp_path: Path) -> None:
    """Postgres, Temporal and the worker's MCP stdio servers. (The `execute` sandbox is a
    bubblewrap started with `--die-with-parent`.)"""
    # A server that never reads its stdin: it would not notice its pipe closing.
    deaf = {"command": sys.executable, "args": ["-c", DEAF_MCP_SERVER]}
    config = write_mcp_config(tmp_path / "mcp.json", {"deaf": deaf})
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": "", CONFIG_ENV: str(config)}
    with _started(tmp_path / "data", env) as (dev, key, api_port):
        base = f"http://127.0.0.1:{api_port}/api/v1"
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            body = {"mcp_servers": ["deaf"], "message": {"content": "hello"}}
            assert http.post("/chats", json=body).status_code == 201
        deadline = time.monotonic() + 30
        while not any(DEAF_MCP_SERVER in c.cmdline() for c in _children(dev)):
            assert time.monotonic() < deadline, "the turn never started the MCP server"
            time.sleep(0.1)
        children = _children(dev)
        names = {child.name() for child in children}
        assert {"postgres", "temporal"} <= names, names
        dev.kill()
        dev.wait(10)
        _, alive = psutil.wait_procs(children, timeout=15)
        assert alive == [], f"children outlived chatd dev: {alive}"


@contextmanager
def _listening() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", _port()))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    "option",
    ["--api-port", "--demo-port", "--postgres-port", "--temporal-port", "--temporal-ui-port"],
)
def test_a_port_in_use_is_named_with_the_option_that_sets_it(tmp_path: Path, option: str) -> None:
    args, _ = _dev_args(tmp_path / "data")
    env = {**os.environ, "ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    with _listening() as port:
        args[args.index(option) + 1] = str(port)
        done = subprocess.run(
            [sys.executable, "-m", "chatd.cli", *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"chatd dev: port {port} for {_WHAT[option]} is in use: choose another with {option}"
    )


_WHAT = {
    "--api-port": "the gateway",
    "--demo-port": "the demo model",
    "--postgres-port": "PostgreSQL",
    "--temporal-port": "the Temporal dev server",
    "--temporal-ui-port": "the Temporal UI",
}


def test_two_options_naming_one_port_are_refused(tmp_path: Path) -> None:
    args, api_port = _dev_args(tmp_path / "data")
    args[args.index("--demo-port") + 1] = str(api_port)
    done = subprocess.run(
        [sys.executable, "-m", "chatd.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert f"--api-port and --demo-port both name port {api_port}" in done.stderr
