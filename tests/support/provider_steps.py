"""A step streamed from a provider adapter, read as the worker reads it."""

from __future__ import annotations

from chatd.parts import Part
from chatd.providers.base import ModelProvider, ModelRequest, StepAccumulator, StepFinish

__all__ = ["streamed_step"]


async def streamed_step(
    provider: ModelProvider, request: ModelRequest
) -> tuple[list[Part], StepFinish]:
    """The step's parts and its finish; fails if deltas follow the finish or it isn't one."""
    acc = StepAccumulator()
    finishes: list[StepFinish] = []
    async for event in provider.stream_step(request):
        if isinstance(event, StepFinish):
            finishes.append(event)
        else:
            assert not finishes, "delta after StepFinish"
            acc.apply(event)
    assert len(finishes) == 1
    return acc.parts(), finishes[0]
