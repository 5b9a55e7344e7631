"""What a model's tokens cost: a shipped table of list prices, which an operator overrides or
extends with a file (`CHATD_PRICES`), and the cost of a step's usage.

Prices are USD per million tokens: input (not cached), output (reasoning included, as every
provider bills it), cache reads and cache writes. A model is found by its provider and the
longest name prefix the table holds (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`);
Bedrock's and Vertex's ids are read as the Claude model they name. A model with no price
has an unknown cost (None), never a guessed one.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from chatd.models import ModelConfig
from chatd.parts import Usage

__all__ = ["PRICES_ENV", "PriceError", "Prices", "TokenPrice", "load_prices"]

PRICES_ENV = "CHATD_PRICES"


class TokenPrice(BaseModel):
    """USD per million tokens of each kind."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0, ge=0)
    cache_write: float = Field(default=0, ge=0)

    def cost_usd(self, usage: Usage) -> float:
        """The cost of `usage` at these prices (input counted without cached tokens)."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


def _price(input: float, output: float, cache_read: float, cache_write: float) -> TokenPrice:
    return TokenPrice(input=input, output=output, cache_read=cache_read, cache_write=cache_write)


# List prices, USD per million tokens, by provider and model-name prefix; read 2026-11-28.
# Anthropic: https://docs.anthropic.com/en/docs/about-claude/pricing (cache writes at the
# 5-minute rate, the one chatd's cache_control asks for).
_ANTHROPIC = {
    "claude-opus-4-6": _price(5, 25, 0.50, 6.25),
    "claude-opus-4-5": _price(5, 25, 0.50, 6.25),
    "claude-opus-4-1": _price(15, 75, 1.50, 18.75),
    "claude-opus-4": _price(15, 75, 1.50, 18.75),
    "claude-sonnet-4": _price(3, 15, 0.30, 3.75),
    "claude-3-7-sonnet": _price(3, 15, 0.30, 3.75),
    "claude-haiku-4-5": _price(1, 5, 0.10, 1.25),
    "claude-3-5-haiku": _price(0.80, 4, 0.08, 1),
    "claude-3-haiku": _price(0.25, 1.25, 0.03, 0.30),
}
# OpenAI: https://openai.com/api/pricing (standard tier; cached input is the cache read,
# and caching writes cost nothing extra).
_OPENAI = {
    "gpt-5-nano": _price(0.05, 0.40, 0.005, 0),
    "gpt-5-mini": _price(0.25, 2, 0.025, 0),
    "gpt-5": _price(1.25, 10, 0.125, 0),
    "gpt-4.1-nano": _price(0.10, 0.40, 0.025, 0),
    "gpt-4.1-mini": _price(0.40, 1.60, 0.10, 0),
    "gpt-4.1": _price(2, 8, 0.50, 0),
    "gpt-4o-mini": _price(0.15, 0.60, 0.075, 0),
    "gpt-4o": _price(2.50, 10, 1.25, 0),
    "o4-mini": _price(1.10, 4.40, 0.275, 0),
    "o3": _price(2, 8, 0.50, 0),
}
# Google: https://ai.google.dev/gemini-api/docs/pricing (paid tier, prompts up to 200k
# tokens; context caching's storage is billed by the hour and is not counted here).
_GOOGLE = {
    "gemini-2.5-pro": _price(1.25, 10, 0.125, 0),
    "gemini-2.5-flash-lite": _price(0.10, 0.40, 0.01, 0),
    "gemini-2.5-flash": _price(0.30, 2.50, 0.03, 0),
}
SHIPPED: dict[str, dict[str, TokenPrice]] = {
    "anthropic": _ANTHROPIC,
    "anthropic-bedrock": _ANTHROPIC,
    "anthropic-vertex": _ANTHROPIC,
    "openai": _OPENAI,
    "azure-openai": {},  # a deployment's name says nothing of its model: set it in the file
    "google": _GOOGLE,
    "demo": {"": _price(0, 0, 0, 0)},  # whatever its name, the demo model costs nothing
}
"""The shipped table: Bedrock and Vertex at Anthropic's list prices (their on-demand prices
are the same in their standard regions)."""


class PriceError(ValueError):
    """The price file can't be used; the message says what to fix."""


class Prices:
    """The price of each model: the shipped table, overridden by the operator's entries."""

    def __init__(self, overrides: Mapping[str, TokenPrice] | None = None) -> None:
        """`overrides`: `provider/model` (a name prefix) -> price."""
        self._table = {provider: dict(models) for provider, models in SHIPPED.items()}
        for key, price in (overrides or {}).items():
            provider, _, name = key.partition("/")
            self._table.setdefault(provider, {})[name] = price

    def of(self, model: ModelConfig) -> TokenPrice | None:
        """The model's price; None when neither the table nor the file knows it."""
        models = self._table.get(model.provider, {})
        name = model.base_name
        if model.name in models:
            return models[model.name]
        matches = [prefix for prefix in models if name.startswith(prefix)]
        return models[max(matches, key=len)] if matches else None

    def cost_usd(self, model: ModelConfig, usage: Usage) -> float | None:
        """What `usage` on `model` cost; None for a model with no price."""
        price = self.of(model)
        return None if price is None else price.cost_usd(usage)


def load_prices(env: Mapping[str, str] | None = None) -> Prices:
    """The shipped table with the file `CHATD_PRICES` names (JSON or TOML: `provider/model`
    -> `{input, output, cache_read, cache_write}`); a bad file is a `PriceError` at start."""
    path = (env if env is not None else os.environ).get(PRICES_ENV)
    if not path:
        return Prices()
    file = Path(path)
    try:
        text = file.read_text()
        raw = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as err:
        raise PriceError(f"{PRICES_ENV}={path}: {err}") from err
    if not isinstance(raw, dict):
        raise PriceError(f"{PRICES_ENV}={path}: expected an object of provider/model -> price")
    overrides: dict[str, TokenPrice] = {}
    for key, value in raw.items():
        if "/" not in key:
            raise PriceError(f"{PRICES_ENV}={path}: {key!r} is not provider/model")
        try:
            overrides[key] = TokenPrice.model_validate(value)
        except ValidationError as err:
            raise PriceError(f"{PRICES_ENV}={path}: {key}: {err.errors()[0]['msg']}") from err
    return Prices(overrides)
