"""The process's one TLS client context.

httpx builds a context for every client it makes, and building one loads the whole CA
bundle: tens of milliseconds of CPU, spent again for each webhook delivery, each provider
client and each context-window lookup. A context is safe to share, so a process builds one
and hands it to every client it makes (`verify=client_context()`).
"""

from __future__ import annotations

import functools
import os
import ssl

import certifi

__all__ = ["client_context"]


@functools.cache
def client_context() -> ssl.SSLContext:
    """The verifying context httpx would build: `SSL_CERT_FILE` or `SSL_CERT_DIR` when set
    (as httpx honours them), else certifi's bundle."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context(cafile=certifi.where())
