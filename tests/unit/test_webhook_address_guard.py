"""The address guard (chatd.webhooks.address_guard): internal addresses are refused unless
the operator allows them, whatever form the URL names them in; public ones are pinned."""

from __future__ import annotations

import ipaddress

import pytest

from chatd.webhooks.address_guard import AddressRefused, is_public, resolve_target

INTERNAL = [
    "http://127.0.0.1:9000/hook",
    "http://localhost/hook",
    "http://10.1.2.3/",
    "http://192.168.0.10/",
    "http://172.16.5.4/",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]:8080/",
    "http://[fe80::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[fd00::1]/",
    "http://0.0.0.0/",
    "http://100.64.0.1/",
]


@pytest.mark.parametrize("url", INTERNAL)
async def test_internal_addresses_are_refused(url: str) -> None:
    with pytest.raises(AddressRefused, match="internal address"):
        await resolve_target(url, allow_private=False)


async def test_the_operator_may_allow_internal_addresses() -> None:
    target = await resolve_target("http://127.0.0.1:9000/hook?x=1", allow_private=True)
    assert target.url == "http://127.0.0.1:9000/hook?x=1"
    assert target.host_header == "127.0.0.1:9000"


async def test_a_public_name_is_pinned_to_its_checked_address() -> None:
    target = await resolve_target("https://93.184.215.14/a", allow_private=False)
    assert target.url == "https://93.184.215.14:443/a"
    assert target.server_name == "93.184.215.14"
    assert target.host_header == "93.184.215.14"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "/relative",
        "http:///nohost",
        "http://u:p@example.com/",
        "http://[::1/",
        "http://exa mple.com/",
        "http://example.com/\x00",
        "http://example.com:99999/",
    ],
)
async def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(AddressRefused):
        await resolve_target(url, allow_private=True)


@pytest.mark.parametrize("host", ["no-such-host.invalid", "a" * 70 + ".example.com"])
async def test_a_name_that_does_not_resolve_is_refused(host: str) -> None:
    with pytest.raises(AddressRefused, match="does not resolve"):
        await resolve_target(f"http://{host}/", allow_private=True)


def test_mapped_addresses_are_judged_as_what_they_map() -> None:
    assert not is_public(ipaddress.ip_address("::ffff:10.0.0.1"))
    assert is_public(ipaddress.ip_address("::ffff:8.8.8.8"))
    assert not is_public(ipaddress.ip_address("224.0.0.1"))
