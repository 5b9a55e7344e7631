"""A step attempt this worker abandoned publishes nothing once a newer attempt of its chat
has begun: its late deltas would follow the new attempt's `reset`."""

from __future__ import annotations

import gc
import uuid
from typing import Any, cast

from activities.publishing import DeltaPublisher, EventBatcher
from chatd.store.events import EventLog


class _Recorded:
    """Stands in for the event log: keeps what was published, in order."""

    def __init__(self) -> None:
        self.published: list[tuple[uuid.UUID, str, dict[str, Any]]] = []

    async def publish_many(self, batch: list[tuple[uuid.UUID, str, dict[str, Any]]]) -> None:
        self.published += batch


async def test_only_the_newest_attempt_of_a_chat_publishes() -> None:
    log = _Recorded()
    batcher = EventBatcher(cast(EventLog, log))
    chat, other = uuid.uuid4(), uuid.uuid4()
    abandoned = DeltaPublisher(batcher, chat)
    abandoned.add("message_part", {"text": "Hel"})
    elsewhere = DeltaPublisher(batcher, other)
    retry = DeltaPublisher(batcher, chat)
    retry.add("reset", {"step": 0})
    abandoned.add("message_part", {"text": "lo"})  # late: dropped
    retry.add("message_part", {"text": "Hello"})
    elsewhere.add("message_part", {"text": "hi"})  # another chat's step is untouched
    await retry.drain()
    assert [(c == chat, e, d) for c, e, d in log.published] == [
        (True, "message_part", {"text": "Hel"}),
        (True, "reset", {"step": 0}),
        (True, "message_part", {"text": "Hello"}),
        (False, "message_part", {"text": "hi"}),
    ]
    del abandoned, retry
    gc.collect()
    following = DeltaPublisher(batcher, chat)  # the chat's next step
    following.add("message_part", {"text": "next"})
    await following.drain()
    assert log.published[-1] == (chat, "message_part", {"text": "next"})
