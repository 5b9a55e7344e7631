"""Pure decisions of model fallback: when a failing step moves to the chat's next model.

No I/O and no Temporal imports, so it is unit-tested without a server.
"""

from __future__ import annotations

from datetime import timedelta

from chatd.models import ModelError
from workflows.payloads import TurnPlan

__all__ = [
    "FALLBACK_AFTER_FAILURES",
    "FALLBACK_DELAY",
    "fallback_model",
    "model_label",
    "model_not_found",
    "model_seems_down",
]

FALLBACK_AFTER_FAILURES = 3
"""A step moves to the next model after this many failures that say its model is down."""
FALLBACK_DELAY = timedelta(seconds=1)
"""The wait before the first attempt on the next model (the old provider's retry-after is
not the new one's)."""
_DOWN_KINDS = frozenset({"overloaded", "rate_limit", "timeout", "startup_timeout"})
_TRANSPORT_FAILURES = frozenset({"connection_error", "incomplete_stream"})
"""`detail.type` of a provider that could not be reached or dropped its stream."""


def model_seems_down(error: ModelError) -> bool:
    """A retryable failure that says the model is down or busy (not our request): overloaded,
    rate-limited, silent, unreachable, or a server error. Such failures count toward a
    fallback."""
    if not error.retryable:
        return False
    server_error = error.status_code is not None and error.status_code >= 500
    transport = error.detail.get("type") in _TRANSPORT_FAILURES
    return error.kind in _DOWN_KINDS or transport or server_error


def model_not_found(error: ModelError) -> bool:
    """The provider does not know the model: an HTTP 404, or its in-stream not-found error."""
    codes = (error.detail.get("type"), error.detail.get("code"))
    named = "not_found_error" in codes or "model_not_found" in codes
    return error.kind == "config" and (error.status_code == 404 or named)


def fallback_model(error: ModelError, failures: int, index: int, plan: TurnPlan) -> int | None:
    """The model a failing step moves to (an index, as `model_label` takes), or None to
    stay on model `index`, which has failed `failures` times so far as `model_seems_down`.

    It moves on when its model stays down (`FALLBACK_AFTER_FAILURES`), is unknown to the
    provider, or can't take the prompt while the next one has a larger window; other errors
    would fail on any model (the request, the key) or are retried where they are.
    """
    following = index + 1
    if following > len(plan.fallbacks):
        return None
    if error.retryable:
        down = model_seems_down(error) and failures >= FALLBACK_AFTER_FAILURES
        return following if down else None
    if model_not_found(error):
        return following
    if error.kind == "context_exceeded" and _window(plan, following) > _window(plan, index):
        return following
    return None


def model_label(plan: TurnPlan, index: int) -> str:
    """The label of model `index` of a turn: 0 the chat's own, i its i-th fallback."""
    return plan.model_label if index == 0 else plan.fallbacks[index - 1].label


def _window(plan: TurnPlan, index: int) -> int:
    return plan.context_limit if index == 0 else plan.fallbacks[index - 1].context_limit
