"""Sending a user message: stored in the chat's queue (after the idempotency, busy and quota
checks), then handed to the chat's ChatTurn workflow, which starts a turn or queues it in the
running one. The native send, an edit and `POST /v1/responses` all come through here.

A send whose workers are behind is answered once the message is stored, its hand-over going
on in the background (`api.hand_overs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable

from fastapi import Request
from starlette.requests import HTTPConnection
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from api.background import in_background
from api.budgets import refuse_unpriced
from api.errors import ApiError, update_dropped
from api.hand_overs import HandOvers
from api.idempotency import check_same_request, request_digest
from api.schemas import SendMessage, SendMessageResult
from api.state import state_of
from api.turn_updates import interrupt_turn
from chatd.chat_status import BUSY
from chatd.store.chats import ChatRecord
from chatd.store.events import Conn
from chatd.store.recent_events import RecentEvents
from chatd.store.transcript import QueuedMessage, TranscriptStore
from chatd.store.turns import TurnStore
from chatd.telemetry import METRICS
from chatd.turn_starts import hand_over_message, queue_message
from workflows.payloads import SubmitMessageResult

__all__ = [
    "BEGIN_WAIT_S",
    "HAND_OVER_WAIT_S",
    "accept_message",
    "hand_over_stored",
    "store_message",
    "submit_message",
    "until_begun",
]

log = logging.getLogger("chatd.api.sending")

HAND_OVER_WAIT_S = 0.5
"""How long a send waits for a worker to take the message before queueing it durably."""
BEGIN_WAIT_S = 0.3
"""How long a send that started a turn waits for its first step to begin it (then the
gateway begins it): with `HAND_OVER_WAIT_S`, a send is answered within a second."""


async def submit_message(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    queued_id: uuid.UUID,
    update_id: str,
    *,
    name_chat: bool,
    hand_overs: HandOvers,
    earlier: list[uuid.UUID] | None = None,
) -> SubmitMessageResult | None:
    """Start a turn for this message or queue it in the running one; None if no worker took
    it in time (or the workers are behind, `HandOvers`, or Temporal dropped the update), so
    its signal-with-start goes in the background: it starts or joins the chat's turns as
    soon as a worker runs the workflow.

    The chat's older messages Temporal may not have (their gateway died after storing them)
    are handed over first, so messages are taken in the order sent. `update_id` makes a
    retried call the same update (Temporal deduplicates it); with `name_chat`, a turn the
    message starts also names the chat. `earlier`, if known, are those older messages as
    the message's store read them.
    """
    if not hand_overs.behind:
        try:
            with hand_overs.waiting():
                result = await asyncio.wait_for(
                    _update_in_order(
                        client,
                        task_queue,
                        transcript,
                        chat,
                        queued_id,
                        update_id,
                        name_chat,
                        earlier,
                        hand_overs,
                    ),
                    HAND_OVER_WAIT_S,
                )
        except RPCError as err:
            # Too many updates in flight on the run, or this one dropped with its workflow
            # task: the message is stored, so its signal hands it over.
            if err.status != RPCStatusCode.RESOURCE_EXHAUSTED and not update_dropped(err):
                raise
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            # Our deadline, or the server's (cancelling the call surfaces as the SDK's error).
            hand_overs.fell_behind()
        else:
            return result
    hand_overs.in_background(
        str(queued_id),
        lambda: _queue_in_order(
            client, task_queue, transcript, chat, hand_overs, name_chat=name_chat
        ),
    )
    return None


async def _update_in_order(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    queued_id: uuid.UUID,
    update_id: str,
    name_chat: bool,
    earlier: list[uuid.UUID] | None,
    hand_overs: HandOvers,
) -> SubmitMessageResult:
    """The chat's older messages not handed over yet by signal (read now, unless known),
    then this one by update; all of them marked in the gateway's next batch of marks (the
    mark is no step of the send: a turn's begin, a moment later, supersedes it)."""
    if earlier is None:
        waiting = await transcript.not_handed_over(chat.id)
        earlier = waiting[: waiting.index(queued_id)] if queued_id in waiting else waiting
    for message_id in earlier:
        await queue_message(client, task_queue, chat, str(message_id), name_chat=name_chat)
    result = await hand_over_message(
        client, task_queue, chat, str(queued_id), update_id, name_chat=name_chat
    )
    hand_overs.mark_soon(transcript, [*earlier, queued_id])
    return result


async def _queue_in_order(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    hand_overs: HandOvers,
    *,
    name_chat: bool,
) -> None:
    """Every message of the chat not handed over yet (this send's among them, unless a
    later send's hand-over took it already), oldest first, by signal-with-start; marked in
    the gateway's next batch of marks."""
    waiting = await transcript.not_handed_over(chat.id)
    for message_id in waiting:
        await queue_message(client, task_queue, chat, str(message_id), name_chat=name_chat)
    hand_overs.mark_soon(transcript, waiting)


