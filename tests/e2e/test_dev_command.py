"""`chatd dev` as a user runs it: one command, a demo chat, Ctrl-C, and a resumed start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from chatd.devstack.ports import free_port

_BANNER_TIMEOUT_S = 60.0


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
    assert process.stdout is not None
    deadline = time.monotonic() + _BANNER_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError("chatd exited:\n" + "".join(seen))
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError("timed out:\n" + "".join(seen))


def _children(process: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(process.pid).children(recursive=True)


_taken: set[int] = set()


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
        children = _children(first)
        assert children, "Postgres and Temporal run as child processes"
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], f"children left running: {alive}"

    seen.clear()
    with _chatd(*args, "--no-worker", env=env) as second:
        again = _read_until(second, r"api key\s+(\S+)", seen).group(1)
        join_env = _read_until(second, r"DATABASE_URL=(\S+) TEMPORAL_ADDRESS=(\S+)", seen)
        demo_url = _read_until(second, r"CHATD_DEMO_BASE_URL=(\S+) chatd worker", seen).group(1)
        _read_until(second, r"Ctrl-C stops everything", seen)
        assert "worker polling" not in "".join(seen)
        assert again == key, "the generated key is kept in the data dir"
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


def _dev_args(root: Path) -> tuple[list[str], int]:
    api_port = _port()
    args = ["dev", "--data-dir", str(root), "--api-port", str(api_port)]
    for option in ("--temporal-port", "--temporal-ui-port", "--postgres-port"):
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
