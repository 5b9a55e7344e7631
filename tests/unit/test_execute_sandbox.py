"""The execute tool's bubblewrap sandbox, attacked from inside with real bwrap processes: the
worker's environment, other chats' workspaces, the network and the worker's uid stay out of
reach. Also: who may enable and use the tool."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from chatd.tools.base import Tool, ToolContext
from chatd.tools.defaults import default_registry
from chatd.tools.execute import ExecuteArgs, OwnerAllowList, make_execute_tool
from chatd.tools.sandbox import (
    SANDBOX_UID,
    Bubblewrap,
    NoSandbox,
    Sandbox,
    SandboxUnavailable,
    available_bubblewrap,
)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
SECRET = f"sk-marker-{uuid.uuid4().hex}"
"""A credential in the worker's environment; no command may see it."""


@pytest.fixture
def worker_secrets(monkeypatch: pytest.MonkeyPatch) -> str:
    """The worker's environment holds a provider key and a database URL."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://chatd:{SECRET}@db/chatd")
    return SECRET


@pytest.fixture(scope="module")
def bubblewrap() -> Bubblewrap:
    """The sandbox as a worker finds it (a failed probe fails the test: CI installs bwrap)."""
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    return available_bubblewrap()


@pytest.fixture
def workspaces(tmp_path: Path) -> Path:
    """The workspace root of a worker with two chats, `mine` and `theirs`."""
    root = tmp_path / "workspaces"
    (root / "mine").mkdir(parents=True)
    (root / "theirs").mkdir()
    (root / "theirs" / "diary.txt").write_text(f"their secret {SECRET}\n")
    return root


def execute_tool(sandbox: Sandbox, owners: str = "*") -> Tool[ExecuteArgs]:
    """The tool as the default registry builds it."""
    return make_execute_tool(sandbox=sandbox, owners=OwnerAllowList.parse(owners))


async def run(
    sandbox: Sandbox,
    workspace: Path,
    command: str,
    owner: str | None = "alice",
    owners: str = "*",
    **arguments: Any,
) -> dict[str, Any]:
    """Run `command` with the execute tool, as the tool activity would for `owner`'s chat."""
    tool = execute_tool(sandbox, owners)
    ctx = ToolContext(chat_id="c", tool_call_id="t", workspace=workspace, owner=owner)
    result = await tool.run(tool.args.model_validate({"command": command, **arguments}), ctx)
    assert isinstance(result, dict)
    return result


def output(result: dict[str, Any]) -> str:
    return str(result["stdout"]) + str(result["stderr"])


# escapes


@pytest.mark.usefixtures("worker_secrets")
async def test_the_workers_environment_is_not_readable(
    bubblewrap: Bubblewrap, workspaces: Path
) -> None:
    command = (
        f"env; cat /proc/{os.getpid()}/environ /proc/{os.getppid()}/environ; "
        'for f in /proc/[0-9]*/environ; do echo "$f"; cat "$f"; done; ls /proc'
    )
    result = await run(bubblewrap, workspaces / "mine", command)
    assert "/proc/1/environ" in result["stdout"], "it did look at the processes it can see"
    assert SECRET not in output(result)
    pids = {int(line) for line in result["stdout"].split() if line.isdigit()}
    assert os.getpid() not in pids and os.getppid() not in pids
    assert max(pids) < 100, "only the sandbox's own processes are visible"


async def test_another_chats_workspace_is_not_reachable(
    bubblewrap: Bubblewrap, workspaces: Path
) -> None:
    command = (
        f"cat ../theirs/diary.txt {workspaces}/theirs/diary.txt; ls -a / ..; "
        "grep -rs their / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr"
    )
    result = await run(bubblewrap, workspaces / "mine", command, timeout_seconds=60)
    assert not result["timed_out"]
    assert SECRET not in output(result)
    assert "No such file" in result["stderr"]


async def test_only_the_workspace_is_writable(bubblewrap: Bubblewrap, workspaces: Path) -> None:
    mine = workspaces / "mine"
    command = "touch /usr/x /etc/x /x; echo kept > made.txt; echo gone > /tmp/scratch; pwd"
    result = await run(bubblewrap, mine, command)
    assert result["stdout"] == "/workspace\n"
    assert result["stderr"].count("Read-only file system") == 3
    assert (mine / "made.txt").read_text() == "kept\n"
    assert (mine / "made.txt").stat().st_uid == os.getuid(), "the file tools can manage it"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server of the worker's on 127.0.0.1 (never accepted from: a connect suffices)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def connect_command(server: socket.socket) -> str:
    port = server.getsockname()[1]
    return (
        "python3 -c 'import socket; "
        f'socket.create_connection(("127.0.0.1", {port}), timeout=10); print("connected")\''
    )


async def test_the_network_is_unreachable(
    bubblewrap: Bubblewrap, workspaces: Path, listener: socket.socket
) -> None:
    result = await run(bubblewrap, workspaces / "mine", connect_command(listener))
    assert result["exit_code"] != 0
    assert "connected" not in result["stdout"]
    assert "ConnectionRefusedError" in result["stderr"] or "unreachable" in result["stderr"]


@needs_bwrap
async def test_the_operator_may_share_the_network(
    workspaces: Path, listener: socket.socket
) -> None:
    result = await run(
        available_bubblewrap(network=True), workspaces / "mine", connect_command(listener)
    )
    assert result["stdout"] == "connected\n", result  # the test above can see a connection