async def until_begun(
    transcript: TranscriptStore,
    turns: TurnStore,
    chat_id: uuid.UUID,
    queued_id: uuid.UUID,
    notified: asyncio.Event,
    recent: RecentEvents | None,
) -> None:
    """Return once the turn this message started has begun: a client then finds it running.

    The turn's first step begins it; waiting for that (woken by the chat's notifications,
    `notified` is subscribed before the message was submitted) keeps the gateway's writes
    out of the step's way. The begin's `status` event, on its notification (`recent`, the
    hub's copy), says so without a read. If no worker takes the step in time, the gateway
    begins the turn itself: the same idempotent write, whoever is first.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BEGIN_WAIT_S
    while True:
        # Look only when woken: the turn can't have begun unnoticed before the subscription.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(notified.wait(), max(0.0, deadline - loop.time()))
        if notified.is_set():
            notified.clear()  # before looking: a later notification wakes the next wait
            if recent is not None and recent.shows_begun(chat_id, str(queued_id)):
                return
            if await transcript.is_promoted(queued_id):
                return
        if loop.time() >= deadline:
            if await turns.begin(chat_id, str(queued_id)):
                METRICS.active_turns.add(1)
            return


async def accept_message(
    request: Request, chat: ChatRecord, body: SendMessage, idempotency_key: str | None
) -> SendMessageResult:
    """Store the message, then start its turn or queue it. A retried send (the same
    Idempotency-Key or `client_message_id`, and the same body) is answered as the first was,
    whatever the chat does now; the same key with another body is a 422."""
    with state_of(request).chat_sends.slot(chat.id):
        queued, created = await store_message(request, chat, body, idempotency_key)
        return await hand_over_stored(request, chat, queued, created)


async def store_message(
    request: HTTPConnection,
    chat: ChatRecord,
    body: SendMessage,
    idempotency_key: str | None,
    *,
    admitted: bool = False,
    conn: Conn | None = None,
) -> tuple[QueuedMessage, bool]:
    """Store the message in the chat's queue (after the quota and `on_busy` checks, unless
    `admitted` with a chat made for it just now), or find the one a retry of this send
    stored; and whether this call stored it. With `conn`, within its transaction."""
    state = state_of(request)
    client_id = idempotency_key or body.client_message_id
    digest = request_digest(body)
    if client_id is not None:
        earlier = await state.transcript.sent(chat.id, client_id)
        if earlier is not None:
            check_same_request(earlier.request_digest, digest)
            return earlier, False
    if body.on_busy == "reject" and chat.status in BUSY:
        raise ApiError(409, "chat_busy", "a turn is running", {"status": chat.status})
    if body.max_cost_usd is not None:
        refuse_unpriced(state.prices, chat, "max_cost_usd")
    if not admitted:  # before storing: a refused message leaves no trace
        await state.message_gate.admit(chat)
    if body.on_busy == "interrupt" and chat.status in BUSY:
        await interrupt_turn(state.temporal, state.turns, chat)
    queued, created = await state.transcript.enqueue(
        chat.id, body.user_parts(), client_id, digest, conn=conn, max_cost_usd=body.max_cost_usd
    )
    if not created:  # a concurrent send with the same key stored it first
        check_same_request(queued.request_digest, digest)
    return queued, created


async def hand_over_stored(
    request: HTTPConnection,
    chat: ChatRecord,
    queued: QueuedMessage,
    created: bool,
    *,
    wait_for_begin: bool = True,
) -> SendMessageResult:
    """Start the stored message's turn or queue it in the running one. A message stored by
    an earlier call (`created` False) is handed over again (the same update, which Temporal
    deduplicates) unless its turn has taken it.

    A started turn is waited for until it has begun (`until_begun`), so the client finds it
    running; without `wait_for_begin` (a caller that streams the turn's events next, and
    would only delay the first of them) that wait goes on in the background."""
    state = state_of(request)
    with contextlib.ExitStack() as subscription:
        # Subscribed before anything can begin the turn: `until_begun` then misses no wake-up.
        notified = subscription.enter_context(state.hub.subscribe(chat.id))
        if not created and await state.transcript.is_promoted(queued.id):
            return SendMessageResult(queued=False, message_id=queued.id, turn_id=str(queued.id))
        result = await submit_message(
            state.temporal,
            state.task_queue,
            state.transcript,
            chat,
            queued.id,
            update_id=f"msg-{queued.id}",
            name_chat=state.generate_titles and chat.title is None,
            hand_overs=state.hand_overs,
            earlier=queued.earlier_not_handed_over,
        )
        if result is None:  # no worker took it in time: queued durably, its turn to come
            return SendMessageResult(queued=True, message_id=queued.id, turn_id=None)
        if not result.queued:
            begun = until_begun(
                state.transcript, state.turns, chat.id, queued.id, notified, state.hub.recent
            )
            if wait_for_begin:
                await begun
            else:
                in_background(_subscribed(subscription.pop_all(), begun), "beginning a turn")
    return SendMessageResult(queued=result.queued, message_id=queued.id, turn_id=result.turn_id)


async def _subscribed(subscription: contextlib.ExitStack, work: Awaitable[None]) -> None:
    """`work`, then the subscription it was woken by is closed."""
    with subscription:
        await work
