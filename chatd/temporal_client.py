"""Connecting to Temporal with the project's data converter."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.service import TLSConfig

from chatd.codec import codec_from_env
from chatd.settings import TemporalSettings

__all__ = ["connect_temporal", "data_converter"]


def _tls(settings: TemporalSettings) -> TLSConfig | None:
    """TLS as configured; otherwise the SDK's default (None): on with an API key, as
    Temporal Cloud needs, off without one."""
    if not settings.tls:
        return None

    def read(path: str | None) -> bytes | None:
        return Path(path).read_bytes() if path else None

    return TLSConfig(
        client_cert=read(settings.tls_cert_path),
        client_private_key=read(settings.tls_key_path),
        server_root_ca_cert=read(settings.tls_ca_path),
    )


def data_converter() -> DataConverter:
    """Pydantic payloads; with `CHATD_CODEC_KEYS` set, every payload encrypted and failure
    messages and stack traces moved into an encrypted payload too (a provider's error text
    would otherwise sit in the history in clear text)."""
    codec = codec_from_env()
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


async def connect_temporal(settings: TemporalSettings) -> Client:
    """A client that encodes pydantic payloads (encrypted when configured): the gateway and
    the workers both connect here, so they always agree on the codec."""
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        tls=_tls(settings),
        api_key=settings.api_key,
        data_converter=data_converter(),
        # Also applies to workers built on this client: spans flow gateway -> workflow ->
        # activity, and are no-ops unless a tracer provider is configured.
        interceptors=[TracingInterceptor()],
    )
