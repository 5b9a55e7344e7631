"""Payloads of the ChatTurn workflow and its activities: ids, counters and small summaries.

They never carry the transcript (Postgres holds it), so history per step stays constant.
Fields may be added with defaults; never renamed or removed (running workflows replay them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chatd.budgets import PendingBudget
from chatd.chat_status import BusyStatus
from chatd.models import ModelConfig, ModelError
from chatd.parts import Message, Usage
from chatd.settings import DEFAULT_RETRY_DEADLINE_S

__all__ = [
    "AgentsChecked",
    "BeginTurnInput",
    "BeginTurnResult",
    "BudgetDecisionInput",
    "BudgetDecisionResult",
    "ChatTurnInput",
    "CheckAgentsInput",
    "ChildFinished",
    "CompactInput",
    "CompactResult",
    "ExecuteToolInput",
    "ExecuteToolResult",
    "FinishTurnInput",
    "InterruptChildrenInput",
    "PendingBudget",
    "PlannedModel",
    "PublishRetryInput",
    "RecordToolResultsInput",
    "RetryState",
    "SetStatusInput",
    "StageToolDecisionsInput",
    "StageToolResultsInput",
    "StreamStepInput",
    "StreamStepResult",
    "SubmitMessageInput",
    "SubmitMessageResult",
    "SubmitToolApprovalsInput",
    "SubmitToolApprovalsResult",
    "SubmitToolResultsInput",
    "SubmitToolResultsResult",
    "SubmittedToolResult",
    "TitleInput",
    "ToolApproval",
    "ToolCallRef",
    "ToolPolicyDecision",
    "TurnPlan",
    "TurnResume",
    "TurnState",
]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True)


class PlannedModel(_Payload):
    """A model a turn may move to when the chat's own fails: what the workflow shows and
    weighs of it (the activity reads the whole config from the chat)."""

    label: str
    context_limit: int


class TurnPlan(_Payload):
    """What a turn knows once it began; carried into a continued run of a long turn."""

    turn_id: str
    max_steps: int = 25
    model_label: str = ""
    action_timeout_s: int = 600
    compact_at_tokens: int = 0
    """Compact after a step whose prompt reached this many tokens (0: never)."""
    compacts_on_overflow: bool = True
    """False: a provider's context overflow ends the turn with its error, uncompacted (the
    chat's compaction threshold is 0: Open Responses' `truncation: "disabled"`)."""
    context_limit: int = 0
    """The chat model's context window (0: not known)."""
    fallbacks: list[PlannedModel] = []
    """The chat's fallback models, in order: model index i is `fallbacks[i - 1]`."""
    webhook_events: list[str] = []
    """The events the owner's webhook endpoints take, as they stood when the turn began:
    the turn announces only those."""


class TurnResume(_Payload):
    """Where a long turn continues after continue-as-new: ids and counters only."""

    plan: TurnPlan
    next_step: int
    compactions: int = 0
    model_index: int = 0
    """The model the turn moved to (0: the chat's own; i: `plan.fallbacks[i - 1]`)."""


class ChatTurnInput(_Payload):
    """Start input of a ChatTurn run; a continued run carries the queued message ids."""

    chat_id: str
    queued: list[str] = []
    """Ids of queued user messages; without `resume`, the first one is this run's turn."""
    resume: TurnResume | None = None
    """Set when a long turn continues in a new run."""
    retry_deadline_s: int = DEFAULT_RETRY_DEADLINE_S
    """How long a failing dependency (the provider, the database, a tool's backend) is
    retried before the turn ends `unavailable`: the operator's, as the gateway read it."""
    parent_chat_id: str | None = None
    """The chat's parent, if it is a subagent: a turn's end signals it (`child_finished`)."""


class SubmitMessageInput(_Payload):
    """A user message (already stored in `queued_messages`) for this chat."""

    queued_id: str
    untitled: bool = False
    """The chat had no title when the message was sent: a turn it starts also names the chat."""


class SubmitMessageResult(_Payload):
    """Whether the message runs now (`queued=False`) or waits for the running turn."""

    queued: bool
    turn_id: str


class BeginTurnInput(_Payload):
    """Promote the turn's user message and mark the chat running."""

    chat_id: str
    turn_id: str
    run_id: str | None = None
    """The workflow run beginning it: a message handed over twice starts one turn only."""


class BeginTurnResult(_Payload):
    """What the workflow needs to know about the chat for this turn."""

    started: bool
    """False if the queued message (or the chat) was deleted before its turn began."""
    plan: TurnPlan | None = None
    chat_status: str | None = None
    """Without a turn: the chat's status, for the ChatStatus search attribute."""


