"""Encrypting every payload chatd hands to Temporal (AES-256-GCM), so no chat content sits in
a workflow history in clear text.

Keys come from `CHATD_CODEC_KEYS` (`id1:base64key,id2:base64key`): the first encrypts, all
decrypt, so a key is rotated by putting a new one first and dropping the old one once no
history that still needs it is retained. Each encrypted payload names its key in its
metadata. Temporal never passes search attributes through a codec: those stay in clear
text (see the README).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = [
    "ENCRYPTED_ENCODING",
    "KEYS_ENV",
    "KEY_ID_METADATA",
    "CodecKeyError",
    "CodecKeys",
    "EncryptionCodec",
    "codec_from_env",
    "new_key",
]

KEYS_ENV = "CHATD_CODEC_KEYS"
ENCRYPTED_ENCODING = b"binary/encrypted"
"""The `encoding` of an encrypted payload (the name Temporal's samples use)."""
KEY_ID_METADATA = "encryption-key-id"
_NONCE_BYTES = 12
_KEY_BYTES = 32


class CodecKeyError(ValueError):
    """`CHATD_CODEC_KEYS` is malformed, or a payload names a key we don't have."""


@dataclass(frozen=True)
class CodecKeys:
    """The keys by id, in order: the first one encrypts."""

    keys: tuple[tuple[str, bytes], ...]

    @classmethod
    def parse(cls, text: str) -> CodecKeys:
        """Read `id1:base64key,id2:base64key`; the message of an error never shows a key."""
        keys: list[tuple[str, bytes]] = []
        for entry in filter(None, (e.strip() for e in text.split(","))):
            key_id, sep, encoded = entry.partition(":")
            key_id = key_id.strip()
            if not sep or not key_id:
                raise CodecKeyError(f"{KEYS_ENV}: each entry must be `id:base64key`")
            if any(key_id == known for known, _ in keys):
                raise CodecKeyError(f"{KEYS_ENV}: key id {key_id!r} appears twice")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                raise CodecKeyError(f"{KEYS_ENV}: key {key_id!r} is not base64") from None
            if len(key) != _KEY_BYTES:
                raise CodecKeyError(
                    f"{KEYS_ENV}: key {key_id!r} has {len(key)} bytes; AES-256 takes 32"
                )
            keys.append((key_id, key))
        if not keys:
            raise CodecKeyError(f"{KEYS_ENV} holds no key")
        return cls(tuple(keys))

    @property
    def current_id(self) -> str:
        """The id of the key that encrypts."""
        return self.keys[0][0]


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each whole serialized payload; the key id is also the associated
    data, so a payload can't be passed off as another key's."""

    def __init__(self, keys: CodecKeys) -> None:
        super().__init__()
        self._current = keys.current_id
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.keys}

    async def encode(self, payloads: Iterable[Payload]) -> list[Payload]:
        """Encrypt every payload with the current key."""
        cipher = self._ciphers[self._current]
        key_id = self._current.encode()
        encoded = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), key_id)
            encoded.append(
                Payload(
                    metadata={"encoding": ENCRYPTED_ENCODING, KEY_ID_METADATA: key_id},
                    data=nonce + sealed,
                )
            )
        return encoded

    async def decode(self, payloads: Iterable[Payload]) -> list[Payload]:
        """Decrypt what we encrypted, with the key it names. Any other payload passes as it
        is: one written before the codec was on, or sent by a tool without it (the
        `temporal` CLI's `--input`)."""
        return [self._decrypt(p) for p in payloads]

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"")
        cipher = self._ciphers.get(key_id.decode(errors="replace"))
        if cipher is None:
            raise CodecKeyError(f"no key {key_id.decode(errors='replace')!r} in {KEYS_ENV}")
        nonce, sealed = payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:]
        try:
            return Payload.FromString(cipher.decrypt(nonce, sealed, key_id))
        except InvalidTag:
            raise CodecKeyError(
                f"payload does not decrypt with key {key_id.decode(errors='replace')!r}"
            ) from None


def codec_from_env(env: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The codec `CHATD_CODEC_KEYS` configures; None when it is unset (encryption off)."""
    text = (os.environ if env is None else env).get(KEYS_ENV, "").strip()
    return EncryptionCodec(CodecKeys.parse(text)) if text else None


def new_key() -> str:
    """A fresh random key, base64 (for `CHATD_CODEC_KEYS`)."""
    return base64.b64encode(os.urandom(_KEY_BYTES)).decode()
