"""API keys: stored as SHA-256 hashes, checked in constant time, each owned by one owner."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime

import asyncpg
from pydantic import BaseModel

__all__ = ["ApiKey", "KeyRefused", "KeyStore", "display_prefix", "hash_key"]

KEY_PREFIX = "chatd_"
SHOWN_SECRET_CHARS = 4
"""How much of a key's secret part is stored in the clear, to tell keys apart in a listing."""
MIN_CHOSEN_LENGTH = 16
"""A chosen key shorter than this is refused: its shown prefix would be too much of it."""


class ApiKey(BaseModel):
    """A key as listed (never the secret itself)."""

    id: uuid.UUID
    owner: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


class KeyRefused(Exception):
    """A chosen key the store won't take: revoked, another owner's, or too short."""


def hash_key(plaintext: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def display_prefix(plaintext: str) -> str:
    """The stored clear prefix: `chatd_` and 4 characters, or 4 characters of a key without the
    marker, whatever the key's length (a chosen key can be short)."""
    marker = KEY_PREFIX if plaintext.startswith(KEY_PREFIX) else ""
    return plaintext[: len(marker) + SHOWN_SECRET_CHARS]


class KeyStore:
    """Creates, lists, revokes and verifies API keys."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, owner: str, name: str = "", plaintext: str | None = None) -> str:
        """Store a key for `owner` (a fresh random one unless given); return the plaintext.

        A chosen key already stored, active, for the same owner is left as it is (`chatd dev`
        passes its key on every start); one revoked, another owner's or shorter than
        MIN_CHOSEN_LENGTH raises KeyRefused.
        """
        if plaintext is not None and len(plaintext) < MIN_CHOSEN_LENGTH:
            raise KeyRefused(f"a chosen key needs at least {MIN_CHOSEN_LENGTH} characters")
        key = plaintext or KEY_PREFIX + secrets.token_urlsafe(32)
        digest = hash_key(key)
        inserted = await self._pool.fetchval(
            """INSERT INTO api_keys (id, owner, name, prefix, key_hash) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (key_hash) DO NOTHING RETURNING id""",
            uuid.uuid4(),
            owner,
            name,
            display_prefix(key),
            digest,
        )
        if inserted is None:
            row = await self._pool.fetchrow(
                "SELECT owner, revoked_at FROM api_keys WHERE key_hash = $1", digest
            )
            if row is not None and row["revoked_at"] is not None:
                raise KeyRefused("this key was revoked; a revoked key is never reused")
            if row is not None and row["owner"] != owner:
                raise KeyRefused("this key belongs to another owner")
        return key

    async def list(self) -> list[ApiKey]:
        """All keys, newest first."""
        rows = await self._pool.fetch(
            "SELECT id, owner, name, prefix, created_at, revoked_at FROM api_keys"
            " ORDER BY created_at DESC"
        )
        return [ApiKey.model_validate(dict(r)) for r in rows]

    async def revoke(self, key_id: uuid.UUID) -> bool:
        """Revoke a key; False if there is no such active key."""
        result = await self._pool.execute(
            "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", key_id
        )
        return result.endswith(" 1")

    async def owner_of(self, plaintext: str) -> str | None:
        """The owner of an active key, or None."""
        digest = hash_key(plaintext)
        row = await self._pool.fetchrow(
            "SELECT owner, key_hash FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
            digest,
        )
        if row is None or not hmac.compare_digest(row["key_hash"], digest):
            return None
        return str(row["owner"])

    async def id_of(self, plaintext: str) -> uuid.UUID | None:
        """The id of an active key (what an audit records of who acted), or None."""
        key_id: uuid.UUID | None = await self._pool.fetchval(
            "SELECT id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
            hash_key(plaintext),
        )
        return key_id
