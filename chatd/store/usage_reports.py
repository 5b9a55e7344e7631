"""Usage reports: the tokens and cost of `step_spend`'s attempts over a period of UTC days,
summed per day, model, chat or owner, for an owner (the API) or an operator (`chatd usage`).

Summed in Postgres, one query per report: a period holds as many rows as attempts were
made, and only the groups travel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import asyncpg
from pydantic import BaseModel

__all__ = [
    "DEFAULT_DAYS",
    "MAX_DAYS",
    "Grouping",
    "Period",
    "PeriodError",
    "UsageGroup",
    "UsageReport",
    "UsageReports",
    "UsageTotal",
    "parse_day",
]

Grouping = Literal["day", "model", "chat", "owner"]

DEFAULT_DAYS = 30
"""A period without a start: the last 30 days, its end included."""
MAX_DAYS = 366
"""The longest period one report covers: a year, leap day included."""
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class PeriodError(ValueError):
    """A period refused; `param` names the bound at fault (`from` or `to`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Period:
    """UTC days from `first` through `last`."""

    first: date
    last: date

    @classmethod
    def of(cls, first: date | None, last: date | None) -> Period:
        """The period between the bounds given: `last` defaults to today (UTC), `first` to
        `DEFAULT_DAYS` days through `last`. A period ends after it starts and spans at most
        `MAX_DAYS` days (`PeriodError` otherwise)."""
        last = last or datetime.now(UTC).date()
        if first is None:
            # Never before 0001-01-01, where `date` ends.
            first = last - timedelta(days=min(DEFAULT_DAYS - 1, last.toordinal() - 1))
        if first > last:
            raise PeriodError("from", f"`from` ({first}) is after `to` ({last})")
        if (last - first).days >= MAX_DAYS:
            raise PeriodError("to", f"a report spans at most {MAX_DAYS} days")
        return cls(first, last)


def parse_day(text: str, param: str) -> date:
    """A `YYYY-MM-DD` date (`PeriodError` for anything else: `date.fromisoformat` would
    also take week dates and dates without dashes)."""
    if _DAY.fullmatch(text):
        try:
            return date.fromisoformat(text)
        except ValueError:
            pass
    raise PeriodError(param, f"`{param}` is a date as YYYY-MM-DD, not {text!r}")


class UsageTotal(BaseModel):
    """The tokens and cost of a set of model-step attempts."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost_usd: float
    """What the priced attempts cost (an attempt on a model with no price counts as none)."""
    estimated_usd: float
    """The part of `cost_usd` that is an estimate: attempts lost before the provider
    reported their usage."""
    unpriced_steps: int
    """Attempts on a model with no price: their tokens are counted, their cost is not."""
    steps: int
    """Model-step attempts (a retried step counts each attempt)."""


class UsageGroup(UsageTotal):
    """One group of a report."""

    key: str
    """The day (`YYYY-MM-DD`), the model (`provider/name`), the chat id or the owner."""


@dataclass(frozen=True)
class UsageReport:
    """A report's groups (days in order; otherwise the costliest first) and their total."""

    groups: list[UsageGroup]
    total: UsageTotal


_KEYS: dict[Grouping, str] = {
    "day": "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "model": "model",
    "chat": "chat_id::text",
    "owner": "owner",
}

# The groups and, where `key` is a grouping set of its own (`is_total`), their total: a row
# even for a period without spend. Costs are summed as numeric: a sum of doubles depends on
# the order of its terms, and a total would differ in its last digits between groupings.
_REPORT = """
WITH spent AS (
    SELECT {key} AS key, usage, cost_usd, estimated FROM step_spend
    WHERE created_at >= $1::date::timestamp AT TIME ZONE 'UTC'
      AND created_at < ($2::date + 1)::timestamp AT TIME ZONE 'UTC'{owner}
)
SELECT key, grouping(key) = 1 AS is_total,
       coalesce(sum((usage->>'input_tokens')::bigint), 0)::bigint AS input_tokens,
       coalesce(sum((usage->>'output_tokens')::bigint), 0)::bigint AS output_tokens,
       coalesce(sum((usage->>'cache_read_tokens')::bigint), 0)::bigint AS cache_read_tokens,
       coalesce(sum((usage->>'cache_write_tokens')::bigint), 0)::bigint AS cache_write_tokens,
       coalesce(sum((usage->>'reasoning_tokens')::bigint), 0)::bigint AS reasoning_tokens,
       coalesce(sum(cost_usd::numeric), 0)::float8 AS cost_usd,
       coalesce(sum(cost_usd::numeric) FILTER (WHERE estimated), 0)::float8 AS estimated_usd,
       count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced_steps,
       count(*) AS steps
FROM spent
GROUP BY GROUPING SETS ((key), ())
ORDER BY is_total, {order}
"""


def _report_query(grouping: Grouping, *, one_owner: bool) -> str:
    return _REPORT.format(
        key=_KEYS[grouping],
        owner="\n      AND owner = $3" if one_owner else "",
        order="key" if grouping == "day" else "cost_usd DESC, steps DESC, key",
    )


_QUERIES = {
    (grouping, one_owner): _report_query(grouping, one_owner=one_owner)
    for grouping in _KEYS
    for one_owner in (True, False)
}


class UsageReports:
    """Reads what model steps cost, summed for a report."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def report(
        self, period: Period, grouping: Grouping, *, owner: str | None = None
    ) -> UsageReport:
        """The spend of the period's days, grouped; one owner's, or everyone's (None)."""
        args: tuple[object, ...] = (period.first, period.last)
        if owner is not None:
            args += (owner,)
        rows = await self._pool.fetch(_QUERIES[grouping, owner is not None], *args)
        *groups, total = rows
        return UsageReport(
            groups=[UsageGroup.model_validate(dict(row)) for row in groups],
            total=UsageTotal.model_validate(dict(total)),
        )
