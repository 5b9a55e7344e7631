"""The one part model every provider maps onto, and the messages that hold parts.

Parts are what is persisted (messages.parts JSON) and what clients see.
Deltas are what streams while a model step is in flight.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "INTERNAL_FIELDS",
    "AnsweredCall",
    "FilePart",
    "Message",
    "Part",
    "PartDelta",
    "ReasoningPart",
    "Role",
    "SourcePart",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "Usage",
    "calls_to_run",
    "error_result",
    "without_provider_metadata",
]

Role = Literal["system", "user", "assistant", "tool"]


class TextPart(BaseModel):
    """Plain text written by the user or the model."""

    type: Literal["text"] = "text"
    text: str


class ReasoningPart(BaseModel):
    """Model reasoning ("thinking"); `signature`/`provider_data` round-trip to the provider."""

    type: Literal["reasoning"] = "reasoning"
    text: str = ""
    signature: str | None = None
    """Anthropic thinking signature; required to send thinking back."""
    provider_data: dict[str, Any] | None = None
    """Opaque provider payload (redacted thinking, OpenAI encrypted reasoning item)."""


class ToolCallPart(BaseModel):
    """A tool call made by the model; `arguments` is the raw JSON text the model produced."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str = ""
    original_arguments: str | None = None
    """The model's own arguments, when a person approved the call with edited ones (which
    `arguments` then holds, so the model sees what ran)."""
    provider_executed: bool = False
    """True for server-side tools (web search) that the provider runs itself."""
    provider_data: dict[str, Any] | None = None
    """Opaque provider payload needed to replay a provider-executed call."""

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the JSON object providers take back ({} for text that isn't
        one: a model's malformed arguments can't be replayed as they were)."""
        try:
            value = json.loads(self.arguments) if self.arguments else {}
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


class ToolResultPart(BaseModel):
    """The result of one tool call, in the order the calls were made."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    output: Any = None
    """Text or JSON; media results carry `media_type` and base64 `data` instead."""
    is_error: bool = False
    media_type: str | None = None
    data: str | None = None
    provider_executed: bool = False
    provider_data: dict[str, Any] | None = None


class AnsweredCall(Protocol):
    """What an error result needs of the call it answers: a `ToolCallPart`, or a workflow's
    reference to one."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...


def error_result(call: AnsweredCall, message: str) -> ToolResultPart:
    """An error result the model sees instead of output."""
    return ToolResultPart(tool_call_id=call.id, name=call.name, output=message, is_error=True)


class SourcePart(BaseModel):
    """A citation/source the model (or a provider tool) referred to."""

    type: Literal["source"] = "source"
    url: str
    title: str | None = None


class FilePart(BaseModel):
    """A file (image, document) as base64 data with its media type."""

    type: Literal["file"] = "file"
    media_type: str
    data: str
    name: str | None = None


Part = Annotated[
    TextPart | ReasoningPart | ToolCallPart | ToolResultPart | SourcePart | FilePart,
    Field(discriminator="type"),
]


class PartDelta(BaseModel):
    """A streamed fragment of the part at `index` in the step being generated.

    `type` says which part kind it grows; for tool calls the first delta carries
    `id` and `name`, later ones only `args_delta`.
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    type: Literal["text", "reasoning", "tool_call", "tool_result", "source", "file"]
    text: str | None = None
    signature: str | None = None
    id: str | None = None
    name: str | None = None
    args_delta: str | None = None
    part: dict[str, Any] | None = None
    """A whole part, for kinds that arrive in one piece (source, provider tool result)."""


class Usage(BaseModel):
    """Token usage of one model step (or a sum of steps)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


INTERNAL_FIELDS = ("signature", "provider_data")
"""Part fields that go back to the provider but never to clients."""


def calls_to_run(parts: Sequence[Part]) -> list[ToolCallPart]:
    """The tool calls among `parts` that the worker or the client runs, in call order (a
    provider-executed call is answered by the provider itself)."""
    return [p for p in parts if isinstance(p, ToolCallPart) and not p.provider_executed]


def without_provider_metadata(part: Part) -> Part:
    """The part as clients see it: no signatures or opaque provider payloads."""
    internal = {f: None for f in INTERNAL_FIELDS if getattr(part, f, None) is not None}
    return part.model_copy(update=internal) if internal else part


class Message(BaseModel):
    """One transcript message as the providers see it."""

    role: Role
    parts: list[Part]
    response_id: str | None = None
    """The provider's stored response this assistant message came from, if any."""