async def test_it_runs_as_its_own_uid_without_capabilities(
    bubblewrap: Bubblewrap, workspaces: Path
) -> None:
    result = await run(
        bubblewrap, workspaces / "mine", "id -u; id -g; grep CapEff /proc/self/status"
    )
    uid, gid, caps = result["stdout"].splitlines()
    assert int(uid) == int(gid) == SANDBOX_UID != os.getuid()
    assert caps.split() == ["CapEff:", "0000000000000000"]


# process handling inside the sandbox


def sleepers(marker: str) -> list[psutil.Process]:
    """Live processes on this machine running `sleep <marker>` (a zombie is dead)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == ["sleep", marker]:
            if process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def assert_no_sleepers(marker: str) -> None:
    """Nothing the command started is still running."""
    deadline = time.monotonic() + 10
    while alive := sleepers(marker):
        if time.monotonic() > deadline:
            for process in alive:
                process.kill()
            raise AssertionError(f"survivors: {alive}")
        time.sleep(0.05)


async def test_background_processes_end_with_the_command(
    bubblewrap: Bubblewrap, workspaces: Path
) -> None:
    marker = f"{600 + uuid.uuid4().int % 10_000}.5"  # a unique `sleep` to find on the host
    command = f"sleep {marker} & setsid sleep {marker} & sleep 0.2; echo started"
    result = await run(bubblewrap, workspaces / "mine", command)
    assert result["stdout"] == "started\n" and result["exit_code"] == 0
    assert_no_sleepers(marker)


async def test_the_timeout_kills_the_sandbox(bubblewrap: Bubblewrap, workspaces: Path) -> None:
    marker = f"{600 + uuid.uuid4().int % 10_000}.25"
    command = f"sleep {marker} & echo started; sleep {marker}"
    result = await run(bubblewrap, workspaces / "mine", command, timeout_seconds=2)
    assert result["timed_out"] is True and result["stdout"] == "started\n"
    assert_no_sleepers(marker)


async def test_cancelling_the_call_kills_the_sandbox(
    bubblewrap: Bubblewrap, workspaces: Path
) -> None:
    marker = f"{600 + uuid.uuid4().int % 10_000}.75"
    mine = workspaces / "mine"
    call = asyncio.ensure_future(run(bubblewrap, mine, f"touch started; sleep {marker}"))
    deadline = time.monotonic() + 30
    while not (mine / "started").exists():
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    call.cancel()  # as the tool activity's Tool.timeout does
    with pytest.raises(asyncio.CancelledError):
        await call
    assert_no_sleepers(marker)


# enabling and using the tool


async def test_an_owner_off_the_allow_list_is_refused(workspaces: Path) -> None:
    mine, owners = workspaces / "mine", "alice, carol"
    for owner in ("bob", None):
        with pytest.raises(PermissionError, match="not available to this chat's owner"):
            await run(NoSandbox(), mine, "touch ran", owner=owner, owners=owners)
    assert not (mine / "ran").exists()
    assert (await run(NoSandbox(), mine, "touch ran", owner="carol", owners=owners))[
        "exit_code"
    ] == 0


def test_allow_list_parsing() -> None:
    assert OwnerAllowList.parse(" alice,bob ,, ").owners == {"alice", "bob"}
    assert not OwnerAllowList.parse("alice").allows("bob")
    assert OwnerAllowList.parse("*").allows("anyone")
    assert not OwnerAllowList.parse("").allows("")


@pytest.fixture
def enabled(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The operator has enabled execute for alice."""
    monkeypatch.setenv("CHATD_ENABLE_EXECUTE", "1")
    monkeypatch.setenv("CHATD_EXECUTE_OWNERS", "alice")
    monkeypatch.delenv("CHATD_EXECUTE_UNSANDBOXED", raising=False)
    monkeypatch.delenv("CHATD_EXECUTE_NETWORK", raising=False)
    return monkeypatch


def test_enabling_needs_an_allow_list(enabled: pytest.MonkeyPatch) -> None:
    enabled.setenv("CHATD_EXECUTE_OWNERS", " , ")
    with pytest.raises(ValueError, match="CHATD_EXECUTE_OWNERS is empty"):
        default_registry()


@needs_bwrap
def test_enabled_execute_is_sandboxed(enabled: pytest.MonkeyPatch) -> None:
    tool = default_registry().get("execute")
    assert tool is not None
    assert "isolated sandbox" in tool.description and "no network" in tool.description


@pytest.fixture
def broken_bwrap(enabled: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bwrap that cannot create namespaces, as in a container whose seccomp forbids them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    enabled.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.usefixtures("broken_bwrap")
def test_enabling_fails_where_the_sandbox_does_not_work() -> None:
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace") as err:
        default_registry()
    assert "CHATD_EXECUTE_UNSANDBOXED=1" in str(err.value)


def test_enabling_fails_without_bwrap(enabled: pytest.MonkeyPatch, tmp_path: Path) -> None:
    enabled.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bwrap is not installed"):
        default_registry()


@pytest.mark.usefixtures("broken_bwrap")
def test_the_operator_may_run_it_unsandboxed(
    enabled: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    enabled.setenv("CHATD_EXECUTE_UNSANDBOXED", "1")
    tool = default_registry().get("execute")
    assert tool is not None and "directly on the server" in tool.description
    assert "UNSANDBOXED" in caplog.text
