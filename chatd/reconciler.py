"""The reconciler: ends a chat's turn when no workflow runs it any more, and hands a stored
message to its chat's workflow when no gateway did.

A turn ends itself (ARCHITECTURE rule 8); this is defence in depth against the bug, the
operator's `temporal workflow terminate` or the lost history that leaves a chat `running`
with no run behind it. Every worker runs one in the background; an advisory lock lets one
sweep at a time. It ends a turn only when the chat has not changed for a grace period
(covering the gap between a gateway beginning a turn and its workflow starting) and Temporal
says the chat's workflow has no open run, through the turn's own finish, which applies only
while the chat is still in that turn: a turn begun meanwhile is never touched.

A gateway stores a message before it hands it over; if it dies in between and the client
never sends it again, the message waits in Postgres with no workflow to take it. A message
stored for the grace period whose chat has no open run is handed over here (a
signal-with-start, as the gateway would: the workflow takes a message once, however often
it is handed over).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
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
from chatd.store.stranded import WaitingMessage, WaitingMessageStore
from chatd.store.stuck import QuietTurn, QuietTurnStore
from chatd.store.turns import TurnStore
from chatd.telemetry import METRICS
from workers.turns import queue_message
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
    handed_over: list[uuid.UUID] = field(default_factory=list)
    """Messages handed to their chat's workflow (a message id each)."""


class Reconciler:
    """Finds chats whose status says a turn runs while no workflow run does, and ends them."""

    def __init__(
        self, pool: asyncpg.Pool, client: Client, settings: ReconcilerSettings, task_queue: str
    ) -> None:
        self._candidates = QuietTurnStore(pool)
        self._waiting = WaitingMessageStore(pool)
        self._turns = TurnStore(pool)
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
        """Sweep every interval in the background for the duration of the block."""
        task = asyncio.create_task(self._sweep_forever(), name="chatd-reconciler")
        try:
            yield
        finally:
            task.cancel()
            # wait() leaves the task's cancellation to it, and still lets ours through.
            await asyncio.wait([task])

    async def _sweep_forever(self) -> None:
        interval = self._settings.interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # Postgres or Temporal away: the next sweep tries again
                log.warning("reconciler sweep failed; next in %gs", interval, exc_info=True)

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
            await self._hand_over_stranded(report)
            return report

    async def _hand_over_stranded(self, report: SweepReport) -> None:
        """Hand over the batch's waiting messages whose chat has no open run: all of a
        chat's, in the order they were stored (the first one starts the run the rest join)."""
        batch = self._settings.batch
        messages = await self._waiting.waiting(
            stored_for=self._settings.grace, after=self._after_message, limit=batch
        )
        stranded: dict[uuid.UUID, bool] = {}
        for message in messages:
            if message.chat_id not in stranded:
                closed = await self._closed_workflow_status(message.chat_id)
                stranded[message.chat_id] = closed is not None
            if stranded[message.chat_id] and await self._hand_over(message):
                report.handed_over.append(message.id)
        self._after_message = messages[-1] if len(messages) == batch else None

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
            "chat %s: message %s was stored %s with no workflow to take it; handed over",
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


def _workflow_not_found(err: RPCError) -> bool:
    """The workflow is unknown; not a namespace that is (a misconfigured worker must not end
    every turn it can see), which is NOT_FOUND too but with other details."""
    return err.status == RPCStatusCode.NOT_FOUND and any(
        detail.Is(NotFoundFailure.DESCRIPTOR) for detail in err.grpc_status.details
    )
