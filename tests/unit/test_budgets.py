"""What budgets allow a model step: its output capped to what remains, or a pause."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatd.budgets import MIN_STEP_OUTPUT_TOKENS, BudgetState, allowance
from chatd.models import ModelConfig
from chatd.prices import TokenPrice
from chatd.providers.base import (
    ANTHROPIC_DEFAULT_OUTPUT_TOKENS,
    BUDGETED_OUTPUT_TOKENS,
    default_output_tokens,
)

PRICE = TokenPrice(input=2, output=10)  # USD per million tokens


def _budget(limit: float, spent: float, name: str = "turn") -> BudgetState:
    return BudgetState.model_validate(
        {"budget": name, "limit_usd": limit, "spent_usd": spent, "holder": "c"}
    )


def test_no_budget_or_no_price_leaves_the_step_as_configured() -> None:
    free = allowance([], PRICE, input_tokens=10, output_tokens=4096)
    assert free.pending is None and free.max_output_tokens is None
    unpriced = allowance([_budget(0.0, 0.0)], None, input_tokens=10, output_tokens=500)
    assert unpriced.pending is None and unpriced.max_output_tokens is None


def test_the_output_is_capped_to_what_the_tightest_budget_still_buys() -> None:
    budgets = [_budget(1.0, 0.0, "chat"), _budget(0.01, 0.004, "turn")]
    # $0.006 left; 1,000 input tokens cost $0.002, leaving $0.004: 400 output tokens.
    allowed = allowance(budgets, PRICE, input_tokens=1000, output_tokens=4096)
    assert allowed.pending is None and allowed.max_output_tokens == 400


def test_a_cap_below_what_remains_stands() -> None:
    allowed = allowance([_budget(1.0, 0.0)], PRICE, input_tokens=1000, output_tokens=300)
    assert allowed.max_output_tokens == 300
    # $0.05 left after the input buys 5,000 tokens, exactly (no float rounding down).
    tight = allowance([_budget(0.052, 0.0)], PRICE, input_tokens=1000, output_tokens=16_384)
    assert tight.max_output_tokens == 5000


def test_a_budgeted_step_starts_from_the_providers_default_or_a_bounded_one() -> None:
    assert default_output_tokens(ModelConfig(provider="openai", name="gpt-5")) == (
        BUDGETED_OUTPUT_TOKENS
    )
    claude = ModelConfig(provider="anthropic-bedrock", name="anthropic.claude-sonnet-4-5")
    assert default_output_tokens(claude) == ANTHROPIC_DEFAULT_OUTPUT_TOKENS
    own = ModelConfig(provider="google", name="gemini-2.5-pro", max_output_tokens=900)
    assert default_output_tokens(own) == 900


def test_a_budget_that_cant_pay_input_and_the_least_output_pauses_naming_it() -> None:
    need = (1000 * 2 + MIN_STEP_OUTPUT_TOKENS * 10) / 1_000_000
    day = _budget(0.01, 0.01 - need + 1e-6, "owner_day")
    allowed = allowance([_budget(1.0, 0.0, "chat"), day], PRICE, input_tokens=1000,
                        output_tokens=4096, step=4)  # fmt: skip
    assert allowed.pending is not None
    assert allowed.pending.budget == "owner_day" and allowed.pending.step == 4
    assert allowed.pending.next_step_usd == pytest.approx(need)
    exact = allowance([_budget(need, 0.0)], PRICE, input_tokens=1000, output_tokens=4096)
    assert exact.pending is None and exact.max_output_tokens == MIN_STEP_OUTPUT_TOKENS


def test_a_thinking_budget_is_room_the_output_must_leave() -> None:
    budgets = [_budget(0.02, 0.0)]
    thinks = allowance(budgets, PRICE, input_tokens=0, output_tokens=4096,
                       thinking_tokens=2048)  # fmt: skip
    assert thinks.pending is not None, "2,048 thinking + 256 output tokens cost $0.023"
    assert allowance(budgets, PRICE, input_tokens=0, output_tokens=4096).pending is None


@given(
    limit=st.floats(0, 10),
    spent=st.floats(0, 10),
    input_tokens=st.integers(0, 200_000),
    output_tokens=st.integers(1, 100_000),
)
def test_a_step_that_runs_can_never_spend_past_the_budget(
    limit: float, spent: float, input_tokens: int, output_tokens: int
) -> None:
    allowed = allowance(
        [_budget(limit, spent)], PRICE, input_tokens=input_tokens, output_tokens=output_tokens
    )
    if allowed.pending is not None:
        assert allowed.pending.spent_usd + allowed.pending.next_step_usd > limit
        return
    assert allowed.max_output_tokens is not None
    assert 1 <= allowed.max_output_tokens <= output_tokens
    cost = (input_tokens * PRICE.input + allowed.max_output_tokens * PRICE.output) / 1e6
    assert spent + cost <= limit + 1e-9
