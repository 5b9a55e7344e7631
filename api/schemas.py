"""HTTP request and response bodies (kept apart from workflow payloads)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from api.user_parts import (
    MAX_PARTS,
    MAX_TEXT,
    UserPart,
    UserTextPart,
    check_message_size,
    check_user_parts,
    refuse_foreign_parts,
    text_bytes,
)
from chatd.budgets import PendingBudget
from chatd.chat_status import ChatStatus
from chatd.models import ModelConfig, ModelError, WebSearchConfig
from chatd.output_format import OutputFormat
from chatd.parts import Part, Usage
from chatd.store.chats import ChatRecord, ChatSummary, DynamicTool
from chatd.store.tool_decisions import ToolDecision
from chatd.store.transcript import QueuedMessage, StoredMessage
from chatd.tool_policy import PolicyDecision, ToolPolicy
from chatd.tools.names import client_tool_name
from workflows.payloads import SubmittedToolResult, ToolApproval

__all__ = [
    "BudgetDecision",
    "ChatChildren",
    "ChatList",
    "ChatOut",
    "ChatSettings",
    "ChatSummary",
    "ChatUsage",
    "CreateChat",
    "EditMessage",
    "ForkChat",
    "MessageList",
    "SendMessage",
    "SendMessageResult",
    "ToolApprovals",
    "ToolDecisionList",
]


class _Strict(BaseModel):
    """An HTTP input: unknown fields are refused and nothing is coerced (`0` is not `false`,
    `"5"` is not `5`), so what the document says is what the gateway accepts."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers_as_ints(cls, data: Any) -> Any:
        return _ints_for_whole_floats(data)


def _ints_for_whole_floats(data: Any) -> Any:
    """`data` with every float that has no fraction made an int: JSON (and its Schema) has
    one number type, so `5.0` is the integer `5`, which strict validation would refuse."""
    if isinstance(data, float) and data.is_integer():
        return int(data)
    if isinstance(data, dict):
        return {key: _ints_for_whole_floats(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_ints_for_whole_floats(value) for value in data]
    return data


class StrictWebSearch(WebSearchConfig):
    """`WebSearchConfig` as a client sends it: validated strictly."""

    model_config = ConfigDict(strict=True)


class StrictOutputFormat(OutputFormat):
    """`OutputFormat` as a client sends it: validated strictly, no unknown fields."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class StrictModelConfig(ModelConfig):
    """`ModelConfig` as a client sends it: validated strictly."""

    model_config = ConfigDict(strict=True)

    web_search: StrictWebSearch | None = None
    output_format: StrictOutputFormat | None = None


class StrictDynamicTool(DynamicTool):
    """`DynamicTool` as a client sends it: validated strictly, under a name of its own."""

    model_config = ConfigDict(strict=True)

    @field_validator("name")
    @classmethod
    def _not_a_worker_tool(cls, name: str) -> str:
        return client_tool_name(name)


class StrictToolResult(SubmittedToolResult):
    """`SubmittedToolResult` as a client sends it: validated strictly, no unknown fields
    (the workflow payload itself stays as it is)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _validated_as(strict: Any) -> GetPydanticSchema:
    """Validate a field as `strict` (its declared type with strict subclasses), so the field
    keeps the type the store and the workflows take."""
    return GetPydanticSchema(lambda _type, handler: handler(strict))


_NON_EMPTY: dict[str, Any] = {
    "anyOf": [
        {"required": ["content"], "properties": {"content": {"type": "string", "minLength": 1}}},
        {"required": ["parts"], "properties": {"parts": {"type": "array", "minItems": 1}}},
    ]
}
"""The document's way of saying `content` or `parts` must be non-empty."""


class EditMessage(_Strict):
    """The new content of a user message: `content` text, or `parts` (text and files; when
    `parts` is non-empty, `content` is ignored)."""

    model_config = ConfigDict(json_schema_extra=_NON_EMPTY)

    content: str | None = Field(default=None, max_length=MAX_TEXT)
    parts: list[UserPart] | None = Field(default=None, max_length=MAX_PARTS)

    @model_validator(mode="before")
    @classmethod
    def _user_parts_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            refuse_foreign_parts(data.get("parts"))
        return data

    @model_validator(mode="after")
    def _has_content(self) -> EditMessage:
        if not self.user_parts():
            raise ValueError("give `content` (non-empty text) or `parts`")
        if self.parts:
            check_user_parts(self.parts)
        else:
            check_message_size(text_bytes(self.content or ""))
        return self

    def user_parts(self) -> list[Part]:
        """The parts to store."""
        if self.parts:
            return [*self.parts]
        return [UserTextPart(type="text", text=self.content)] if self.content else []


MAX_BUDGET_USD = 1_000_000.0
"""The largest budget the API takes: far above any real one, below float trouble."""


class SendMessage(EditMessage):
    """A user message: `content` text, or `parts` (text and files)."""

    client_message_id: str | None = Field(default=None, min_length=1, max_length=200)
    on_busy: Literal["enqueue", "interrupt", "reject"] = "enqueue"
    max_cost_usd: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD)
    """What the turn this message starts may spend, its subagents' steps included; the
    turn pauses (`pending_budget`) rather than go over."""


