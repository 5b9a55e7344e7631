"""`chatd keys create|list|revoke` against the database the gateway uses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from importlib import resources

import asyncpg
import httpx
import pytest
from harness import Stack

from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyRefused, KeyStore


async def _chatd(database_url: str, *args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "chatd.cli", "keys", *args],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_a_created_key_works_until_it_is_revoked(stack: Stack, database_url: str) -> None:
    key = await _chatd(database_url, "create", "--owner", "carol", "--name", "laptop")
    assert key.startswith("chatd_")
    stored = await stack.pool.fetchval("SELECT key_hash FROM api_keys WHERE name = 'laptop'")
    assert key not in stored, "only the hash is stored"
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}
    ) as carol:
        assert (await carol.get("/chats")).status_code == 200
        listing = await _chatd(database_url, "list")
        line = next(row for row in listing.splitlines() if "laptop" in row)
        assert "owner=carol" in line and key not in listing and "active" in line
        await _chatd(database_url, "revoke", line.split()[0])
        assert (await carol.get("/chats")).status_code == 401
        assert "revoked" in await _chatd(database_url, "list")


@pytest.fixture
async def keys(database_url: str) -> AsyncIterator[KeyStore]:
    await migrate(database_url)
    pool = await connect_pool(database_url, min_size=1, max_size=2)
    yield KeyStore(pool)
    await pool.close()


async def test_a_chosen_key_is_reused_only_by_its_owner_and_never_once_revoked(
    keys: KeyStore,
) -> None:
    chosen = "chatd-chosen-key-for-dev"
    assert await keys.create("dev", "chatd dev", plaintext=chosen) == chosen
    assert await keys.create("dev", "chatd dev", plaintext=chosen) == chosen, "a restart"
    assert len(await keys.list()) == 1
    with pytest.raises(KeyRefused, match="another owner"):
        await keys.create("mallory", plaintext=chosen)
    assert await keys.owner_of(chosen) == "dev"
    await keys.revoke((await keys.list())[0].id)
    with pytest.raises(KeyRefused, match="revoked"):
        await keys.create("dev", "chatd dev", plaintext=chosen)
    assert await keys.owner_of(chosen) is None


async def test_only_a_fixed_length_prefix_of_a_key_is_stored(keys: KeyStore) -> None:
    generated = await keys.create("carol")
    await keys.create("dave", plaintext="a-chosen-key-of-dave")
    with pytest.raises(KeyRefused, match="at least 16 characters"):
        await keys.create("erin", plaintext="short-chosen")
    prefixes = {key.owner: key.prefix for key in await keys.list()}
    assert prefixes == {"carol": generated[:10], "dave": "a-ch"}


async def test_the_migration_cuts_prefixes_stored_before(keys: KeyStore, database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for prefix in ("chatd_AbCdEf", "chatd-test-k", "abc"):
            await conn.execute(
                "INSERT INTO api_keys (id, owner, prefix, key_hash) VALUES ($1, 'old', $2, $2)",
                uuid.uuid4(),
                prefix,
            )
        migration = resources.files("chatd.store") / "migrations" / "011_key_prefix.sql"
        await conn.execute(migration.read_text())
        stored = {r["prefix"] for r in await conn.fetch("SELECT prefix FROM api_keys")}
    finally:
        await conn.close()
    assert stored == {"chatd_AbCd", "chat", "abc"}
