"""A step attempt this worker abandoned publishes nothing once a newer attempt of its chat
has begun: its late deltas would follow the new attempt's `reset`."""

from __future__ import annotations

import asyncio
import gc
import uuid
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from activities.publishing import DeltaPublisher, EventBatcher
from chatd.store.events import EventLog


class _Recorded:
    """Stands in for the event log: keeps what was published, in order."""

    def __init__(self) -> None:
        self.published: list[tuple[uuid.UUID, str, dict[str, Any]]] = []
        self.wrote = asyncio.Event()

    async def publish_many(self, batch: list[tuple[uuid.UUID, str, dict[str, Any]]]) -> None:
        self.published += batch
        self.wrote.set()


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


def _text(index: int, text: str, kind: str = "text") -> dict[str, Any]:
    return {"role": "assistant", "part": {"index": index, "type": kind, "text": text}}


async def _settled() -> None:
    """Let the writer task run until it waits (on the frame or the store)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_steps_first_delta_goes_at_once_and_the_rest_wait_for_the_frame() -> None:
    """The first token is not held (time to first token is what a reader feels); the ones
    after it gather, and a drain (the step's end, an interrupt) writes them at once."""
    log = _Recorded()
    batcher = EventBatcher(cast(EventLog, log), frame_s=3600)
    publisher = DeltaPublisher(batcher, uuid.uuid4())
    publisher.add("message_part", _text(0, "Hel"))
    publisher.add("message_part", _text(0, "l"))  # before the write: not merged into the first
    await _settled()
    assert [d for _, _, d in log.published] == [_text(0, "Hel"), _text(0, "l")]
    publisher.add("message_part", _text(0, "lo"))
    publisher.add("message_part", _text(0, " there"))
    await _settled()
    assert len(log.published) == 2  # held for the frame
    await publisher.drain()
    assert [d for _, _, d in log.published][2:] == [_text(0, "lo there")]


async def test_a_frames_deltas_are_written_when_it_ends() -> None:
    log = _Recorded()
    batcher = EventBatcher(cast(EventLog, log), frame_s=0.01)
    chat = uuid.uuid4()
    publisher = DeltaPublisher(batcher, chat)
    publisher.add("message_part", _text(0, "a"))
    await _settled()
    log.wrote.clear()
    publisher.add("message_part", _text(0, "b"))
    await asyncio.wait_for(log.wrote.wait(), 60)  # no drain: the frame's end alone writes "b"
    assert log.published[-1] == (chat, "message_part", _text(0, "b"))


class _Gated(_Recorded):
    """An event log whose writes wait for `opened`: a write stays in flight until then."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = asyncio.Event()

    async def publish_many(self, batch: list[tuple[uuid.UUID, str, dict[str, Any]]]) -> None:
        await self.opened.wait()
        await super().publish_many(batch)


async def test_a_steps_unwritten_deltas_are_taken_after_the_write_in_flight() -> None:
    """The step's save writes its last deltas itself, after the ones already on their way;
    another chat's pending deltas stay the batcher's, and still merge."""
    log = _Gated()
    batcher = EventBatcher(cast(EventLog, log), frame_s=3600)
    chat, other = uuid.uuid4(), uuid.uuid4()
    step, elsewhere = DeltaPublisher(batcher, chat), DeltaPublisher(batcher, other)
    step.add("message_part", _text(0, "Hel"))  # each chat's first delta: written at once,
    elsewhere.add("message_part", _text(0, "a"))  # and now in flight
    await _settled()
    step.add("message_part", _text(0, "lo"))
    elsewhere.add("message_part", _text(0, "b"))  # pending behind the step's, mergeable
    step.add("message_part", _text(0, "!"))
    taking = asyncio.ensure_future(step.unwritten())
    await _settled()
    assert not taking.done()  # waits for the write in flight, which holds an earlier delta
    log.opened.set()
    assert await taking == [("message_part", _text(0, "lo!"))]
    elsewhere.add("message_part", _text(0, "c"))  # merges into its pending fragment
    await elsewhere.drain()
    assert log.published == [
        (chat, "message_part", _text(0, "Hel")),
        (other, "message_part", _text(0, "a")),
        (other, "message_part", _text(0, "bc")),
    ]


_fragments = st.lists(
    st.tuples(
        st.integers(0, 2),  # chat
        st.sampled_from(["text", "reasoning", "tool_call", "reset", "first_call_fragment"]),
        st.integers(0, 1),  # part index
        st.text(max_size=3),
    ),
    max_size=40,
)


def _event(kind: str, index: int, text: str) -> tuple[str, dict[str, Any]]:
    if kind == "reset":
        return "reset", {"step": index}
    if kind == "tool_call":
        part = {"index": index, "type": kind, "args_delta": text}
    elif kind == "first_call_fragment":  # carries the call's id and name: never merged
        part = {"index": index, "type": "tool_call", "id": "c", "name": "f", "args_delta": text}
    else:
        part = {"index": index, "type": kind, "text": text}
    return "message_part", {"role": "assistant", "part": part}


def _replayed(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
    """What a client rebuilds from a chat's events: each run of fragments of one part as one
    string, every other event as it is."""
    rebuilt: list[tuple[str, Any]] = []
    for name, data in events:
        part = data.get("part", {})
        grows = "text" if "text" in part else "args_delta"
        key = (part.get("index"), part.get("type"), "id" in part)
        if name == "message_part" and rebuilt and rebuilt[-1][0] == "grow" and not key[2]:
            previous_key, text = rebuilt[-1][1]
            if previous_key == key:
                rebuilt[-1] = ("grow", (key, text + part[grows]))
                continue
        if name == "message_part" and not key[2]:
            rebuilt.append(("grow", (key, part[grows])))
        else:
            rebuilt.append((name, data))
    return rebuilt


@settings(max_examples=200, deadline=None)
@given(_fragments)
async def test_merging_fragments_changes_no_chats_stream(fragments: list[Any]) -> None:
    """However deltas merge, each chat's events rebuild to the same parts, in order, and
    nothing merges across another event or another part."""
    chats = [uuid.uuid4() for _ in range(3)]
    log = _Recorded()
    batcher = EventBatcher(cast(EventLog, log), frame_s=3600)
    publishers = [DeltaPublisher(batcher, chat) for chat in chats]
    sent: dict[uuid.UUID, list[tuple[str, dict[str, Any]]]] = {chat: [] for chat in chats}
    for chat, kind, index, text in fragments:
        name, data = _event(kind, index, text)
        publishers[chat].add(name, data)
        sent[chats[chat]].append((name, data))
    await batcher.written()
    for chat in chats:
        got = [(name, data) for c, name, data in log.published if c == chat]
        assert _replayed(got) == _replayed(sent[chat])
    assert len(log.published) <= len(fragments)
