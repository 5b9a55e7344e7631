"""Sealing compaction summaries: the `encrypted_content` of a `compaction` item is opaque to
the client and opens only on this deployment, for the owner it was made for.

AES-256-GCM under a key derived (HKDF) from each codec key (`CHATD_CODEC_KEYS`: the first
seals, every one opens, so rotation works as for history), or, with no codec key, from a
random key the deployment keeps in Postgres (`server_keys`), the same for every gateway.
The owner is the associated data: an item is refused for anyone else, and any change to it
fails to open.
"""

from __future__ import annotations

import base64
import binascii
import os

import asyncpg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from chatd.codec import CodecKeys

__all__ = ["CompactionSeal"]

_VERSION = "cmp1"
_NONCE_BYTES = 12
_SERVER_KEY = "compaction"


def _derived(key: bytes) -> AESGCM:
    """A key for this use only, so a sealed summary can't be confused with a payload."""
    hkdf = HKDF(algorithm=SHA256(), length=32, salt=None, info=b"chatd compaction item")
    return AESGCM(hkdf.derive(key))


class CompactionSeal:
    """Seals and opens compaction summaries."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        self._current = keys[0][0]
        self._ciphers = {key_id: _derived(key) for key_id, key in keys}

    @classmethod
    async def load(cls, pool: asyncpg.Pool, codec_keys: CodecKeys | None) -> CompactionSeal:
        """The codec's keys, or else the deployment's own key (made by the first gateway)."""
        if codec_keys is not None:
            return cls(list(codec_keys.keys))
        await pool.execute(
            "INSERT INTO server_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            _SERVER_KEY,
            os.urandom(32),
        )
        key = await pool.fetchval("SELECT key FROM server_keys WHERE name = $1", _SERVER_KEY)
        return cls([("server", bytes(key))])

    def seal(self, owner: str, summary: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self._current].encrypt(nonce, summary.encode(), owner.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{_VERSION}.{self._current}.{body}"

    def open(self, owner: str, sealed: str) -> str:
        """The summary; ValueError if this deployment did not seal it for `owner`, or it was
        changed."""
        version, _, rest = sealed.partition(".")
        key_id, _, body = rest.rpartition(".")
        cipher = self._ciphers.get(key_id)
        if version != _VERSION or cipher is None:
            raise ValueError("not a compaction made by this server (or its key was retired)")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], owner.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise ValueError(
                "the compaction was altered, or made for another key's owner"
            ) from None
