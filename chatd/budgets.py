"""Budgets in USD, and what they allow the next model step: run (its output capped to what
remains), or pause the turn until a person raises the budget or ends the turn.

Pure: the step's model-step activity reads the budgets and their spend (`chatd.store.spend`)
and asks `allowance` before it sends the request, so no step starts that a budget can't pay
for, and none can spend past it by more than the estimate of its input is off.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from chatd.prices import TokenPrice

__all__ = [
    "MIN_STEP_OUTPUT_TOKENS",
    "BudgetName",
    "BudgetState",
    "PendingBudget",
    "StepAllowance",
    "allowance",
]

BudgetName = Literal["turn", "chat", "owner_day", "owner_month"]

MIN_STEP_OUTPUT_TOKENS = 256
"""The least output a step is worth running for: a budget that can't also pay for this much
after the input pauses the turn instead."""


class BudgetState(BaseModel):
    """One budget that applies to a step, and what was spent against it."""

    budget: BudgetName
    limit_usd: float
    spent_usd: float
    holder: str
    """Whose budget: the chat's id (a turn budget's chat, or a chat's), or the owner."""
    turn_id: str | None = None
    """A turn budget's turn."""

    @property
    def remaining_usd(self) -> float:
        return self.limit_usd - self.spent_usd


class PendingBudget(BaseModel):
    """Why a turn is paused: the budget that can't pay for its next step."""

    budget: BudgetName
    limit_usd: float
    spent_usd: float
    next_step_usd: float = Field(ge=0)
    """The least the next step costs: its input and `MIN_STEP_OUTPUT_TOKENS` of output."""
    holder: str
    turn_id: str | None = None
    step: int = 0
    """The step waiting for the budget."""


class StepAllowance(BaseModel):
    """What the budgets allow the next step."""

    max_output_tokens: int | None = None
    """The step's output cap under its budgets (None: as the chat configured it)."""
    pending: PendingBudget | None = None
    """Set when a budget can't pay for the step: the turn pauses."""
    estimated_input_tokens: int = 0


def allowance(
    budgets: list[BudgetState],
    price: TokenPrice | None,
    *,
    input_tokens: int,
    output_tokens: int,
    thinking_tokens: int = 0,
    step: int = 0,
) -> StepAllowance:
    """Run the step (its output capped to what the tightest budget still buys), or pause.

    `input_tokens` is the step's input as counted or estimated; `output_tokens` the cap it
    would be sent with (`chatd.providers.base.default_output_tokens`); `thinking_tokens` a
    thinking budget the output must leave room for. Without budgets, or a price (a budget
    on such a model is refused when it is set), the step runs as configured.
    """
    unchanged = StepAllowance(estimated_input_tokens=input_tokens)
    if not budgets or price is None:
        return unchanged
    tightest = min(budgets, key=lambda b: b.remaining_usd)
    input_usd = input_tokens * price.input / 1_000_000
    least_output = thinking_tokens + min(output_tokens, MIN_STEP_OUTPUT_TOKENS)
    least_usd = input_usd + least_output * price.output / 1_000_000
    if tightest.remaining_usd < least_usd:
        pending = PendingBudget(
            budget=tightest.budget,
            limit_usd=tightest.limit_usd,
            spent_usd=tightest.spent_usd,
            next_step_usd=least_usd,
            holder=tightest.holder,
            turn_id=tightest.turn_id,
            step=step,
        )
        return unchanged.model_copy(update={"pending": pending})
    if price.output == 0:
        return unchanged.model_copy(update={"max_output_tokens": output_tokens})
    # Rounded first: binary floats make $0.05 at $10 per million 4,999.999... tokens.
    affordable = math.floor(round((tightest.remaining_usd - input_usd) * 1e6 / price.output, 6))
    return unchanged.model_copy(update={"max_output_tokens": min(output_tokens, affordable)})
