"""Price lookups and the cost of a step's usage (`chatd/prices.py`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatd.models import ModelConfig
from chatd.parts import Usage
from chatd.prices import PRICES_ENV, PriceError, Prices, TokenPrice, load_prices


def _model(provider: str, name: str) -> ModelConfig:
    return ModelConfig(provider=provider, name=name)


@pytest.mark.parametrize(
    ("provider", "name", "input_price"),
    [
        ("anthropic", "claude-sonnet-4-5-20250929", 3),
        ("anthropic", "claude-opus-4-1", 15),
        ("anthropic", "claude-opus-4-5", 5),  # the longer prefix wins over claude-opus-4
        ("anthropic-bedrock", "us.anthropic.claude-haiku-4-5-20251001-v1:0", 1),
        ("anthropic-vertex", "claude-sonnet-4-5@20250929", 3),
        ("openai", "gpt-5-mini-2025-08-07", 0.25),
        ("openai", "gpt-5", 1.25),
        ("google", "gemini-2.5-flash-lite", 0.10),
        ("google", "gemini-2.5-flash", 0.30),
    ],
)
def test_a_model_is_priced_by_its_longest_known_prefix(
    provider: str, name: str, input_price: float
) -> None:
    price = Prices().of(_model(provider, name))
    assert price is not None and price.input == input_price


@pytest.mark.parametrize(
    ("provider", "name"), [("openai", "my-fine-tune"), ("azure-openai", "gpt-deployment")]
)
def test_a_model_nobody_priced_has_an_unknown_cost(provider: str, name: str) -> None:
    assert Prices().cost_usd(_model(provider, name), Usage(input_tokens=1000)) is None


def test_cost_counts_each_kind_of_token_at_its_price() -> None:
    usage = Usage(
        input_tokens=1_000_000, output_tokens=200_000, cache_read_tokens=500_000,
        cache_write_tokens=100_000, reasoning_tokens=50_000,
    )  # fmt: skip
    cost = Prices().cost_usd(_model("anthropic", "claude-sonnet-4-5"), usage)
    # 3 + 0.2 x 15 + 0.5 x 0.30 + 0.1 x 3.75; reasoning is inside output already.
    assert cost == pytest.approx(3 + 3 + 0.15 + 0.375)


def test_the_operator_s_file_overrides_and_extends_the_table(tmp_path: Path) -> None:
    file = tmp_path / "prices.toml"
    file.write_text(
        '["azure-openai/gpt-prod"]\ninput = 2.5\noutput = 10\ncache_read = 1.25\n\n'
        '["anthropic/claude-sonnet-4"]\ninput = 2\noutput = 10\n'
    )
    prices = load_prices({PRICES_ENV: str(file)})
    azure = prices.of(_model("azure-openai", "gpt-prod-eastus"))
    assert azure == TokenPrice(input=2.5, output=10, cache_read=1.25)
    negotiated = prices.of(_model("anthropic", "claude-sonnet-4-5"))
    assert negotiated is not None and negotiated.input == 2
    same_json = tmp_path / "prices.json"
    same_json.write_text(json.dumps({"azure-openai/gpt-prod": {"input": 2.5, "output": 10}}))
    assert load_prices({PRICES_ENV: str(same_json)}).of(_model("azure-openai", "gpt-prod"))


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("{not json", r"prices\.json"),
        ('{"gpt-5": {"input": 1, "output": 2}}', "is not provider/model"),
        ('{"openai/gpt-5": {"input": -1, "output": 2}}', "openai/gpt-5"),
        ('{"openai/gpt-5": {"output": 2}}', "openai/gpt-5"),
        ("[1, 2]", "expected an object"),
    ],
)
def test_a_bad_price_file_is_refused_at_start_with_what_to_fix(
    tmp_path: Path, content: str, complaint: str
) -> None:
    file = tmp_path / "prices.json"
    file.write_text(content)
    with pytest.raises(PriceError, match=complaint):
        load_prices({PRICES_ENV: str(file)})


def test_no_file_is_the_shipped_table_and_a_missing_one_an_error(tmp_path: Path) -> None:
    assert load_prices({}).of(_model("demo", "demo")) == TokenPrice(input=0, output=0)
    with pytest.raises(PriceError, match=r"nowhere\.json"):
        load_prices({PRICES_ENV: str(tmp_path / "nowhere.json")})


_counts = st.integers(min_value=0, max_value=10**9)
_usages = st.builds(
    Usage,
    input_tokens=_counts,
    output_tokens=_counts,
    cache_read_tokens=_counts,
    cache_write_tokens=_counts,
)


@given(_usages, _usages)
def test_the_cost_of_two_steps_is_the_sum_of_their_costs(first: Usage, second: Usage) -> None:
    """Summing per turn, chat or day is exact however the steps are split."""
    price = Prices().of(_model("anthropic", "claude-opus-4-1"))
    assert price is not None
    both = Usage(
        input_tokens=first.input_tokens + second.input_tokens,
        output_tokens=first.output_tokens + second.output_tokens,
        cache_read_tokens=first.cache_read_tokens + second.cache_read_tokens,
        cache_write_tokens=first.cache_write_tokens + second.cache_write_tokens,
    )
    total = price.cost_usd(first) + price.cost_usd(second)
    assert math.isclose(price.cost_usd(both), total, rel_tol=1e-9, abs_tol=1e-12)
    assert price.cost_usd(both) >= 0
