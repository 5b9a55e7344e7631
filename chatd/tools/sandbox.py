"""Where an `execute` command runs: in a bubblewrap sandbox, or (only if the operator says so)
directly on the worker.

The sandbox (`bwrap`) gives the command new user, PID, IPC, UTS, cgroup and (unless network is
allowed) network namespaces: it runs as uid 65534 with no capabilities, sees a fresh `/proc`
holding only its own processes, a read-only system (`/usr` and a few files of `/etc`), a
private `/tmp` and `/dev`, and the chat's workspace as `/workspace`, the only thing it can
write. Nothing else of the worker's filesystem is mounted, so no other chat's workspace is
there to reach. bwrap itself is started with the sandbox's minimal environment: PID 1 inside
is bwrap, and its `/proc/1/environ` must not hold the worker's credentials.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

__all__ = [
    "SANDBOX_UID",
    "WORKSPACE_MOUNT",
    "Bubblewrap",
    "Launch",
    "NoSandbox",
    "Sandbox",
    "SandboxUnavailable",
    "available_bubblewrap",
]

SANDBOX_UID = 65534
"""The uid and gid a sandboxed command runs as (`nobody`), inside its own user namespace."""
WORKSPACE_MOUNT = "/workspace"
"""Where the chat's workspace appears in the sandbox; the command starts there."""

_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_TOP_LEVEL_SYSTEM = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Directories that are symlinks into /usr on merged-/usr systems, real ones elsewhere."""
_ETC_FILES = (
    "alternatives",  # Debian's /usr/bin/awk and friends point here
    "ca-certificates",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "resolv.conf",
    "ssl",
)
"""The parts of /etc commands need; the rest (passwd, the worker's own config) stays out."""
_PROBE_TIMEOUT_SECONDS = 30


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create its namespaces here."""


class Launch(NamedTuple):
    """How to start one command: its argv, environment and working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


class Sandbox(Protocol):
    """Turns a shell command for a workspace into the process to start."""

    @property
    def summary(self) -> str:
        """What the command can and cannot reach, for the tool's description."""
        ...

    def launch(self, command: str, workspace: Path) -> Launch:
        """The process that runs `command` with /bin/sh -c in `workspace`."""
        ...


def _environment(home: str, path: str) -> dict[str, str]:
    return {
        "PATH": path,
        "HOME": home,
        "PWD": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
    }


@dataclass(frozen=True)
class NoSandbox:
    """Runs the command as the worker's user, seeing everything that user can (including the
    worker's `/proc/<pid>/environ` and other chats' workspaces); only for operators who set
    `CHATD_EXECUTE_UNSANDBOXED=1`. The command still gets a minimal environment of its own."""

    summary: str = "It runs directly on the server."

    def launch(self, command: str, workspace: Path) -> Launch:
        """/bin/sh -c in the workspace, with the worker's PATH."""
        env = _environment(str(workspace), os.environ.get("PATH", _SYSTEM_PATH))
        return Launch(["/bin/sh", "-c", command], env, workspace)


def _system_mounts() -> list[str]:
    """Read-only /usr and the top-level system directories, as they are on this host."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL_SYSTEM:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


@dataclass(frozen=True)
class Bubblewrap:
    """Runs the command in a bwrap sandbox (see the module docstring)."""

    bwrap: str
    """Path of the bwrap executable."""
    network: bool = False
    """Share the worker's network namespace (`CHATD_EXECUTE_NETWORK=1`); off by default."""

    @property
    def summary(self) -> str:
        """What the command can reach."""
        network = "has network access" if self.network else "has no network access"
        return (
            f"It runs in an isolated sandbox: your workspace is {WORKSPACE_MOUNT} (the only "
            f"writable place besides a private /tmp), the system is read-only, and it {network}."
        )

    def launch(self, command: str, workspace: Path) -> Launch:
        """bwrap around /bin/sh -c, with only `workspace` mounted from the worker's files."""
        argv = [
            self.bwrap,
            "--unshare-all",
            *(["--share-net"] if self.network else []),
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
            "--die-with-parent",  # the worker's kill of bwrap ends the PID namespace, and all in it
            "--new-session",  # no TIOCSTI into a terminal the worker might have
            *_system_mounts(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--bind",
            str(workspace),
            WORKSPACE_MOUNT,
            "--remount-ro",  # the root bwrap builds is a tmpfs: after the mounts, freeze it
            "/",
            "--chdir",
            WORKSPACE_MOUNT,
            "/bin/sh",
            "-c",
            command,
        ]
        # bwrap passes its own environment on; it must be this one, not the worker's.
        return Launch(argv, _environment(WORKSPACE_MOUNT, _SYSTEM_PATH), workspace)

    def probe(self) -> None:
        """Run `true` in a sandbox like a command's; SandboxUnavailable with bwrap's reason."""
        with tempfile.TemporaryDirectory(prefix="chatd-sandbox-probe-") as workspace:
            launch = self.launch("true", Path(workspace))
            try:
                done = subprocess.run(
                    launch.argv,
                    env=launch.env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=_PROBE_TIMEOUT_SECONDS,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as err:
                raise SandboxUnavailable(f"{self.bwrap} could not be run: {err}") from err
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
            raise SandboxUnavailable(f"{self.bwrap} cannot create a sandbox here: {reason}")


def available_bubblewrap(network: bool = False) -> Bubblewrap:
    """A Bubblewrap that has just run a command, or SandboxUnavailable saying why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bwrap is not installed (Debian/Ubuntu: apt install bubblewrap)")
    sandbox = Bubblewrap(bwrap, network=network)
    sandbox.probe()
    return sandbox
