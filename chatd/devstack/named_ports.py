"""The ports `chatd dev` listens on, each with the option that sets it: a port that can't be
had stops the start with a message naming the port and that option (not "fake provider
server failed to start" about a port nobody chose)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["NamedPort", "check_ports", "port_errors"]


@dataclass(frozen=True)
class NamedPort:
    """A port, what listens on it, and the option that chooses it (0: any free port)."""

    what: str
    port: int
    option: str
    checked_first: bool = True
    """Whether `check_ports` refuses it in use. Not for a server whose start first stops an
    orphan left holding its port by a killed `chatd dev` (Postgres, Temporal)."""

    def taken_message(self) -> str:
        """Why the start stops, and what to change."""
        return (
            f"chatd dev: port {self.port} for {self.what} is in use:"
            f" choose another with {self.option}"
        )


def _in_use(host: str, port: int) -> bool:
    """Whether a server could not bind `port` now. With SO_REUSEADDR, as servers bind: the
    connections a previous run left in TIME_WAIT don't count, a listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def check_ports(ports: Sequence[NamedPort], host: str = "127.0.0.1") -> None:
    """Stop (SystemExit) before anything starts if two options name one port, or a chosen
    port is in use (`checked_first`)."""
    by_port: dict[int, NamedPort] = {}
    for named in ports:
        if named.port == 0:
            continue
        other = by_port.setdefault(named.port, named)
        if other is not named:
            raise SystemExit(
                f"chatd dev: {other.option} and {named.option} both name port {named.port}"
                f" ({other.what} and {named.what}): choose another with one of them"
            )
        if named.checked_first and _in_use(host, named.port):
            raise SystemExit(named.taken_message())


@contextlib.contextmanager
def port_errors(*ports: NamedPort, host: str = "127.0.0.1") -> Iterator[None]:
    """Name the port and its option when a start fails because one of `ports` was taken
    meanwhile; any other failure passes as it is."""
    try:
        yield
    except (Exception, SystemExit) as err:
        for named in ports:
            if named.port and _in_use(host, named.port):
                raise SystemExit(named.taken_message()) from err
        raise