class CreateChat(_Strict):
    """Body of `POST /chats`."""

    model: StrictModelConfig = Field(default_factory=StrictModelConfig)
    title: str | None = Field(default=None, max_length=200)
    system_prompt: str | None = Field(default=None, max_length=MAX_TEXT)
    dynamic_tools: Annotated[list[DynamicTool], _validated_as(list[StrictDynamicTool])] = Field(
        default_factory=list, max_length=64
    )
    active_tools: list[str] | None = Field(default=None, max_length=64)
    max_steps: int = Field(default=25, ge=1, le=1000)
    action_timeout_s: int = Field(default=600, ge=1, le=7 * 24 * 3600)
    """How long requires_action waits for client tool results."""
    compaction_threshold: float = Field(default=0.7, gt=0, le=1)
    """Compact when a step's prompt reaches this fraction of the model's context limit."""
    tool_policy: ToolPolicy = Field(default_factory=dict)
    """Which tools run by themselves (`auto`), wait for a person (`ask`) or are refused
    (`deny`), by name or glob; tools it doesn't name follow the operator's policy."""
    mcp_servers: list[str] = Field(default_factory=list, max_length=32)
    """MCP servers, by name from the operator's configuration, whose tools the chat offers."""
    subagents: bool = False
    """Let the model spawn subagents (chats of their own, below this one); the operator may
    allow it for every chat."""
    fallback_models: Annotated[list[ModelConfig], _validated_as(list[StrictModelConfig])] = Field(
        default_factory=list, max_length=3
    )
    """Models to fall back on, in order, when a step's model stays down."""
    budget_usd: float | None = Field(default=None, ge=0, le=MAX_BUDGET_USD)
    """What the chat and its subagents may spend, in all; a turn pauses
    (`pending_budget`) rather than go over."""
    message: SendMessage | None = None


class ForkChat(_Strict):
    """Body of `POST /chats/{id}/fork`."""

    message_id: int = Field(ge=1, le=2**53 - 1)
    """The last message the fork keeps: its transcript is the chat's up to and including it
    (bounded by JSON's exact integers, far above any transcript id)."""
    title: str | None = Field(default=None, max_length=200)
    """The fork's title; the chat's when left out."""


