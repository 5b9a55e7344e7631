"""How much context a chat's model has, and when a chat should be compacted."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import httpx
from pydantic import TypeAdapter

from chatd.models import ModelConfig
from chatd.parts import Message, Part
from chatd.settings import ProviderSettings
from chatd.tls import client_context

__all__ = [
    "DEFAULT_CONTEXT_LIMIT",
    "FAILED_LOOKUP_TTL_S",
    "KNOWN_CONTEXT_LIMITS",
    "SUMMARY_PREAMBLE",
    "context_limit",
    "estimate_message_tokens",
    "estimate_messages_tokens",
    "estimate_tokens",
    "newest_that_fit",
    "parts_json_chars",
    "reported_context_limit",
]

SUMMARY_PREAMBLE = (
    "[This message summarises the earlier conversation, which was compacted to fit the "
    "context window. The assistant was actively working when this happened: continue the "
    "work described below from where it stopped.]"
)
"""Opens the user-role message that stands for compacted context (the chat's own
compaction, or a `compaction` item given as input)."""

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
    "gemini-2.5": 1_048_576,
    "gemini-3": 1_048_576,
    "demo": 200_000,
}
"""Context windows of common models, matched by the longest prefix of the model name."""


def context_limit(model: ModelConfig, reported: int | None = None) -> int:
    """The model config's limit, else the provider's (`reported`), else the table's, else
    `CHATD_DEFAULT_CONTEXT_LIMIT`."""
    if model.context_limit:
        return model.context_limit
    if reported:
        return reported
    name = model.base_name
    matches = [prefix for prefix in KNOWN_CONTEXT_LIMITS if name.startswith(prefix)]
    if matches:
        return KNOWN_CONTEXT_LIMITS[max(matches, key=len)]
    return int(os.environ.get("CHATD_DEFAULT_CONTEXT_LIMIT", DEFAULT_CONTEXT_LIMIT))


def estimate_tokens(text_chars: int) -> int:
    """A rough token count for text of this many characters (about four per token)."""
    return (text_chars + 3) // 4


_parts_adapter: TypeAdapter[list[Part]] = TypeAdapter(list[Part])


def parts_json_chars(parts: list[Part]) -> int:
    """The characters of these parts' JSON, each on its own, summed. One encoding of all of
    them, not one per part: a step counts its whole context, in a long chat thousands of
    parts."""
    if not parts:
        return 0
    encoded = _parts_adapter.dump_json(parts).decode()
    return len(encoded) - 1 - len(parts)  # less the list's brackets and commas


def estimate_message_tokens(message: Message) -> int:
    """A rough token count of a message as a provider gets it (its parts' JSON, so file data
    and replayed provider data count in full: an overestimate, the safe side when fitting)."""
    return estimate_tokens(parts_json_chars(message.parts))


def estimate_messages_tokens(messages: Sequence[Message]) -> int:
    """A rough token count of all these messages (as `estimate_message_tokens`, counted
    together: rounded once)."""
    return estimate_tokens(parts_json_chars([part for m in messages for part in m.parts]))


def newest_that_fit(messages: Sequence[Message], budget: int) -> list[Message]:
    """The newest messages whose estimates fit `budget`, never opening on tool results.

    A tool message's calls live in the assistant message before it, so a transcript cut
    just before one would answer calls the provider never saw: it is dropped as well.
    """
    start, used = len(messages), 0
    while start > 0 and used + estimate_message_tokens(messages[start - 1]) <= budget:
        start -= 1
        used += estimate_message_tokens(messages[start])
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    return list(messages[start:])


_REPORTED_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")
"""Where OpenAI-compatible servers (vLLM, OpenRouter, LM Studio ...) put a model's window."""

FAILED_LOOKUP_TTL_S = 60.0
"""How long a failed lookup is remembered: long enough not to ask on every step of a busy
chat, short enough that a server that was down is asked again soon."""


class _Lookup(NamedTuple):
    limit: int | None
    expires_at: float | None
    """`time.monotonic()` after which to ask again; None for an answer kept for good."""


class _LookupFailed(Exception):
    """The server did not answer the lookup (transport error, non-200, not JSON)."""


_reported: dict[tuple[str, str], _Lookup] = {}


async def reported_context_limit(model: ModelConfig, settings: ProviderSettings) -> int | None:
    """The window the provider reports for the model (cached): Gemini's `models.get`, or an
    OpenAI-compatible server's `GET /models/{name}`. Anthropic's and OpenAI's own APIs report
    none, so only a custom OpenAI base URL is asked.

    An answer is kept for good; a failed lookup only briefly, so a small-window model is not
    sized with the default window for the life of the worker.
    """
    if model.context_limit:
        return None
    base = settings.openai_base_url
    if model.provider == "google" and settings.google_configured:
        key, ask = ("google", model.name), partial(_ask_google, model.name, settings)
    elif model.provider == "openai" and base:
        key = (base, model.name)
        ask = partial(_ask_for_limit, base, model.name, settings.openai_api_key)
    else:
        return None
    cached = _reported.get(key)
    if cached is None or (cached.expires_at is not None and time.monotonic() >= cached.expires_at):
        try:
            limit = await ask()
            cached = _Lookup(limit, None)
        except _LookupFailed:
            cached = _Lookup(None, time.monotonic() + FAILED_LOOKUP_TTL_S)
        _reported[key] = cached
    return cached.limit


async def _ask_google(name: str, settings: ProviderSettings) -> int | None:
    """Gemini's `inputTokenLimit` for the model."""
    from chatd.providers import google_context_window

    try:
        return await google_context_window(name, settings)
    except Exception as exc:  # the SDK's errors, its transport's, a malformed answer
        raise _LookupFailed(str(exc)) from exc


async def _ask_for_limit(base: str, name: str, api_key: str | None) -> int | None:
    """The reported window, or None when the server answers without one."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=2.0, verify=client_context()) as http:
            response = await http.get(f"{base.rstrip('/')}/models/{name}", headers=headers)
        if response.status_code != 200:
            raise _LookupFailed(f"GET /models/{name}: HTTP {response.status_code}")
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise _LookupFailed(str(exc)) from exc
    if not isinstance(data, dict):
        return None
    values = [data.get(f) for f in _REPORTED_FIELDS]
    return next((v for v in values if isinstance(v, int) and v > 0), None)
