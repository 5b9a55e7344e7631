"""Free ports and child-process plumbing shared by the dev-stack servers."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "PORT_ATTEMPTS",
    "bound_socket",
    "clear_orphan",
    "free_port",
    "kill_child",
    "kill_process_group",
    "log_tail",
    "pdeathsig_preexec",
    "pid_alive",
    "port_accepts",
    "port_was_taken",
    "process_cmdline",
    "register_child",
    "run_coro_in_thread",
    "spawn_child",
    "start_picking_ports_again",
    "stop_child",
    "unregister_child",
    "wait_exit",
    "write_owner_file",
]

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000
_random = random.SystemRandom()
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()
_forker_pool: concurrent.futures.ThreadPoolExecutor | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on `host` now, chosen below the kernel's ephemeral range.

    Binding port 0 would pick from the ephemeral range, which the kernel also hands to every
    outgoing connection and to every server that binds port 0 (the Temporal dev server's
    internal services do). A port chosen there can be taken before our server binds it, which
    made two dev stacks started side by side fail with "address already in use".
    """
    low, high = _ports_outside_ephemeral_range()
    for _ in range(200):
        port = _random.randint(low, high)
        if _bindable(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def bound_socket(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to a free port (as `free_port` picks them), for a server to listen
    on: held from the pick, so no other process can take the port before the server starts.

    Made with the protocol named: asyncio turns Nagle's algorithm off only on connections of
    a socket whose protocol is TCP, and with it on, a response's body written after its
    headers waits for the client's delayed ACK (40 ms)."""
    for _ in range(20):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.bind((host, free_port(host)))
        except OSError:  # taken between the pick and this bind
            sock.close()
            continue
        return sock
    raise OSError(f"no free port on {host} could be bound")


def _ports_outside_ephemeral_range() -> tuple[int, int]:
    """The unprivileged ports below the ephemeral range (or above it, if that is wider)."""
    try:
        low, high = (int(n) for n in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below = (_LOWEST_PORT, low - 1)
    above = (high + 1, 65535)
    return below if below[1] - below[0] >= above[1] - above[0] else above


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return whether a TCP connection to `host:port` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path | None, lines: int = 40) -> str:
    """Return the last `lines` lines of a log file (or a placeholder if unreadable)."""
    if path is None:
        return "<no log file>"
    try:
        data = path.read_bytes()[-64_000:]
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) or "<empty log>"


PORT_ATTEMPTS = 3
"""How many times a server whose picked port was taken first is started on new ports."""


def port_was_taken(log: Path | None, start_marker: str) -> bool:
    """Whether a server's log since its last start (its last line starting `start_marker`:
    the log is appended to) says a port it was given was already bound."""
    since_start = log_tail(log, lines=200).rsplit(start_marker, 1)[-1]
    return "address already in use" in since_start.lower()


def start_picking_ports_again(
    pick: Callable[[], None] | None, start: Callable[[], None], taken: type[Exception]
) -> None:
    """`pick()` ports, then `start()`; again while the start raises `taken`, up to
    `PORT_ATTEMPTS` times. A port is free when picked, but another process can bind it
    before the server does. Without `pick` (the caller chose every port, and a client may
    already have them) `taken` is raised at once."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        if pick is not None:
            pick()
        try:
            start()
        except taken:
            if pick is None or attempt == PORT_ATTEMPTS:
                raise
        else:
            return


def pdeathsig_preexec(sig: int) -> Callable[[], None] | None:
    """Return a `preexec_fn` making the child get `sig` when its parent dies (Linux, main thread).

    The kernel delivers the signal when the *thread* that forked exits, so this is only
    used when spawning from the main thread; elsewhere, use `spawn_child`.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return _death_signal_preexec(sig)


def die_with_parent(sig: int) -> None:
    """Make this process get `sig` when its parent dies (Linux; elsewhere nothing): for a
    child forked by other means than `subprocess` (a fork server's)."""
    prctl = _prctl()
    if prctl is not None:
        _arm_death_signal(prctl, sig, os.getppid())


def _prctl() -> Callable[..., int] | None:
    """libc's `prctl` (None where there is none)."""
    if not hasattr(os, "fork"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def _death_signal_preexec(sig: int) -> Callable[[], None] | None:
    """A `preexec_fn` arming the parent-death signal (None where there is no prctl)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()
    return lambda: _arm_death_signal(prctl, sig, parent)


def _arm_death_signal(prctl: Callable[..., int], sig: int, parent: int) -> None:
    prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def spawn_child(args: list[str], *, death_signal: int, **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **popen)` for a server child that gets `death_signal` when this
    process dies, however it dies (SIGKILL included; Linux).

    The kernel sends the parent-death signal when the *thread* that forked the child exits.
    Servers are started from worker threads (`asyncio.to_thread`), so the child is forked by
    one thread that lives as long as the process: a retiring pool thread must not kill it,
    and a thread that can't arm the signal must not leave it behind as an orphan.
    """
    preexec = _death_signal_preexec(death_signal)
    if preexec is None:
        return subprocess.Popen(args, **popen)  # no prctl: the atexit cleanup only
    started = _forker().submit(lambda: subprocess.Popen(args, preexec_fn=preexec, **popen))
    return started.result()


def _forker() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that forks server children (made on first use)."""
    global _forker_pool
    with _children_lock:
        if _forker_pool is None:
            _forker_pool = concurrent.futures.ThreadPoolExecutor(1, "chatd-forker")
        return _forker_pool


def register_child(proc: subprocess.Popen[bytes]) -> None:
    """Remember a child so it is killed when this interpreter exits."""
    with _children_lock:
        _children[proc.pid] = proc


def unregister_child(proc: subprocess.Popen[bytes]) -> None:
    """Forget a child that has been reaped."""
    with _children_lock:
        _children.pop(proc.pid, None)


def kill_process_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the child's process group (it was started with a new session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to `timeout` seconds for the child to exit; return whether it did."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def stop_child(proc: subprocess.Popen[bytes] | None, *asks: tuple[int, float]) -> None:
    """Ask the child to stop with each (signal, seconds to wait) in turn; if it still runs,
    SIGKILL its process group."""
    if proc is None or proc.poll() is not None:
        return
    for sig, timeout in asks:
        proc.send_signal(sig)
        if wait_exit(proc, timeout):
            return
    kill_process_group(proc)
    wait_exit(proc, 5.0)


def kill_child(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL the child's process group at once (a crash, for chaos tests)."""
    if proc is not None:
        kill_process_group(proc, signal.SIGKILL)
        wait_exit(proc, 10.0)


@atexit.register
def _kill_children_at_exit() -> None:
    with _children_lock:
        procs = list(_children.values())
        _children.clear()
    for proc in procs:
        kill_process_group(proc, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    for proc in procs:
        wait_exit(proc, max(0.0, deadline - time.monotonic()))


def run_coro_in_thread(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion on a private event loop in a helper thread.

    Works whether or not the caller already runs an event loop, and never touches the
    caller thread's current-loop setting.
    """
    box: dict[str, Any] = {}

    def _runner() -> None:
        loop = asyncio.new_event_loop()
        try:
            box["result"] = loop.run_until_complete(factory())
        except BaseException as exc:
            box["error"] = exc
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=_runner, name="chatd-devstack-probe", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat_line.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def process_cmdline(pid: int) -> list[str] | None:
    """The argv of a live process (None if gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def write_owner_file(path: Path, child_pid: int) -> None:
    """Record which process (us) owns which server child, to recognise orphans later."""
    path.write_text(json.dumps({"owner": os.getpid(), "child": child_pid}) + "\n")


def clear_orphan(path: Path, what: str, is_ours: Callable[[list[str]], bool], sig: int) -> None:
    """Stop a server child whose owner died without stopping it (recorded in `path`).

    Raises RuntimeError if the child is still owned by a live process.
    """
    try:
        state = json.loads(path.read_text())
        owner, child = int(state["owner"]), int(state["child"])
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return
    argv = process_cmdline(child) if pid_alive(child) else None
    if argv is not None and is_ours(argv):
        if pid_alive(owner):
            raise RuntimeError(
                f"{what} (pid {child}) is still running, owned by live process {owner}; "
                "stop that process first"
            )
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, sig)
        deadline = time.monotonic() + 30.0
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            time.sleep(0.2)
    path.unlink(missing_ok=True)