class ChatSettings(_Strict):
    """Body of `PATCH /chats/{id}`: the fields to change (a change applies from the turn's
    next step)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    title: str | SkipJsonSchema[None] = Field(default=None, min_length=1, max_length=200)
    tool_policy: ToolPolicy | SkipJsonSchema[None] = None
    budget_usd: float | None = Field(default=None, ge=0, le=MAX_BUDGET_USD)
    """The chat's budget; null removes it."""

    @model_validator(mode="before")
    @classmethod
    def _changes_something(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if not data:
                raise ValueError("give `title`, `tool_policy` or `budget_usd`")
            nulls = [n for n, value in data.items() if value is None and n != "budget_usd"]
            if nulls:
                raise ValueError(f"{nulls[0]} can't be null: leave it out to keep it")
        return data


class BudgetDecision(_Strict):
    """Body of `POST /chats/{id}/budget`: raise the budget the turn is paused on by
    `add_usd`, or end the turn (`decision: stop`), its work so far kept."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})

    add_usd: Annotated[float, Field(gt=0, le=MAX_BUDGET_USD)] | SkipJsonSchema[None] = None
    decision: Literal["stop"] | SkipJsonSchema[None] = None

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = [name for name, value in data.items() if value is None]
            if nulls:
                raise ValueError(f"{nulls[0]} can't be null: give the one you mean")
        return data

    @model_validator(mode="after")
    def _one_of(self) -> BudgetDecision:
        if (self.add_usd is None) == (self.decision is None):
            raise ValueError('give `add_usd` or `"decision": "stop"`, one of them')
        return self


class StrictToolApproval(ToolApproval):
    """`ToolApproval` as a client sends it: validated strictly, no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ToolApprovals(_Strict):
    """Body of `POST /chats/{id}/tool-approvals`: one decision per call waiting for approval."""

    decisions: Annotated[list[ToolApproval], _validated_as(list[StrictToolApproval])] = Field(
        max_length=128
    )


class ToolDecisionList(BaseModel):
    """The approval audit of a chat, oldest first; pass `next_offset` as `offset` for more."""

    decisions: list[ToolDecision]
    has_more: bool
    next_offset: int | None
    """Set exactly when `has_more`."""


class Accepted(BaseModel):
    """The request was accepted; its effect shows in the stream."""

    accepted: bool = True


class ToolResults(_Strict):
    """Body of `POST /chats/{id}/tool-results`."""

    results: Annotated[list[SubmittedToolResult], _validated_as(list[StrictToolResult])] = Field(
        max_length=128
    )


class QueuedOut(BaseModel):
    """A queued user message."""

    id: uuid.UUID
    parts: list[Part]
    created_at: datetime

    @classmethod
    def of(cls, q: QueuedMessage) -> QueuedOut:
        """From the stored row."""
        return cls(id=q.id, parts=q.parts, created_at=q.created_at)


class ChatUsage(Usage):
    """A chat's usage, and its subagents' apart."""

    children: Usage | None = None
    """What the chat's subagents used (theirs included); null if it has none."""


class ChatOut(BaseModel):
    """A chat as the API shows it."""

    id: uuid.UUID
    title: str | None
    model: ModelConfig
    system_prompt: str | None
    dynamic_tools: list[DynamicTool]
    active_tools: list[str] | None
    max_steps: int
    action_timeout_s: int
    compaction_threshold: float
    status: ChatStatus
    last_error: ModelError | None
    pending_tool_calls: list[dict[str, Any]] | None
    action_expires_at: datetime | None
    tool_policy: dict[str, PolicyDecision]
    mcp_servers: list[str]
    parent_chat_id: uuid.UUID | None
    """The chat that spawned this one, if it is a subagent."""
    depth: int
    """How far below a root chat this one is (a root is 0)."""
    subagents: bool
    fallback_models: list[ModelConfig]
    queued_messages: list[QueuedOut]
    usage: ChatUsage
    budget_usd: float | None = None
    """What the chat and its subagents may spend, in all (null: no budget)."""
    cost_usd: float = 0.0
    """What the chat and its subagents cost so far, at the deployment's prices."""
    pending_budget: PendingBudget | None = None
    """Set while the turn is paused on a budget (`requires_action`): raise it or stop with
    `POST /chats/{id}/budget`."""
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(
        cls,
        chat: ChatRecord,
        queued: list[QueuedMessage],
        children_usage: Usage | None = None,
        cost_usd: float = 0.0,
    ) -> ChatOut:
        """From the stored chat, its queue, its subagents' usage and its cost."""
        data = chat.model_dump()
        data["queued_messages"] = [QueuedOut.of(q) for q in queued]
        data["usage"]["children"] = children_usage
        data["cost_usd"] = cost_usd
        return cls.model_validate(data)


class ChatChildren(BaseModel):
    """A chat's subagents, oldest first (the order they were spawned in)."""

    data: list[ChatSummary]


class ChatList(BaseModel):
    """A page of chat summaries; pass `next_before` as `before` for the next page. A page
    ends at its `limit` or at its byte budget, whichever comes first."""

    chats: list[ChatSummary]
    has_more: bool
    """Whether more chats follow this page."""
    next_before: str | None
    """Set exactly when `has_more`."""


class SendMessageResult(BaseModel):
    """Where the message went."""

    queued: bool
    message_id: uuid.UUID
    """The queued message's id (also the id of the turn it starts)."""
    turn_id: str | None
    """The turn it starts or waits for; null while no worker has taken it yet (`queued`)."""


class MessageList(BaseModel):
    """A page of the transcript; pass `next_after_id` as `after_id` for the next page. A page
    ends at its `limit` or at its byte budget, whichever comes first (a message larger than
    the budget comes alone)."""

    messages: list[StoredMessage]
    has_more: bool
    """Whether more messages follow this page."""
    next_after_id: int | None
    """Set exactly when `has_more`."""
