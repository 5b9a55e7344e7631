"""Names that keep tests apart on the servers they share."""

from __future__ import annotations

import uuid

__all__ = ["model_name"]


def model_name() -> str:
    """A fake model of the caller's own: the fake provider is shared, its scripts are per model."""
    return f"m-{uuid.uuid4().hex[:10]}"
