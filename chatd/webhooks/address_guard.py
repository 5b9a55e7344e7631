"""The address guard: a worker never sends a webhook to a private, loopback, link-local or
otherwise internal address unless the operator allows it (`CHATD_WEBHOOK_ALLOW_PRIVATE=1`).

Every address the host resolves to is checked, and the request then goes to one of those
checked addresses (`PinnedTarget`), so a name that resolves differently a moment later (DNS
rebinding) can't steer the request inside.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

__all__ = ["AddressRefused", "PinnedTarget", "check_url", "is_public", "resolve_target"]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """The URL can't be sent to: a bad URL, a host that doesn't resolve, or an internal
    address the operator didn't allow."""


@dataclass(frozen=True)
class PinnedTarget:
    """Where a request goes: `url` names the checked address; `host_header` and
    `server_name` (TLS SNI and the certificate check) name the URL's host."""

    url: str
    host_header: str
    server_name: str


def is_public(address: IpAddress) -> bool:
    """Whether an address is on the public internet (an IPv4-mapped IPv6 address is judged
    as the IPv4 address it maps)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def check_url(url: str) -> tuple[str, str, int]:
    """The URL's scheme, host and port, if it is an absolute http(s) URL."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise AddressRefused("the URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as err:
        raise AddressRefused(f"bad URL: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("the URL must be absolute, http or https, with a host")
    if parts.username or parts.password:
        raise AddressRefused("the URL must not carry credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise AddressRefused(f"bad port: {err}") from None
    return parts.scheme, parts.hostname, port


async def _resolve(host: str, port: int) -> list[IpAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as err:
        raise AddressRefused(f"host {host!r} does not resolve: {err}") from None
    # An IPv6 scope ("fe80::1%eth0") is dropped: the address decides.
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


async def resolve_target(url: str, *, allow_private: bool) -> PinnedTarget:
    """`url` pinned to the first of its host's addresses, once all of them were found
    public (or the operator allows internal ones)."""
    scheme, host, port = check_url(url)
    addresses = await _resolve(host, port)
    if not addresses:
        raise AddressRefused(f"host {host!r} has no address")
    internal = [str(a) for a in addresses if not is_public(a)]
    if internal and not allow_private:
        raise AddressRefused(
            f"host {host!r} resolves to an internal address ({', '.join(internal)}); "
            "set CHATD_WEBHOOK_ALLOW_PRIVATE=1 to allow it"
        )
    first = addresses[0]
    literal = f"[{first}]" if first.version == 6 else str(first)
    parts = urlsplit(url)
    pinned = urlunsplit((scheme, f"{literal}:{port}", parts.path, parts.query, ""))
    named = f"[{host}]" if ":" in host else host
    host_header = named if parts.port is None else f"{named}:{port}"
    return PinnedTarget(url=pinned, host_header=host_header, server_name=host)
