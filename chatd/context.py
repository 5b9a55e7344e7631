"""How much context a chat's model has, and when a chat should be compacted."""

from __future__ import annotations

import os

from chatd.models import ModelConfig

__all__ = ["DEFAULT_CONTEXT_LIMIT", "KNOWN_CONTEXT_LIMITS", "context_limit", "estimate_tokens"]

DEFAULT_CONTEXT_LIMIT = 128_000
"""Used when neither the model config nor the built-in table knows the model."""

KNOWN_CONTEXT_LIMITS: dict[str, int] = {
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-opus": 200_000,
    "claude-3-haiku": 200_000,
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "o4-mini": 200_000,
    "o3": 200_000,
    "o1": 200_000,
    "demo": 200_000,
}
"""Context windows of common models, matched by the longest prefix of the model name."""


def context_limit(model: ModelConfig) -> int:
    """The model config's limit, else the table's, else `CHATD_DEFAULT_CONTEXT_LIMIT`."""
    if model.context_limit:
        return model.context_limit
    matches = [prefix for prefix in KNOWN_CONTEXT_LIMITS if model.name.startswith(prefix)]
    if matches:
        return KNOWN_CONTEXT_LIMITS[max(matches, key=len)]
    return int(os.environ.get("CHATD_DEFAULT_CONTEXT_LIMIT", DEFAULT_CONTEXT_LIMIT))


def estimate_tokens(text_chars: int) -> int:
    """A rough token count for text of this many characters (about four per token)."""
    return (text_chars + 3) // 4
