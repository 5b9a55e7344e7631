"""Reading a line at a prompt so that a Ctrl-C is never left waiting for a key.

`input()` raises KeyboardInterrupt when a SIGINT interrupts readline's `select()`, which
then lets Python run its signal handler. A SIGINT that lands after the prompt is printed
but before readline blocks in `select()` (a loaded machine can deschedule the client just
there) interrupts nothing: Python's flag is set, and nobody looks at it until a key is
pressed. So while a line is read, a watcher thread hears every SIGINT through the signal
wakeup fd (which cannot miss one) and interrupts the main thread with a no-op signal until
`input()` has returned; readline then ends the line as for any Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Iterator

__all__ = ["read_line"]

POKE_SIGNAL = signal.SIGUSR1
"""Interrupts the main thread's `select()`/`read()` so Python looks at its signal flag."""
POKE_EVERY_S = 0.05
"""How soon to interrupt again if a poke landed before the wait it was meant for."""
_STOP = b"\0"
"""Written to the wakeup pipe to stop the watcher (signal numbers are never 0)."""


def read_line(prompt: str) -> str:
    """`input(prompt)`, where a Ctrl-C always raises KeyboardInterrupt."""
    with _sigint_reaches_input():
        return input(prompt)


def _ignore(_signum: int, _frame: object) -> None:
    """The poke only has to interrupt a system call."""


@contextlib.contextmanager
def _sigint_reaches_input() -> Iterator[None]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    watcher = _Watcher(read_fd, threading.get_ident())
    old_poke = signal.signal(POKE_SIGNAL, _ignore)
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher.start()
    try:
        yield
    finally:
        watcher.stop()
        os.write(write_fd, _STOP)
        watcher.join()  # before the poke's handler goes: an unhandled SIGUSR1 kills
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(POKE_SIGNAL, old_poke)
        os.close(read_fd)
        os.close(write_fd)


class _Watcher(threading.Thread):
    """After a SIGINT, pokes the reading thread until the read is over."""

    def __init__(self, wakeup_fd: int, reader: int) -> None:
        super().__init__(name="chatd-sigint-watch", daemon=True)
        self._wakeup_fd = wakeup_fd
        self._reader = reader
        self._lock = threading.Lock()
        self._reading = True

    def stop(self) -> None:
        """The read is over: poke no more."""
        with self._lock:
            self._reading = False

    def run(self) -> None:
        sigint = False
        while True:
            timeout = POKE_EVERY_S if sigint else None
            ready, _, _ = select.select([self._wakeup_fd], [], [], timeout)
            if ready:
                sigint |= signal.SIGINT in os.read(self._wakeup_fd, 512)
            with self._lock:
                if not self._reading:
                    return
                if sigint:
                    signal.pthread_kill(self._reader, POKE_SIGNAL)
