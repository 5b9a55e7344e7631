"""Sealing items for clients to hold: the `encrypted_content` of a `compaction` item (a
summary) and of a `reasoning` item (the provider's own reasoning state: signed thinking,
redacted thinking, encrypted reasoning) is opaque to the client and opens only on this
deployment, for the owner it was made for, as the kind of item it was sealed as.

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
from typing import Literal

import asyncpg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from chatd.codec import CodecKeys

__all__ = ["CompactionSeal", "SealedKind"]

SealedKind = Literal["compaction", "reasoning"]
_VERSIONS: dict[SealedKind, str] = {"compaction": "cmp1", "reasoning": "rsn1"}
_NONCE_BYTES = 12
_SERVER_KEY = "compaction"


def _derived(key: bytes, kind: SealedKind) -> AESGCM:
    """A key for this kind of item only, so a sealed item can't pass for another kind, nor
    for a payload."""
    hkdf = HKDF(algorithm=SHA256(), length=32, salt=None, info=f"chatd {kind} item".encode())
    return AESGCM(hkdf.derive(key))


class CompactionSeal:
    """Seals and opens compaction summaries and reasoning state."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        self._current = keys[0][0]
        self._ciphers = {
            (kind, key_id): _derived(key, kind) for key_id, key in keys for kind in _VERSIONS
        }

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

    def seal(self, owner: str, text: str, kind: SealedKind = "compaction") -> str:
        nonce = os.urandom(_NONCE_BYTES)
        cipher = self._ciphers[(kind, self._current)]
        sealed = cipher.encrypt(nonce, text.encode(), owner.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{_VERSIONS[kind]}.{self._current}.{body}"

    def open(self, owner: str, sealed: str, kind: SealedKind = "compaction") -> str:
        """The sealed text; ValueError if this deployment did not seal it as `kind` for
        `owner`, or it was changed."""
        version, _, rest = sealed.partition(".")
        key_id, _, body = rest.rpartition(".")
        cipher = self._ciphers.get((kind, key_id))
        if version != _VERSIONS[kind] or cipher is None:
            raise ValueError(f"not a {kind} made by this server (or its key was retired)")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], owner.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise ValueError(f"the {kind} was altered, or made for another key's owner") from None
