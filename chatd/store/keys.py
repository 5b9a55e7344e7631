"""API keys: stored as SHA-256 hashes, checked in constant time, each owned by one owner."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime

import asyncpg
from pydantic import BaseModel

__all__ = ["ApiKey", "KeyStore", "hash_key"]

KEY_PREFIX = "chatd_"


class ApiKey(BaseModel):
    """A key as listed (never the secret itself)."""

    id: uuid.UUID
    owner: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


def hash_key(plaintext: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


class KeyStore:
    """Creates, lists, revokes and verifies API keys."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, owner: str, name: str = "", plaintext: str | None = None) -> str:
        """Store a key for `owner` (a fresh random one unless given); return the plaintext."""
        key = plaintext or KEY_PREFIX + secrets.token_urlsafe(32)
        await self._pool.execute(
            """INSERT INTO api_keys (id, owner, name, prefix, key_hash) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (key_hash) DO UPDATE SET revoked_at = NULL, owner = EXCLUDED.owner""",
            uuid.uuid4(),
            owner,
            name,
            key[:12],
            hash_key(key),
        )
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
