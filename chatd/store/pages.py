"""Pages of a listing: each ends at its row limit or its byte budget, whichever comes first,
so one response stays bounded however large the rows are; a page always holds at least one
row (a single row over the budget still pages) and says whether more rows follow."""

from __future__ import annotations

import os
from typing import Generic, NamedTuple, TypeVar

__all__ = ["DEFAULT_PAGE_BYTES", "Page", "page_bytes"]

DEFAULT_PAGE_BYTES = 2 * 1024 * 1024
"""Room for two of the largest messages a chat holds."""

T = TypeVar("T")


class Page(NamedTuple, Generic[T]):
    """The rows of one page, and whether more rows follow them."""

    rows: list[T]
    more: bool


def page_bytes() -> int:
    """CHATD_PAGE_BYTES (default 2 MiB): the byte budget of one page of chats or messages,
    counted over the stored JSON of its rows."""
    value = os.environ.get("CHATD_PAGE_BYTES", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_PAGE_BYTES
