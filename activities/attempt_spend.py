"""What one attempt of a model step cost, recorded as it goes: an estimate as the request
goes out, the provider's report when the stream finishes, and an estimate of what a stream
cut short used."""

from __future__ import annotations

import asyncio

from chatd.context import estimate_tokens, parts_json_chars
from chatd.models import ModelConfig
from chatd.parts import Usage
from chatd.prices import Prices
from chatd.providers.base import StepAccumulator
from chatd.store.spend import AttemptKey, SettledSpend, SpendStore
from chatd.telemetry import METRICS

__all__ = ["AttemptSpend", "record_spend"]


class AttemptSpend:
    """The spend of one attempt (`step_spend`), written once at each point it is known."""

    def __init__(
        self,
        store: SpendStore,
        prices: Prices,
        key: AttemptKey,
        owner: str,
        model: ModelConfig,
        input_tokens: int,
    ) -> None:
        self._store = store
        self._prices = prices
        self._key = key
        self._owner = owner
        self._model = model
        self._input_tokens = input_tokens
        self._estimate: asyncio.Future[None] | None = None

    def estimate(self) -> None:
        """Start writing the estimate (its input), alongside the request: a worker killed
        mid-stream leaves it, marked as an estimate."""
        self._estimate = asyncio.ensure_future(
            self._record(Usage(input_tokens=self._input_tokens), estimated=True)
        )

    async def settling(self, usage: Usage) -> SettledSpend:
        """The provider's report of the finished stream, for the step's save to write in its
        own statement (`TurnStore.save_last_step`): atomic with the save, so a crash before
        it leaves the estimate and an unsaved step, which is streamed (and billed) again."""
        await self._estimated()
        cost = self._prices.cost_usd(self._model, usage)
        _count_cost(cost, self._model, self._owner)
        return SettledSpend(key=self._key, model=self._model.label, cost_usd=cost)

    async def settled(self, usage: Usage) -> None:
        """The provider's report of the finished stream replaces the estimate. The step's
        save follows at once and makes it durable, so it doesn't wait for the disk: a crash
        before the save loses the report, the estimate stands for the attempt, and the step,
        unsaved, is streamed (and billed) again."""
        await self._estimated()
        await self._record(usage, estimated=False, flushed=False)

    async def failed(self, accumulator: StepAccumulator) -> None:
        """A provider error: refused before any output costs nothing; a stream broken off
        is estimated from what it streamed."""
        await self._estimated()
        if accumulator.parts():
            await self._record(self._partial(accumulator), estimated=True)
        else:
            await self._record(Usage(), estimated=False)

    async def stopped(self, accumulator: StepAccumulator) -> None:
        """An interrupt cut the stream short: estimated from what it streamed (no provider
        reports usage for a stream it didn't finish)."""
        await self._estimated()
        await self._record(self._partial(accumulator), estimated=True)

    async def _estimated(self) -> None:
        if self._estimate is not None:
            await self._estimate

    def _partial(self, accumulator: StepAccumulator) -> Usage:
        streamed = parts_json_chars(accumulator.parts())
        return Usage(input_tokens=self._input_tokens, output_tokens=estimate_tokens(streamed))

    async def _record(self, usage: Usage, *, estimated: bool, flushed: bool = True) -> None:
        await record_spend(
            self._store,
            self._prices,
            self._key,
            self._owner,
            self._model,
            usage,
            estimated=estimated,
            flushed=flushed,
        )


async def record_spend(
    store: SpendStore,
    prices: Prices,
    key: AttemptKey,
    owner: str,
    model: ModelConfig,
    usage: Usage,
    *,
    estimated: bool,
    flushed: bool = True,
) -> None:
    """Record what `usage` on `model` cost at `prices` (an estimate, or the provider's
    report, which also counts in the `chatd.cost_usd` metric); `SpendStore.record` says
    what not `flushed` means."""
    cost = prices.cost_usd(model, usage)
    await store.record(
        key,
        model=model.label,
        usage=usage,
        cost_usd=cost,
        estimated=estimated,
        flushed=flushed,
    )
    if not estimated:
        _count_cost(cost, model, owner)


def _count_cost(cost: float | None, model: ModelConfig, owner: str) -> None:
    """A settled cost, in the `chatd.cost_usd` metric."""
    if cost:
        METRICS.cost_usd.add(cost, {"model": model.label, "owner": owner})
