"""How the Temporal client's TLS follows the settings: Temporal Cloud with an API key alone
must get TLS, a local dev server without a key must not."""

from __future__ import annotations

from pathlib import Path

from temporalio.service import TLSConfig

from chatd.settings import TemporalSettings
from chatd.temporal_client import _tls


def test_without_tls_settings_the_sdk_decides_by_the_api_key() -> None:
    # None is the SDK's default: TLS on when an API key is given, off otherwise.
    assert _tls(TemporalSettings(api_key="k")) is None
    assert _tls(TemporalSettings()) is None


def test_tls_settings_give_their_certificates(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"CA")
    tls = _tls(TemporalSettings(tls=True, tls_ca_path=str(ca)))
    assert isinstance(tls, TLSConfig) and tls.server_root_ca_cert == b"CA"
