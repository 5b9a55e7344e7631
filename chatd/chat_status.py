"""A chat's status, and the two in which a turn holds the chat.

A chat is `waiting` (idle, its last turn ended well), `running`, `requires_action` (its
turn waits for tool results or an approval) or `error` (its last turn failed). While a turn
holds it, a new message queues, an edit is refused, the concurrency quota counts it and
retention keeps its rows: every such check uses `BUSY` or, in SQL, `busy_sql`.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["BUSY", "BusyStatus", "ChatStatus", "busy_sql"]

ChatStatus = Literal["waiting", "running", "requires_action", "error"]
BusyStatus = Literal["running", "requires_action"]
"""The statuses of a chat a turn holds."""
BUSY: Final[frozenset[str]] = frozenset(get_args(BusyStatus))


def busy_sql(column: str = "status") -> str:
    """`column IN ('running', 'requires_action')`, for a query's WHERE."""
    quoted = ", ".join(f"'{status}'" for status in get_args(BusyStatus))
    return f"{column} IN ({quoted})"
