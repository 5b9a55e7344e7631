"""Usage reports: the key owner's tokens and cost per day, model or chat."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal, get_args

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from api.access import Owner
from api.errors import ApiError
from api.state import state_of
from chatd.store.usage_reports import (
    DEFAULT_DAYS,
    MAX_DAYS,
    Period,
    PeriodError,
    UsageGroup,
    UsageReports,
    UsageTotal,
    parse_day,
)

__all__ = ["router"]

router = APIRouter(prefix="/usage", tags=["spend"])

OwnerGrouping = Literal["day", "model", "chat"]
"""What an owner's report groups by (an operator's, `chatd usage`, by owner too)."""
_GROUPINGS: dict[str, OwnerGrouping] = {name: name for name in get_args(OwnerGrouping)}


class UsageList(BaseModel):
    """Body of `GET /usage`: the groups (days in order; models and chats the costliest
    first) and their total."""

    model_config = ConfigDict(populate_by_name=True)

    object: Literal["list"] = "list"
    group_by: OwnerGrouping
    from_: date = Field(alias="from")
    to: date
    data: list[UsageGroup]
    total: UsageTotal


# Declared as strings and checked here, not by FastAPI, so a bad value's 400 names its
# `param`; the document still says what is valid.
_DAY_QUERY = {"format": "date"}


@router.get(
    "",
    response_model=UsageList,
    responses={400: {"description": "a bad `group_by`, `from` or `to` (`detail.param`)"}},
)
async def get_usage(
    request: Request,
    owner: Owner,
    group_by: Annotated[
        str,
        Query(
            description="`day` (UTC), `model` (`provider/name`) or `chat` (a subagent is a"
            " chat of its own)",
            json_schema_extra={"enum": list(_GROUPINGS)},
        ),
    ] = "day",
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            description=f"The first UTC day (default: {DEFAULT_DAYS} days through `to`).",
            json_schema_extra=_DAY_QUERY,
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(
            description=f"The last UTC day, included (default: today): a report spans at"
            f" most {MAX_DAYS} days.",
            json_schema_extra=_DAY_QUERY,
        ),
    ] = None,
) -> UsageList:
    """Your model steps' tokens and cost over a period of UTC days, grouped. Each attempt
    of a step counts (a retry too); a step lost before its provider reported is an
    estimate (`estimated_usd`); a model with no price adds tokens, not cost
    (`unpriced_steps`)."""
    grouping = _GROUPINGS.get(group_by)
    if grouping is None:
        raise ApiError(
            400,
            "invalid_request",
            f"`group_by` is one of {', '.join(_GROUPINGS)}, not {group_by!r}",
            {"param": "group_by"},
        )
    try:
        period = Period.of(
            parse_day(from_, "from") if from_ is not None else None,
            parse_day(to, "to") if to is not None else None,
        )
    except PeriodError as err:
        raise ApiError(400, "invalid_request", str(err), {"param": err.param}) from None
    report = await UsageReports(state_of(request).pool).report(period, grouping, owner=owner)
    return UsageList(
        group_by=grouping,
        from_=period.first,
        to=period.last,
        data=report.groups,
        total=report.total,
    )
