"""`chatd` commands in processes forked from a fork server that imported their modules once.

A fresh interpreter spends seconds of CPU importing a worker's or a gateway's modules (the
anthropic SDK's 3,000 modules take 2 s), and the tests start dozens of each. The fork server
(`multiprocessing`'s forkserver, one per test process) imports them once; each command then
runs in a process of its own forked from it, killed, stopped and restarted like any other.
`ForkedChatd` is the `subprocess.Popen` of such a process.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from chatd.devstack.ports import die_with_parent

__all__ = ["ROOT", "ForkedChatd"]

ROOT = Path(__file__).resolve().parents[2]
"""The source checkout: each command runs there, with it on `sys.path` (`tests.support`)."""

_forks = multiprocessing.get_context("forkserver")
_forks.set_forkserver_preload(
    ["chatd.cli", "workers.worker", "chatd.providers.anthropic", "api.app"]
)
_running: list[ForkedChatd] = []


class ForkedChatd:
    """`python -m chatd.cli *argv` with exactly `env`, in the checkout, its output (stdout and
    stderr) appended to `log`; it dies with the fork server, which dies with this process."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.args = ["chatd", *argv]
        log.touch()  # there once this returns, as a Popen's output file is
        self._process = _forks.Process(target=_run, args=(list(argv), dict(env), str(log)))
        self._process.daemon = True
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        _running.append(self)

    @property
    def returncode(self) -> int | None:
        """The exit code once it exited (-N: killed by signal N), else None."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code; `subprocess.TimeoutExpired` if it still runs after `timeout` s."""
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _run(argv: list[str], env: dict[str, str], log: str) -> None:
    """The forked child: become the command."""
    die_with_parent(signal.SIGKILL)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    out = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    from chatd.cli import main

    main(argv)


@atexit.register
def _kill_running() -> None:
    """SIGKILL what a test left running as this interpreter exits (multiprocessing would
    send SIGTERM and wait for each graceful shutdown)."""
    for process in _running:
        process.kill()
