"""Budget decisions: a raise applied, or a stop, recorded with who decided."""

from __future__ import annotations

import uuid

import asyncpg
from temporalio import activity

from activities.failures import classified_failures
from chatd.store.spend import BudgetDecision, SpendStore
from workflows.payloads import BudgetDecisionInput

__all__ = ["SpendActivities"]


class SpendActivities:
    """Persists the decision on a turn paused on a budget."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._spend = SpendStore(pool)

    @activity.defn(name="decide_budget")
    async def decide_budget(self, input: BudgetDecisionInput) -> None:
        """Record the decision and apply a raise, once per pause: a retried write changes
        nothing."""
        assert input.pending is not None
        async with classified_failures("recording a budget decision"):
            await self._spend.decide(
                uuid.UUID(input.chat_id),
                input.turn_id,
                input.pending,
                BudgetDecision(
                    add_usd=input.add_usd,
                    stop=input.stop,
                    key_id=uuid.UUID(input.key_id) if input.key_id else None,
                ),
            )
