"""PostgreSQL settings for the throwaway clusters of tests and benchmarks."""

from __future__ import annotations

__all__ = ["THROWAWAY_PG_SETTINGS"]

THROWAWAY_PG_SETTINGS = {
    # Nothing survives a crash with these: never use them for `chatd dev` data.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
"""Durability off: the data dies with the test or benchmark anyway, and writes get cheap."""
