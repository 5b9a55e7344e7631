"""A Responses `model` string as a chat's model: `<provider>/<name>`, or a bare name the
operator maps with `CHATD_MODEL_ALIASES` (a JSON object of name -> `<provider>/<name>`, or
name -> a full model configuration)."""

from __future__ import annotations

import json
import os
from typing import Any, get_args

from pydantic import ValidationError

from api.errors import ApiError
from chatd.fake_provider.demo import DEMO_MODEL
from chatd.models import ModelConfig, ProviderName

__all__ = ["ALIASES_ENV", "MODEL_PATTERN", "model_aliases", "resolve_model"]

ALIASES_ENV = "CHATD_MODEL_ALIASES"
_PROVIDERS: tuple[str, ...] = get_args(ProviderName)
MODEL_PATTERN = f"^({'|'.join(_PROVIDERS)})/[A-Za-z0-9._:/@+-]{{1,200}}$"
"""`<provider>/<name>` in the characters a model name may hold (`ModelConfig.name`)."""


def model_aliases() -> dict[str, ModelConfig]:
    """The operator's aliases; a malformed variable fails the gateway's start, not a request."""
    raw = os.environ.get(ALIASES_ENV, "").strip()
    if not raw:
        return {}
    entries: Any = json.loads(raw)
    if not isinstance(entries, dict):
        raise ValueError(f"{ALIASES_ENV} must be a JSON object of alias -> model")
    aliases = {
        alias: _qualified(value) if isinstance(value, str) else ModelConfig.model_validate(value)
        for alias, value in entries.items()
    }
    for alias, model in aliases.items():
        if not _served(model):
            raise ValueError(f"{ALIASES_ENV}: {alias!r} names {model.label}: {_DEMO_ONLY}")
    return aliases


def resolve_model(name: str, aliases: dict[str, ModelConfig]) -> ModelConfig:
    """The model `name` names; a 400 naming the accepted forms otherwise."""
    if name in aliases:
        return aliases[name].model_copy()
    provider, _, model = name.partition("/")
    if provider in _PROVIDERS and model:
        try:
            config = ModelConfig(provider=provider, name=model)
        except ValidationError as err:
            raise _unknown(name, aliases, str(err.errors()[0]["msg"])) from err
        if not _served(config):
            raise _unknown(name, aliases, _DEMO_ONLY)
        return config
    raise _unknown(name, aliases, "not a known form")


_DEMO_ONLY = f"the demo provider serves one model, demo/{DEMO_MODEL}"


def _served(model: ModelConfig) -> bool:
    """Whether the deployment can serve `model`, as far as the gateway knows: the demo
    server serves one model (a turn on another would fail at its first step). Whether a
    provider has a key only the workers know."""
    return model.provider != "demo" or model.name == DEMO_MODEL


def _qualified(value: str) -> ModelConfig:
    provider, _, model = value.partition("/")
    if provider not in _PROVIDERS or not model:
        raise ValueError(f"{ALIASES_ENV}: {value!r} is not <provider>/<name>")
    return ModelConfig(provider=provider, name=model)


def _unknown(name: str, aliases: dict[str, ModelConfig], why: str) -> ApiError:
    forms = [f"{p}/<name>" for p in _PROVIDERS] + sorted(aliases)
    return ApiError(
        400,
        "model_not_found",
        f"model {name!r}: {why}; use one of {', '.join(forms)}",
        {"param": "model", "known": forms},
    )
