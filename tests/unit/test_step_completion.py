"""A step whose stream has ended is saved even if the activity is cancelled meanwhile."""

from __future__ import annotations

import asyncio

from activities.model_step import _completed_despite_cancel
from workflows.payloads import StreamStepResult


async def test_a_cancellation_during_the_save_does_not_lose_the_result() -> None:
    saving = asyncio.Event()
    release = asyncio.Event()
    saved: list[str] = []

    async def save() -> StreamStepResult:
        saving.set()
        await release.wait()  # the write is in flight when the interrupt lands
        saved.append("step 0")
        return StreamStepResult(message_id=7)

    activity = asyncio.create_task(_completed_despite_cancel(save()))
    await saving.wait()
    activity.cancel()  # what an interrupt (or a shutdown) does to the activity's task
    await asyncio.sleep(0)
    release.set()
    result = await activity
    assert result.message_id == 7
    assert saved == ["step 0"]
