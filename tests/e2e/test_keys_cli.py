"""`chatd keys create|list|revoke` against the database the gateway uses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx
from harness import Stack


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