class StreamStepInput(_Payload):
    """Generate step `step` of a turn from the persisted transcript."""

    chat_id: str
    turn_id: str
    step: int
    attempt: int = 1
    """Workflow-level attempt (model retries); >1 means clients must drop the shown partial."""
    begin: bool = False
    """The turn's first step begins the turn too (see `StreamStepResult.began`)."""
    run_id: str | None = None
    """With `begin`: the workflow run beginning it (as `BeginTurnInput.run_id`)."""
    may_finish: bool = True
    """The workflow's instruction: finish the turn too if the step ends it
    (`decide.ends_turn`), sparing a local activity."""
    compact_at_tokens: int = 0
    """The turn's compaction threshold, for `decide.ends_turn` (with `begin`, the new plan's)."""
    model_index: int = 0
    """Which model streams: 0 the chat's own, i its `fallback_models[i - 1]`."""
    opens_response: bool = False
    """The first step after the client's input (the turn's first, or the first after its
    function results or approvals): a forced tool choice binds only this one
    (`chatd.tool_use`)."""
    steps_before: int = 0
    """The activity goes on past a step whose calls are all quick (it runs them and streams
    the next step: `decide.continues_in_activity`), but not to this step: the turn's step
    limit, or where a long turn continues as a new run. 0: it streams `step` only."""


ToolPolicyDecision = Literal["auto", "ask", "deny"]
"""What the approval policy says of a call: run it, ask a person first, or refuse it."""


class ToolCallRef(_Payload):
    """A tool call the model made, by id and name (arguments stay in Postgres).

    The policy flags are captured when the step is generated, so replay sees the same ones.
    """

    id: str
    name: str
    kind: Literal["builtin", "dynamic", "unknown", "mcp", "wait"] = "builtin"
    """Who runs it: the worker (a built-in or an MCP server's tool), the client, or the
    workflow itself (`wait`: `wait_agent`, a durable wait for subagents)."""
    exclusive: bool = False
    stop_after: bool = False
    policy: ToolPolicyDecision = "auto"
    """The chat's approval policy for this call, as it stood when the step was generated."""
    inline: bool = False
    """The tool is quick and local (`Tool.inline`): the workflow runs it as a local activity,
    or the model step's activity runs it, when all of its step's calls are quick."""


class StreamStepResult(_Payload):
    """A persisted model step, summarised."""

    message_id: int | None
    tool_calls: list[ToolCallRef] = []
    stop_reason: str = "end_turn"
    input_tokens: int = 0
    """The whole prompt, cached parts included."""
    output_tokens: int = 0
    interrupted: bool = False
    """The step was cut short by an interrupt; its partial parts are persisted. (A step whose
    calls the activity ran before an interrupt stopped it going on is whole, results too.)"""
    began: BeginTurnResult | None = None
    """With `begin`: the turn's beginning, as the `begin_turn` activity would have answered."""
    step: int | None = None
    """The step this result is of, when the activity went on past the one it was asked for
    (`StreamStepInput.steps_before`); the steps before it are saved, their results too."""
    finished_turn: bool = False
    """With `may_finish`: the step ended the turn and recorded it (status `waiting`)."""
    format_error: str | None = None
    """The final answer does not fit the chat's structured output format: why."""
    format_note_saved: bool = False
    """With `format_error`: a message asking the model to answer again was saved after the
    step (its first misfit this turn), so the next step is the corrective one."""
    pending_budget: PendingBudget | None = None
    """The step was not sent: a budget can't pay for it (the turn pauses)."""


class ExecuteToolInput(_Payload):
    """Run one built-in tool call of a persisted step."""

    chat_id: str
    turn_id: str
    step: int
    call: ToolCallRef


class ExecuteToolResult(_Payload):
    """Whether the staged result is an error."""

    is_error: bool


class RecordToolResultsInput(_Payload):
    """Persist the results of some of a step's calls as one tool message, in call order."""

    chat_id: str
    turn_id: str
    step: int
    calls: list[ToolCallRef]
    errors: dict[str, str] = {}
    """Error results for calls that have no staged result (policy, interrupt, expiry)."""
    part: Literal["tools", "approved", "client-tools"] = "tools"
    """Which tool message of the step: results of calls that ran without asking, of calls
    a person decided on, or the client's results."""


class SubmittedToolResult(_Payload):
    """One result of a client-executed (dynamic) tool call."""

    tool_call_id: str
    output: Any = None
    is_error: bool = False
    media_type: str | None = None
    data: str | None = None
    """An image or file the result holds, as base64 `data` of `media_type`."""


class SubmitToolResultsInput(_Payload):
    """The client's answer to every pending dynamic tool call."""

    tool_call_ids: list[str] = []
    """The calls answered, whose results the gateway staged in Postgres before sending: the
    results themselves never enter the history."""
    results: list[SubmittedToolResult] = []
    """The results, from a sender that reaches Temporal directly (the `temporal` CLI); the
    workflow stages them."""

    @property
    def call_ids(self) -> list[str]:
        """The ids of the calls this submission answers, in whichever form it came."""
        return self.tool_call_ids or [r.tool_call_id for r in self.results]


class SubmitToolResultsResult(_Payload):
    """The results were accepted and persisted."""

    accepted: bool = True


class ToolApproval(_Payload):
    """A person's decision on one call that waits for approval."""

    tool_call_id: str
    decision: Literal["approve", "deny"]
    arguments: dict[str, Any] | None = None
    """With `approve`: arguments that replace the model's (checked against the tool's schema)."""
    message: str | None = Field(default=None, max_length=4000)
    """With `deny`: what the model is told."""
    remember: bool = False
    """With `approve`: the chat's policy says `auto` for this tool from now on."""


