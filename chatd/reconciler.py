"""The reconciler: ends a chat's turn when no workflow runs it any more, and hands a stored
message to its chat's workflow when no gateway did.

A turn ends itself (docs/architecture.md, rule 8); this is defence in depth against the bug, the
operator's `temporal workflow terminate` or the lost history that leaves a chat `running`
with no run behind it. Every worker runs one in the background; an advisory lock lets one
sweep at a time. It ends a turn only when the chat has not changed for a grace period
(covering the gap between a gateway beginning a turn and its workflow starting) and Temporal
says the chat's workflow has no open run, through the turn's own finish, which applies only
while the chat is still in that turn: a turn begun meanwhile is never touched.

The chats of `store: false` responses are deleted here once past their `discard_at` with no
turn running (the gateway sets it when the response has been delivered, or its connection
closed; at creation, to the latest moment any connection may still continue it).

A gateway stores a message before it hands it over (under a burst it answers the send in
between); if it dies first, the chat's next send hands the message over before its own, and
with no next send the message waits in Postgres with no workflow to take it. A message no
hand-over has reached Temporal with for `hand_over_after` is handed over here, each chat's
oldest first (a signal-with-start, as the gateway would: the workflow takes a message once,
however often it is handed over).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import asyncpg
from temporalio.api.errordetails.v1 import NotFoundFailure
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from chatd.models import ModelError
from chatd.settings import ReconcilerSettings, titles_enabled
from chatd.store.chats import ChatStore
from chatd.store.missed_hand_overs import MissedHandOverStore, WaitingMessage
from chatd.store.quiet_turns import QuietTurn, QuietTurnStore
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from chatd.telemetry import METRICS
from chatd.turn_starts import queue_message
from workflows.constants import workflow_id

__all__ = ["STUCK_TURN_MESSAGE", "Reconciler", "SweepReport"]

log = logging.getLogger("chatd.reconciler")

STUCK_TURN_MESSAGE = (
    "the turn's workflow is no longer running; the turn was ended by the reconciler"
)
DESCRIBE_TIMEOUT = timedelta(seconds=5)
NOT_FOUND = "NOT_FOUND"
"""The workflow status reported for a chat whose workflow Temporal does not know."""

_OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)
"""A continued-as-new run as the newest is never seen (its successor is); counted open to be
safe, like a status this SDK does not know."""


@dataclass
class SweepReport:
    """What one sweep looked at and what it ended."""

    examined: list[uuid.UUID] = field(default_factory=list)
    ended: list[uuid.UUID] = field(default_factory=list)


class Reconciler:
    """Finds chats whose status says a turn runs while no workflow run does, and ends them;
    finds messages no gateway handed over, and hands them over."""

    def __init__(
        self, pool: asyncpg.Pool, client: Client, settings: ReconcilerSettings, task_queue: str
    ) -> None:
        self._candidates = QuietTurnStore(pool)
        self._waiting = MissedHandOverStore(pool)
        self._turns = TurnStore(pool)
        self._transcript = TranscriptStore(pool)
        self._chats = ChatStore(pool)
        self._client = client
        self._settings = settings
        self._task_queue = task_queue
        self._after: QuietTurn | None = None
        """Where the next sweep carries on, so live turns never crowd out the rest."""
        self._after_message: WaitingMessage | None = None
        """Likewise for waiting messages: those queued behind long turns are passed over."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Sweep turns every interval, and look for stranded messages every half of
        `hand_over_after`, in the background for the duration of the block."""
        tasks = [
            asyncio.create_task(
                _every(self._settings.interval, self.sweep), name="chatd-reconciler"
            ),
            asyncio.create_task(
                _every(self._settings.hand_over_after / 2, self.hand_over_stranded),
                name="chatd-reconciler-hand-overs",
            ),
            asyncio.create_task(
                _every(self._settings.hand_over_after / 2, self.delete_discarded),
                name="chatd-reconciler-discards",
            ),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            # wait() leaves the tasks' cancellation to them, and still lets ours through.
            await asyncio.wait(tasks)

    async def sweep(self) -> SweepReport | None:
        """One pass over a batch of quiet turns; None if another reconciler is sweeping."""
        async with self._candidates.sweep_lock() as held:
            if not held:
                return None
            batch = self._settings.batch
            turns = await self._candidates.quiet_turns(
                unchanged_for=self._settings.grace, after=self._after, limit=batch
            )
            report = SweepReport()
            for turn in turns:
                report.examined.append(turn.chat_id)
                if await self._end_if_stuck(turn):
                    report.ended.append(turn.chat_id)
            self._after = turns[-1] if len(turns) == batch else None
            return report

    async def hand_over_stranded(self) -> list[uuid.UUID] | None:
        """Hand over a batch of the messages no hand-over has reached Temporal with for
        `hand_over_after`, in the order they were stored (a chat's first starts the run the
        rest join); the ids handed over, or None if another reconciler is at it."""
        async with self._waiting.pass_lock() as held:
            if not held:
                return None
            batch = self._settings.batch
            messages = await self._waiting.waiting(
                stored_for=self._settings.hand_over_after, after=self._after_message, limit=batch
            )
            handed_over = [m.id for m in messages if await self._hand_over(m)]
            await self._transcript.handed_over(handed_over)
            self._after_message = messages[-1] if len(messages) == batch else None
            return handed_over

    async def delete_discarded(self) -> Sequence[uuid.UUID]:
        """Delete a batch of `store: false` responses' chats that are past their
        `discard_at` and settled (no turn running, nothing queued)."""
        return await self._chats.delete_discarded(self._settings.batch)

    async def _hand_over(self, message: WaitingMessage) -> bool:
        """Signal-with-start the message's chat workflow with it; False if the chat is gone."""
        chat = await self._chats.get(message.chat_id)
        if chat is None:
            return False
        name_chat = titles_enabled() and chat.title is None
        await queue_message(
            self._client, self._task_queue, chat, str(message.id), name_chat=name_chat
        )
        log.warning(
            "chat %s: message %s was stored %s and not handed over by its gateway; handed over",
            message.chat_id,
            message.id,
            message.created_at.isoformat(),
        )
        return True

    async def _end_if_stuck(self, turn: QuietTurn) -> bool:
        """End the turn if the chat's workflow has no open run; True if this ended it."""
        workflow_status = await self._closed_workflow_status(turn.chat_id)
        if workflow_status is None:
            return False
        if turn.turn_id is None:
            log.error("chat %s is %s with no turn to end", turn.chat_id, turn.status)
            return False
        error = ModelError(
            kind="internal",
            message=STUCK_TURN_MESSAGE,
            detail={
                "workflow_id": workflow_id(str(turn.chat_id)),
                "workflow_status": workflow_status,
            },
        )
        if await self._turns.finish(turn.chat_id, turn.turn_id, "error", last_error=error) is None:
            return False  # the turn ended, or a later one began, since it was read
        METRICS.active_turns.add(-1)
        METRICS.stuck_turns.add(1, {"workflow_status": workflow_status})
        log.error(
            "chat %s: turn %s was %s (unchanged since %s) but its workflow %s is %s;"
            " ended the turn with an internal error",
            turn.chat_id,
            turn.turn_id,
            turn.status,
            turn.updated_at.isoformat(),
            workflow_id(str(turn.chat_id)),
            workflow_status,
        )
        return True

    async def _closed_workflow_status(self, chat_id: uuid.UUID) -> str | None:
        """None while the chat's workflow has an open run (the newest run is described);
        else that run's status, or NOT_FOUND. Any other error propagates: when Temporal
        can't answer, nothing is ended."""
        handle = self._client.get_workflow_handle(workflow_id(str(chat_id)))
        try:
            description = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
        except RPCError as err:
            if _workflow_not_found(err):
                return NOT_FOUND
            raise
        status = description.status
        if status is None or status in _OPEN:
            return None
        return status.name


async def _every(interval: timedelta, job: Callable[[], Awaitable[object]]) -> None:
    """Run `job` every `interval`; a failed run (Postgres or Temporal away) is logged and
    the next one tries again."""
    seconds = interval.total_seconds()
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except Exception:
            log.warning("reconciler pass failed; next in %gs", seconds, exc_info=True)


def _workflow_not_found(err: RPCError) -> bool:
    """The workflow is unknown; not a namespace that is (a misconfigured worker must not end
    every turn it can see), which is NOT_FOUND too but with other details."""
    return err.status == RPCStatusCode.NOT_FOUND and any(
        detail.Is(NotFoundFailure.DESCRIPTOR) for detail in err.grpc_status.details
    )
