"""Approval decisions: checked against the tools' schemas, then persisted with who decided."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.failures import classified_failures
from chatd.parts import ToolCallPart
from chatd.store.chats import ChatStore
from chatd.store.step_keys import StepKey
from chatd.store.tool_decisions import Decider, NewDecision, ToolDecisionStore, canonical_sha256
from chatd.store.transcript import TranscriptStore
from chatd.tools.base import InvalidArguments
from chatd.tools.catalog import ToolCatalog, TurnTools
from workflows.controls import INVALID_TOOL_APPROVALS
from workflows.payloads import StageToolDecisionsInput, ToolApproval

__all__ = ["ApprovalActivities"]


class ApprovalActivities:
    """Persists a person's decisions on the calls of a step that wait for approval."""

    def __init__(self, pool: asyncpg.Pool, catalog: ToolCatalog) -> None:
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._decisions = ToolDecisionStore(pool)
        self._catalog = catalog

    @activity.defn(name="stage_tool_decisions")
    async def stage_tool_decisions(self, input: StageToolDecisionsInput) -> None:
        """Check edited arguments against each tool's schema (refused: non-retryable
        `InvalidToolApprovals`, nothing written), then write every decision at once; a
        retried write is a no-op, and the first submission's decisions stand."""
        async with classified_failures("recording tool approvals"):
            chat_id = uuid.UUID(input.chat_id)
            chat = await self._chats.get(chat_id)
            step = await self._transcript.find(
                chat_id, input.turn_id, StepKey.assistant(input.step)
            )
            if chat is None or step is None:
                raise ApplicationError(
                    "the step waiting for approval is gone",
                    type=INVALID_TOOL_APPROVALS,
                    non_retryable=True,
                )
            calls = {p.id: p for p in step.parts if isinstance(p, ToolCallPart)}
            tools = await self._catalog.for_turn(chat, input.turn_id)
            decisions = [
                _decision(tools, calls[d.tool_call_id], d) for d in input.approvals.decisions
            ]
            approvals = input.approvals
            decider = Decider(
                key_id=approvals.key_id, owner=approvals.owner, decided_by=approvals.decided_by
            )
            await self._decisions.record(chat_id, input.turn_id, input.step, decisions, decider)


def _decision(tools: TurnTools, call: ToolCallPart, approval: ToolApproval) -> NewDecision:
    """The decision as recorded: the arguments the call runs with, checked if edited."""
    arguments = call.arguments or "{}"
    edited = False
    if approval.arguments is not None:
        _check(tools, call, approval.arguments)
        given = json.dumps(approval.arguments, ensure_ascii=False)
        edited = canonical_sha256(given) != canonical_sha256(arguments)
        if edited:
            arguments = given
    return NewDecision(
        tool_call_id=call.id,
        tool_name=call.name,
        decision=approval.decision,
        arguments=arguments,
        edited=edited,
        message=approval.message,
        remember=approval.remember,
    )


def _check(tools: TurnTools, call: ToolCallPart, arguments: dict[str, Any]) -> None:
    """Refuse edited arguments the tool's schema doesn't accept."""
    tool = tools.tool(call.name)
    if tool is None:
        return  # nothing to check against: the call answers "Tool not found" when it runs
    try:
        tool.check_arguments(arguments)
    except InvalidArguments as err:
        raise ApplicationError(
            f"the arguments for {call.id} ({call.name}) don't fit the tool's schema: {err}",
            {"tool_call_id": call.id},
            type=INVALID_TOOL_APPROVALS,
            non_retryable=True,
        ) from None