class SubmitToolApprovalsInput(_Payload):
    """Decisions for every call waiting for approval, and who made them."""

    decisions: list[ToolApproval]
    decided_by: str | None = Field(default=None, max_length=200)
    """Who decided, as the sender says (an update sent straight to Temporal)."""
    key_id: str | None = None
    """The API key the gateway authenticated (set by the gateway only)."""
    owner: str | None = None
    """The owner of that key (set by the gateway only)."""


class SubmitToolApprovalsResult(_Payload):
    """The decisions were accepted and persisted."""

    accepted: bool = True


class StageToolDecisionsInput(_Payload):
    """Check the decisions against the tools' schemas, then persist them (first write wins)."""

    chat_id: str
    turn_id: str
    step: int
    approvals: SubmitToolApprovalsInput
    calls: list[ToolCallRef]


class StageToolResultsInput(_Payload):
    """Stage client-submitted results for the calls of step `step` (first write wins)."""

    chat_id: str
    turn_id: str
    step: int
    results: list[SubmittedToolResult]
    calls: list[ToolCallRef]


class SetStatusInput(_Payload):
    """A status change inside a turn (requires_action and back)."""

    chat_id: str
    turn_id: str
    status: BusyStatus
    step: int = 0
    pending: list[ToolCallRef] = []
    expires_at: datetime | None = None
    pending_budget: PendingBudget | None = None
    """requires_action for a budget, not for calls."""


class BudgetDecisionInput(_Payload):
    """Update `decide_budget`: raise the budget a paused turn waits on, or end the turn."""

    add_usd: float | None = Field(default=None, gt=0, le=1_000_000)
    stop: bool = False
    key_id: str | None = None
    """The API key that decided (set by the gateway only)."""
    chat_id: str = ""
    turn_id: str = ""
    pending: PendingBudget | None = None
    """Filled in by the workflow: the pause decided on."""


class BudgetDecisionResult(_Payload):
    """The decision was accepted and persisted."""

    accepted: bool = True


class ChildFinished(_Payload):
    """Signal `child_finished`: a subagent's turn ended (its outcome is on its chat)."""

    chat_id: str
    status: str


class CheckAgentsInput(_Payload):
    """Look at the subagents a `wait_agent` call waits for; with `final` (or once all
    finished), stage the call's result."""

    chat_id: str
    turn_id: str
    step: int
    call: ToolCallRef
    final: bool = False


class AgentsChecked(_Payload):
    """Whether the wait is over (its result staged), and how long it may last."""

    done: bool
    timeout_s: float = 0
    is_error: bool = False


class InterruptChildrenInput(_Payload):
    """Interrupt the running subagents of a chat whose turn was interrupted."""

    chat_id: str


class PublishRetryInput(_Payload):
    """Tell clients a model attempt failed and when the next one starts."""

    chat_id: str
    attempt: int
    delay_ms: int
    retrying_at: datetime
    error: ModelError
    model: str | None = None
    """The label of the model the next attempt uses (another one after a fallback)."""


class FinishTurnInput(_Payload):
    """End the turn: final status, and the error if it failed."""

    chat_id: str
    turn_id: str
    status: Literal["waiting", "error", "requires_action"]
    error: ModelError | None = None


class RetryState(_Payload):
    """The backoff in progress, as the `state` query shows it."""

    attempt: int
    next_attempt_at: datetime
    error: ModelError


class TurnState(_Payload):
    """Answer of the `state` query."""

    chat_id: str
    turn_id: str | None
    status: str
    step: int
    queued_messages: list[str] = Field(default_factory=list)
    pending_tool_calls: list[ToolCallRef] = Field(default_factory=list)
    retry: RetryState | None = None
    pending_budget: PendingBudget | None = None


class CompactInput(_Payload):
    """Compact the chat's context after `step` (the `index`th compaction of the turn)."""

    chat_id: str
    turn_id: str
    step: int
    index: int
    model_index: int = 0
    """The model the turn is on (a fallback's summary is written by that fallback)."""


class CompactResult(_Payload):
    """The summary message, and roughly how many tokens the prompt has now."""

    message_id: int
    estimated_tokens: int


class SummariseWindowInput(_Payload):
    """Summarise a conversation for `POST /v1/responses/compact`: a chat's context through
    one of its messages (a previous response's conversation), then the given messages."""

    model: ModelConfig
    chat_id: str | None = None
    through_message_id: int | None = None
    messages: list[Message] = Field(default_factory=list)


class SummariseWindowResult(_Payload):
    """The summary and what it cost, or why there is none."""

    summary: str = ""
    usage: Usage = Field(default_factory=Usage)
    error: ModelError | None = None


class TitleInput(_Payload):
    """Name a new chat."""

    chat_id: str
    turn_id: str | None = None
    """Name it after this turn's message (queued: the title runs as the turn begins); without
    it, after the transcript's first message."""
