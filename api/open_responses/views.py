"""Reading a response: the Response object as of now, waiting for its end, and its event
stream (from the start, or after a client's `starting_after`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from api.background import in_background
from api.open_responses.client_tools import ClientTools, model_tools
from api.open_responses.continuation import idle_deadline
from api.open_responses.events import TERMINAL_EVENTS, ResponseEvents
from api.open_responses.resource import (
    ReasoningShown,
    build_resource,
    cost_of,
    output_format_of,
    output_items,
    reasoning_shown,
    response_status,
    usage_of,
)
from api.quotas import StreamSlot
from api.state import GatewayState
from chatd.store.events import ChatEvent
from chatd.store.responses import ResponseRecord

__all__ = ["current_resource", "discard_later", "event_stream", "response_events", "until_ended"]

WAKE_AT_LEAST_S = 15.0
"""A wait for the chat's next notification looks again after this long (a missed one)."""


def client_tools(record: ResponseRecord) -> ClientTools:
    """The client's tools the response offered, by the names the model calls them."""
    return model_tools(record.request.get("tools", []))[1]


async def current_resource(state: GatewayState, record: ResponseRecord) -> dict[str, Any]:
    """The Response object as the transcript and the response's row hold it now."""
    messages = await state.responses.output_messages(record)
    chat = await state.chats.get(record.chat_id)
    running = chat.turn_id if chat is not None else None
    status, incomplete = response_status(record, messages, running)
    ended = record.ended_at is not None
    reasoning = await _reasoning_shown(state, record)
    return build_resource(
        record,
        status=status,
        output=output_items(record, messages, client_tools(record), reasoning),
        usage=usage_of(messages) if ended else None,
        incomplete=incomplete,
        cost=cost_of(messages) if ended else None,
    )


async def until_ended(state: GatewayState, record: ResponseRecord) -> ResponseRecord:
    """The response once it has ended (its turn waits for the client, or ended)."""
    with state.hub.subscribe(record.chat_id) as wake:
        while True:
            wake.clear()  # before reading, so a notification during the read is not missed
            current = await state.responses.reread(record.id)
            if current is None or current.ended_at is not None:
                return current or record
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), WAKE_AT_LEAST_S)


async def _reasoning_shown(state: GatewayState, record: ResponseRecord) -> ReasoningShown:
    return reasoning_shown(record, (await state.compaction_seal()).seal)


def _snapshot(record: ResponseRecord) -> dict[str, Any]:
    """The response as its stream's opening events show it: the same on every replay."""
    status = "queued" if record.request.get("background") else "in_progress"
    return build_resource(record, status=status, output=[], usage=None)


async def response_events(
    state: GatewayState, record: ResponseRecord, slot: StreamSlot
) -> AsyncIterator[list[dict[str, Any]]]:
    """The response's events from its start, in batches, the last one holding its terminal
    event; an empty batch when nothing happened for a while. It stops early, without a
    terminal event, when the gateway shuts down or the key's slot ends.

    The chat's events are read from the response's start each time: the numbering is
    theirs, so a stream resumed with `starting_after` continues exactly where the client's
    left off.
    """
    translator = ResponseEvents(
        record.id,
        record.turn_id,
        client_tools(record),
        set(record.answered_call_ids),
        extensions=bool(record.request.get("chatd:events")),
        reasoning=await _reasoning_shown(state, record),
        output_format=output_format_of(record),
    )
    opening = _snapshot(record)
    in_progress = {**opening, "status": "in_progress"}
    yield translator.opening(opening)
    cursor = record.after_event_seq
    with state.hub.subscribe(record.chat_id) as wake, state.shutdown.watch(wake):
        slot.wake_with(wake)
        while not (translator.ended or slot.ended or state.shutdown.started):
            wake.clear()
            page = await state.events.read_page(record.chat_id, cursor)
            out: list[dict[str, Any]] = []
            for event in page.events:
                if translator.reasoning.seal is not None:
                    event = await _with_reasoning_state(state, record, event)
                out += translator.feed(event, in_progress)
                cursor = event.seq
                if translator.ended:
                    break
            if out:
                yield out
            if not (page.more or translator.ended):  # a notification says when there is more
                try:
                    await asyncio.wait_for(wake.wait(), WAKE_AT_LEAST_S)
                except TimeoutError:
                    yield []
        if not translator.ended:
            return
    ended = await until_ended(state, record)
    yield translator.closing(await current_resource(state, ended))


async def event_stream(
    state: GatewayState, record: ResponseRecord, starting_after: int | None, slot: StreamSlot
) -> AsyncIterator[str]:
    """The response's events after `starting_after` as SSE frames, each batch one write,
    ending with `[DONE]` once it has ended (a keep-alive comment when nothing happened for
    a while)."""
    skip = -1 if starting_after is None else starting_after
    ended = False
    async for batch in response_events(state, record, slot):
        ended = ended or any(e["type"] in TERMINAL_EVENTS for e in batch)
        unseen = [e for e in batch if e["sequence_number"] > skip]
        if unseen:
            yield _frames(unseen)
        elif not batch:
            yield ": keep-alive\n\n"
    if ended:
        yield "data: [DONE]\n\n"


async def _with_reasoning_state(
    state: GatewayState, record: ResponseRecord, event: ChatEvent
) -> ChatEvent:
    """A model step's `message` event with its reasoning's provider state, which events
    never carry, read back for sealing into the stream's reasoning items."""
    data = event.data
    reasons = any(p.get("type") == "reasoning" for p in data.get("parts") or [])
    if event.event != "message" or data.get("role") != "assistant" or not reasons:
        return event
    stored = await state.transcript.get(record.chat_id, int(data["id"]))
    if stored is None:
        return event
    parts = [p.model_dump(mode="json") for p in stored.parts]
    return event.model_copy(update={"data": {**data, "parts": parts}})


def discard_later(state: GatewayState, record: ResponseRecord) -> None:
    """The `store: false` response is over: have its chat deleted once it has been idle for
    `unstored_keep()` (the reconciler deletes it then), unless a request continues it first.
    Synchronous, for the end of a cancelled request."""
    until = idle_deadline()
    in_background(
        state.chats.keep_unstored(record.chat_id, until), "discarding a store: false chat"
    )


def _frames(events: list[dict[str, Any]]) -> str:
    return "".join(
        f"event: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events
    )
