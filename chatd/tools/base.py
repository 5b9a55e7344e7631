"""How a built-in tool is defined and found.

A tool is a name, a description, a pydantic model for its arguments (the JSON schema
the model sees is derived from it), an async function, a timeout and an idempotency flag.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from chatd.providers.base import ToolSpec

if TYPE_CHECKING:
    from chatd.store.chats import ChatRecord
    from chatd.store.transcript import TranscriptStore

__all__ = [
    "InvalidArguments",
    "MediaOutput",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
]

ArgsT = TypeVar("ArgsT", bound=BaseModel)


class MediaOutput(BaseModel):
    """A media tool result (an image, say) as base64 data."""

    media_type: str
    data: str


ToolOutput = str | dict[str, Any] | list[Any] | MediaOutput


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know about its call."""

    chat_id: str
    tool_call_id: str
    workspace: Path
    """The chat's own directory on this worker; tools must stay inside it."""
    owner: str | None = None
    """The chat's owner, for tools the operator allows only some owners (None: unknown)."""
    turn_id: str | None = None
    """The turn whose step made the call (None: unknown)."""
    step: int | None = None
    """The step of the turn that made the call (None: unknown)."""
    chat: ChatRecord | None = None
    """The chat as the worker read it for this call: its model, prompt and parent."""
    transcript: TranscriptStore | None = None
    """The chat's transcript, for tools that read what the model saw (the advisor)."""


class InvalidArguments(ValueError):
    """A call's arguments are not JSON, or don't fit the tool's schema (the message says
    which, for the model or the person who edited them)."""


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    """A built-in tool executed on the worker."""

    name: str
    description: str
    args: type[ArgsT]
    run: Callable[[ArgsT, ToolContext], Awaitable[ToolOutput]]
    timeout: timedelta = timedelta(seconds=60)
    idempotent: bool = True
    """Safe to run again after a worker crash; if False a crashed call is not retried."""
    exclusive: bool = False
    """Must be the only tool call in its step."""
    stop_after: bool = False
    """A successful call ends the turn."""
    inline: bool = False
    """Quick and local (well under a second, no I/O that can hang): runs as a local activity
    in the workflow's own task, which saves the server's schedule, start and completion of an
    activity and a workflow task; or, if idempotent and every call of its step is quick,
    inside the model step's activity, which then streams the next step too. Not
    heartbeated, so never for a tool that can run long."""
    read_only: bool = False
    """Declared safe: it changes nothing. Shown to whoever approves a call; the chat's
    policy still decides whether it is asked."""
    json_schema: dict[str, Any] | None = None
    """For tools described by a JSON Schema instead of `args` (an MCP server's tools):
    the schema the model sees, which arguments are checked against."""

    def check_arguments(self, arguments: Any) -> ArgsT:
        """The arguments, validated; `InvalidArguments` says why they don't fit."""
        if self.json_schema is not None:
            errors = sorted(Draft202012Validator(self.json_schema).iter_errors(arguments), key=str)
            if errors:
                where = "/".join(str(p) for p in errors[0].absolute_path) or "arguments"
                raise InvalidArguments(f"{where}: {errors[0].message}")
        try:
            return self.args.model_validate(arguments)
        except ValidationError as err:
            raise InvalidArguments(str(err)) from None

    def parse_arguments(self, text: str) -> ArgsT:
        """The arguments the model wrote (JSON text), validated."""
        try:
            arguments = json.loads(text or "{}")
        except json.JSONDecodeError as err:
            raise InvalidArguments(f"not valid JSON ({err})") from None
        return self.check_arguments(arguments)

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return self._spec

    @cached_property
    def _spec(self) -> ToolSpec:
        """Made once: deriving the JSON schema costs ~0.2 ms, and every model step asks."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.json_schema or self.args.model_json_schema(),
        )


@dataclass
class ToolRegistry:
    """The built-in tools a worker offers, by name."""

    tools: dict[str, Tool[Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool[Any]]) -> ToolRegistry:
        """A registry holding these tools."""
        registry = cls()
        for tool in tools:
            registry.register(tool)
        return registry

    def register(self, tool: Tool[Any]) -> None:
        """Add a tool; names are unique."""
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self.tools[tool.name] = tool

    def get(self, name: str) -> Tool[Any] | None:
        """The tool called `name`, if registered."""
        return self.tools.get(name)

    def active(self, active_tools: list[str] | None) -> list[Tool[Any]]:
        """The tools a chat may use: all, or those named in `active_tools`."""
        if active_tools is None:
            return list(self.tools.values())
        return [t for name, t in self.tools.items() if name in active_tools]
