"""Spend records for tests that save a turn's last step through the store."""

from __future__ import annotations

import uuid

from chatd.store.spend import AttemptKey, SettledSpend
from chatd.store.step_keys import stored_key
from chatd.store.transcript import NewMessage

__all__ = ["unpriced_attempt"]


def unpriced_attempt(chat_id: uuid.UUID, turn_id: str, step: NewMessage) -> SettledSpend:
    """The settled spend of the attempt that streamed `step`, on a model without a price."""
    key = AttemptKey(
        chat_id=chat_id,
        turn_id=turn_id,
        step_key=stored_key(turn_id, step.step_key),
        attempt="1.1",
    )
    return SettledSpend(key=key, model="unpriced", cost_usd=None)
