"""A model step's budget check never fails the step: a provider that can't count, or can't
be made at all, leaves the input estimated, and sending the step reports the error."""

from __future__ import annotations

from typing import Any

from activities.model_step import ModelStepActivities
from chatd.budgets import BudgetState
from chatd.models import ModelConfig
from chatd.parts import Message, TextPart
from chatd.prices import Prices, TokenPrice
from chatd.providers.base import ModelRequest
from chatd.settings import ProviderSettings
from workflows.payloads import StreamStepInput

BUDGET = BudgetState(budget="turn", limit_usd=1.0, spent_usd=0.0, holder="c")


def _activities(settings: ProviderSettings) -> ModelStepActivities:
    # The budget check reads no store: the stores' pool, the catalog, the lifecycle writes
    # and the workspace are never touched.
    unused: Any = None
    prices = Prices({"anthropic/m-": TokenPrice(input=2, output=10)})
    return ModelStepActivities(
        unused, unused, settings, unused, workspace_root=unused, prices=prices
    )


def _request() -> ModelRequest:
    text = TextPart(text="x" * 400)  # about a hundred tokens, however estimated
    return ModelRequest(
        model=ModelConfig(provider="anthropic", name="m-1"),
        messages=[Message(role="user", parts=[text])],
    )


async def test_a_provider_that_cant_be_made_leaves_the_input_estimated() -> None:
    no_key = _activities(ProviderSettings())  # ANTHROPIC_API_KEY is not set
    step = StreamStepInput(chat_id="c", turn_id="t", step=2)
    allowed = await no_key._allowance(_request(), step, [BUDGET])
    assert allowed.pending is None
    assert allowed.estimated_input_tokens >= 100
    assert allowed.max_output_tokens == 4096, "the budget buys Anthropic's default output"
