"""Real MCP test servers (`mcp_server_tools.py`) and `CHATD_MCP_CONFIG` files naming them.

A stdio server is a config entry: the worker starts `sys.executable mcp_server_tools.py stdio`
itself. A streamable-HTTP server is a child process we start on a free port (`HttpMcpServer`);
its `crash` tool kills that process, and `restart()` brings it back on the same URL.

    notes = tmp_path / "notes"
    with HttpMcpServer(notes, log=tmp_path / "mcp.log") as http:
        path = write_mcp_config(tmp_path / "mcp.json", {
            "local": stdio_entry(notes),
            "remote": http.entry(),
        })
        # point a worker at it: env CHATD_MCP_CONFIG=str(path)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from chatd.devstack.ports import (
    free_port,
    log_tail,
    pdeathsig_preexec,
    port_accepts,
    register_child,
    unregister_child,
)

__all__ = [
    "MCP_SERVER_SCRIPT",
    "NOTES_ENV",
    "HttpMcpServer",
    "notes_written",
    "stdio_entry",
    "write_mcp_config",
]

MCP_SERVER_SCRIPT = Path(__file__).with_name("mcp_server_tools.py")
"""The test server: `add`, `echo`, `write_note`, `image`, `structured`, `fail`, `crash`,
`slow`, `pid`, `header`."""

NOTES_ENV = "CHATD_TEST_MCP_NOTES"
"""The file the server's `write_note` tool appends a line to (same name as in the script)."""


def stdio_entry(notes: Path, *, timeout_s: float | None = None) -> dict[str, Any]:
    """A config entry that starts the test server over stdio."""
    entry: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(MCP_SERVER_SCRIPT), "stdio"],
        "env": {NOTES_ENV: str(notes)},
    }
    if timeout_s is not None:
        entry["timeout_s"] = timeout_s
    return entry


def write_mcp_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    """Write a `CHATD_MCP_CONFIG` file naming `servers`; returns its path."""
    path.write_text(json.dumps({"mcpServers": servers}, indent=2), encoding="utf-8")
    return path


def notes_written(notes: Path) -> list[str]:
    """The lines `write_note` appended, in order (none if it never ran)."""
    return notes.read_text(encoding="utf-8").splitlines() if notes.exists() else []


class HttpMcpServer:
    """The test server over streamable HTTP, in a child process on a free port."""

    def __init__(
        self, notes: Path, *, log: Path, port: int | None = None, legacy: bool = False
    ) -> None:
        """Not started yet: use it as a context manager, or `start()` and `stop()`. A `legacy`
        server speaks only the pre-2026 protocol (initialize handshake, HTTP session ids)."""
        self.notes = notes
        self.legacy = legacy
        self.log = log
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def entry(self, *, timeout_s: float | None = None, **headers: str) -> dict[str, Any]:
        """A config entry for this server."""
        entry: dict[str, Any] = {"url": self.url}
        if headers:
            entry["headers"] = headers
        if timeout_s is not None:
            entry["timeout_s"] = timeout_s
        return entry

    @property
    def running(self) -> bool:
        """Whether its process is alive (the `crash` tool ends it)."""
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> HttpMcpServer:
        """Start it and wait until it accepts connections."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(MCP_SERVER_SCRIPT),
                    "http",
                    str(self.port),
                    *(["legacy"] if self.legacy else []),
                ],
                env={**_inherited_env(), NOTES_ENV: str(self.notes)},
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=pdeathsig_preexec(signal.SIGKILL),
            )
        register_child(self.process)
        deadline = time.monotonic() + timeout
        while not port_accepts("127.0.0.1", self.port):
            if not self.running or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"MCP test server did not start:\n{log_tail(self.log)}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL) and reap it; nothing if it already died."""
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        unregister_child(proc)

    def restart(self) -> HttpMcpServer:
        """A new process on the same port (after a crash, say)."""
        self.stop()
        return self.start()

    def __enter__(self) -> HttpMcpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _inherited_env() -> dict[str, str]:
    """The environment the child needs to run the venv's Python (no test secrets)."""
    return {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG")}
